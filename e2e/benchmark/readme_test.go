package benchmark

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplaceBlock(t *testing.T) {
	doc := "# Title\n\nintro\n\n" + readmeStart + "\nold table\nold line\n" + readmeEnd + "\n\n## Next\nrest\n"
	got, err := replaceBlock(doc, "new table\n")
	require.NoError(t, err)
	assert.Equal(t, "# Title\n\nintro\n\n"+readmeStart+"\nnew table\n"+readmeEnd+"\n\n## Next\nrest\n", got, "only the block changes")
	again, err := replaceBlock(got, "new table")
	require.NoError(t, err)
	assert.Equal(t, got, again, "rewriting with the same block changes nothing")

	for name, bad := range map[string]string{
		"no markers":       "# Title\n",
		"no end":           readmeStart + "\nx\n",
		"two blocks":       readmeStart + readmeEnd + readmeStart + readmeEnd,
		"end before start": readmeEnd + "\n" + readmeStart,
	} {
		_, err := replaceBlock(bad, "x")
		assert.Error(t, err, name)
	}
}

func sampleRun(started string, ratio float64) *Run {
	r := &Run{Started: started, Commit: "0123456789abcdef", Host: Host{UptimeStart: " 17:00:00 up 1:00,  0 user,  load average: 1.50, 1.20, 0.90"},
		Results: []Result{{N: 30, ConvergenceSeconds: 10, FloorSeconds: 8, Ratio: ratio, ParallelFloorSeconds: 9, ParallelRatio: 1.11, PeakRSSMiB: 55.5, RSSKiBPerFleet: 1894,
			Roll: Roll{OverheadPerMember: 0.42}, Reaction: Reaction{Seconds: []float64{0.1, 0.3}, P50: 0.1, P99: 0.3},
			Restart: Restart{InformersSyncedSeconds: 1.5, AllReconciledSeconds: 2.5, Ratio: 1.67}}},
		Mesh: []MeshResult{{Namespaces: 10, ReadyToStrictSeconds: 3.2, FloorSeconds: 1.6, FloorRatio: 2, PerNamespace: map[string]float64{"APPLY namespaces": 2}}},
	}
	r.Targets = targets(r)
	return r
}

func TestReadmeBlockFromNewestResult(t *testing.T) {
	dir := t.TempDir()
	for name, r := range map[string]*Run{
		"20261201T100000Z.json": sampleRun("2026-12-01T10:00:00Z", 1.11),
		"20261202T100000Z.json": sampleRun("2026-12-02T10:00:00Z", 1.25),
	} {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	readme := filepath.Join(dir, "README.md")
	require.NoError(t, os.WriteFile(readme, []byte("top\n"+readmeStart+"\nstale\n"+readmeEnd+"\nbottom\n"), 0o644))

	require.NoError(t, UpdateReadme(readme, dir))
	b, err := os.ReadFile(readme)
	require.NoError(t, err)
	got := string(b)
	assert.True(t, strings.HasPrefix(got, "top\n"+readmeStart+"\n"), got)
	assert.True(t, strings.HasSuffix(got, readmeEnd+"\nbottom\n"), got)
	assert.NotContains(t, got, "stale")
	assert.Contains(t, got, "bench/results/20261202T100000Z.md", "links the newest result")
	assert.Contains(t, got, "| 30 | 10.0 | 8.0 / 9.0 | 1.25 (1.25 / 1.11) | 0 | 55.5 (1894) | 0.42 | 0.10 / 0.30 | 2.5 / 1.5, 0 |", "newest numbers, not the older file's 1.11")
	assert.Contains(t, got, "| 10 | 3.2 | 1.6 | 2.00 | APPLY namespaces 2 | 0 |")
	assert.Contains(t, got, "load average: 1.50, 1.20, 0.90")
	assert.Contains(t, got, "Targets met:")

	require.NoError(t, UpdateReadme(readme, dir))
	again, err := os.ReadFile(readme)
	require.NoError(t, err)
	assert.Equal(t, got, string(again), "idempotent")
}

func TestUpdateReadmeNeedsResults(t *testing.T) {
	dir := t.TempDir()
	readme := filepath.Join(dir, "README.md")
	require.NoError(t, os.WriteFile(readme, []byte(readmeStart+readmeEnd), 0o644))
	assert.Error(t, UpdateReadme(readme, dir))
}

func TestMeshLinearity(t *testing.T) {
	rs := []MeshResult{
		{Namespaces: 300, WritesByResource: map[string]float64{"APPLY namespaces": 603, "POST events": 310, "PATCH servicemeshes/status": 3, "GET x": 0}},
		{Namespaces: 10, WritesByResource: map[string]float64{"APPLY namespaces": 23, "POST events": 12, "PATCH servicemeshes/status": 4}},
		{Namespaces: 100, WritesByResource: map[string]float64{"APPLY namespaces": 203, "POST events": 102, "PATCH servicemeshes/status": 4, "PUT grows": 100 * 100}},
		{Namespaces: 50, Error: "failed runs are left out"},
	}
	rs[0].WritesByResource["PUT grows"] = 300 * 300
	rs[1].WritesByResource["PUT grows"] = 10 * 10
	assert.Equal(t, []string{
		"APPLY namespaces: 2 per namespace + 3 fixed",
		"GET x: 0 per namespace + 0 fixed",
		"PATCH servicemeshes/status: 0 per namespace + 3–4 fixed",
		"POST events: NOT constant per namespace (12@10, 102@100, 310@300)",
		"PUT grows: NOT constant per namespace (100@10, 10000@100, 90000@300)",
	}, meshLinearity(rs))
	assert.Nil(t, meshLinearity(rs[:1]), "one count cannot show a slope")
}

func TestReadmeBlockJoinsFleetAndMeshRuns(t *testing.T) {
	dir := t.TempDir()
	fleets := sampleRun("2026-12-01T10:00:00Z", 1.3)
	fleets.Mesh = nil
	fleets.Targets = targets(fleets)
	meshOnly := sampleRun("2026-12-02T10:00:00Z", 1.3)
	meshOnly.Results = nil
	meshOnly.Targets = targets(meshOnly)
	for name, r := range map[string]*Run{"20261201T100000Z.json": fleets, "20261202T100000Z.json": meshOnly} {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	readme := filepath.Join(dir, "README.md")
	require.NoError(t, os.WriteFile(readme, []byte(readmeStart+readmeEnd), 0o644))
	require.NoError(t, UpdateReadme(readme, dir))
	b, err := os.ReadFile(readme)
	require.NoError(t, err)
	got := string(b)
	assert.Contains(t, got, "bench/results/20261202T100000Z.md", "the newest run, mesh only")
	assert.Contains(t, got, "| 10 | 3.2 | 1.6 | 2.00 | APPLY namespaces 2 | 0 |")
	assert.Contains(t, got, "bench/results/20261201T100000Z.md", "and the newest run with fleets")
	assert.Contains(t, got, "| 30 | 10.0 | 8.0 / 9.0 | 1.25 (1.30 / 1.11) |")
}

// TestTargetsSayWhenTheTargetNFailed: a target checked below N=1,000
// because the N=1,000 bed failed says so, not that N=1,000 was not run
// (20261203T125733Z's README block said "was not run").
func TestTargetsSayWhenTheTargetNFailed(t *testing.T) {
	run := &Run{Results: []Result{
		{N: 100, ConvergenceSeconds: 38.2, FloorSeconds: 31.5, ParallelFloorSeconds: 24.8, Ratio: 1.21, ParallelRatio: 1.54},
		{N: 1000, Error: "parallel floor: 0 of 3000 Pods serving after 15m0s"},
	}}
	var notes []string
	for _, tg := range targets(run) {
		notes = append(notes, tg.Note)
	}
	all := strings.Join(notes, "\n")
	assert.Contains(t, all, "measured at N=100: N=1000 failed")
	assert.NotContains(t, all, "N=1000 was not run")

	run.Results = run.Results[:1]
	notes = nil
	for _, tg := range targets(run) {
		notes = append(notes, tg.Note)
	}
	assert.Contains(t, strings.Join(notes, "\n"), "measured at N=100: N=1000 was not run")
}

// The mesh target is judged on the median ratio of the largest M's runs,
// and not at all from fewer than minMeshRuns of them: one run's ratio has
// varied by more than the target's margin on this host.
func TestMeshTargetOnTheMedianOfRuns(t *testing.T) {
	run := func(ratios ...float64) *Run {
		writes := func(m int) map[string]float64 { return map[string]float64{"APPLY namespaces": float64(2*m + 3)} }
		r := &Run{Mesh: []MeshResult{{Namespaces: 300, ReadyToStrictSeconds: 9, FloorSeconds: 3, FloorRatio: 3, WritesByResource: writes(300)}}}
		for _, x := range ratios {
			r.Mesh = append(r.Mesh, MeshResult{Namespaces: targetM, ReadyToStrictSeconds: 10 * x, FloorSeconds: 10, FloorRatio: x, WritesByResource: writes(targetM)})
		}
		r.Mesh = append(r.Mesh, MeshResult{Namespaces: targetM, Error: "bed failed"})
		return r
	}
	find := func(r *Run) Target {
		for _, tg := range targets(r) {
			if strings.HasPrefix(tg.Name, "mesh: all STRICT") {
				return tg
			}
		}
		t.Fatal("no mesh floor target")
		return Target{}
	}

	one := find(run(1.1))
	assert.False(t, one.Met, "one run is too few to judge, however good")
	assert.True(t, one.Unjudged)
	assert.Contains(t, one.Note, "too few runs")
	assert.Contains(t, one.Measured, "median 1.10 of 1 run(s)")

	met := find(run(1.9, 1.1, 1.15))
	assert.True(t, met.Met, "median 1.15 ≤ %.1f, although one run was 1.9", targetMeshFloorRatio)
	assert.Contains(t, met.Measured, "median 1.15 of 3 run(s)")

	missed := find(run(1.13, 1.8, 1.99, 1.22))
	assert.False(t, missed.Met, "median of four runs is (1.22+1.8)/2")
	assert.False(t, missed.Unjudged)
	assert.Contains(t, missed.Measured, "median 1.51 of 4 run(s)")
	assert.Contains(t, missed.Note, "median over by 0.31")

	assert.Equal(t, []string{"APPLY namespaces: 2 per namespace + 3 fixed"}, meshLinearity(run(1.1, 1.2).Mesh),
		"repeats of one M count once: the slope is between different M")
}

// A run without the floors (-no-floors) says so in the README instead of
// showing floors of 0 s and ratios of 0.
func TestReadmeRowWithoutFloors(t *testing.T) {
	r := sampleRun("2026-12-02T10:00:00Z", 1.2)
	r.Results[0].FloorSeconds, r.Results[0].ParallelFloorSeconds, r.Results[0].Ratio, r.Results[0].ParallelRatio = 0, 0, 0, 0
	block := readmeBlock(r, "bench/results/x")
	assert.Contains(t, block, "| 30 | 10.0 | not run | — | 0 |")
	assert.NotContains(t, block, "0.0 / 0.0")
	r.Targets = targets(r)
	block = readmeBlock(r, "bench/results/x")
	_, missed, _ := strings.Cut(block, "**Missed:**")
	assert.NotContains(t, missed, "convergence vs", "a floor not run is not a missed target")
	assert.Contains(t, block, "Not judged by this run: convergence vs the fastest floor at N=30 (the floors were not run")
}

// The cost table divides each phase by its units: 30 fleets created with
// 6 CPU seconds and 300 requests cost 0.2 s and 10 requests each; a steady
// phase of 60 s with 0.3 s and 30 requests is 18 s and 1,800 requests per
// hour for the 30, so 0.6 s and 60 per fleet-hour.
func TestCostBlock(t *testing.T) {
	r := sampleRun("2026-12-01T10:00:00Z", 1.1)
	r.Results[0].Create = Phase{Seconds: 40, CPUSeconds: 6, Requests: Requests{"PATCH": 240, "POST": 30, "GET": 30}}
	r.Results[0].Steady = Phase{Seconds: 60, CPUSeconds: 0.3, Requests: Requests{"GET": 30}}
	r.Results[0].TemplateRoll = Phase{Seconds: 5, CPUSeconds: 0.25, Requests: Requests{"DELETE": 3, "PATCH": 9}}
	r.Mesh[0].Enroll = Phase{Seconds: 4, CPUSeconds: 0.5, Requests: Requests{"PATCH": 50}}
	got := costBlock(r)
	assert.Contains(t, got, "| 30 | 0.200 / 10.0 | 0.60 / 60.0 (over 60 s) | 0.250 / 12.0 |")
	assert.Contains(t, got, "| 10 | 0.050 / 5.0 | not measured |", "a settle phase that was not timed is not extrapolated")
	r.Results = nil
	assert.NotContains(t, costBlock(r), "Cost per fleet", "no fleet table without fleet results")
}
