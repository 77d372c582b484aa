package benchmark

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

func TestFittingLimit(t *testing.T) {
	for peak, want := range map[float64]string{
		291.8: "384Mi", // 291.8 / 0.9 = 324.2
		154.2: "192Mi",
		57.6:  "64Mi",
		57.7:  "128Mi",
		921.6: "1Gi",
		921.7: "1088Mi",
	} {
		assert.Equal(t, want, fittingLimit(peak), "%.1f MiB", peak)
	}
}

// TestSizingBlock: the newest run with fleets and the newest with mesh
// namespaces each give their table; repeated namespace counts are one row
// with the largest numbers.
func TestSizingBlock(t *testing.T) {
	dir := t.TempDir()
	fleets := &Run{Started: "2026-12-01T10:00:00Z", Commit: "0123456789abcdef", Results: []Result{
		{N: 1000, PeakRSSMiB: 291.8, Create: Phase{Seconds: 200, CPUSeconds: 40}, Steady: Phase{Seconds: 50, CPUSeconds: 10}},
		{N: 30, PeakRSSMiB: 40, Create: Phase{Seconds: 10, CPUSeconds: 1}, Steady: Phase{Seconds: 50, CPUSeconds: 0.5}},
		{N: 300, Error: "left out"},
	}}
	older := &Run{Started: "2026-11-30T10:00:00Z", Commit: "fedcba9876543210", Results: []Result{{N: 5000, PeakRSSMiB: 999}},
		Mesh: []MeshResult{{Namespaces: 10, PeakRSSMiB: 1}}}
	mesh := &Run{Started: "2026-12-02T10:00:00Z", Commit: "abcdef0123456789", Mesh: []MeshResult{
		{Namespaces: 1000, PeakRSSMiB: 150, Enroll: Phase{Seconds: 10, CPUSeconds: 3}, Settle: Phase{Seconds: 7, CPUSeconds: 0.07}},
		{Namespaces: 300, PeakRSSMiB: 115.8, Enroll: Phase{Seconds: 4, CPUSeconds: 1}, Settle: Phase{Seconds: 7, CPUSeconds: 0.014}},
		{Namespaces: 1000, PeakRSSMiB: 154.2, Enroll: Phase{Seconds: 10, CPUSeconds: 2.5}, Settle: Phase{Seconds: 7, CPUSeconds: 0.035}},
	}}
	for name, r := range map[string]*Run{"20261130T100000Z.json": older, "20261201T100000Z.json": fleets, "20261202T100000Z.json": mesh} {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	got, err := SizedDoc("# Install\n\n## Sizing\n\n"+sizingStart+"\nstale\n"+sizingEnd+"\n\nafter\n", dir)
	require.NoError(t, err)
	assert.NotContains(t, got, "stale")
	assert.Contains(t, got, "[bench/results/20261201T100000Z.md](../bench/results/20261201T100000Z.md) (commit `0123456`")
	assert.Contains(t, got, "[bench/results/20261202T100000Z.md](../bench/results/20261202T100000Z.md) (commit `abcdef0`")
	assert.Contains(t, got, "| 30 | 40.0 | 133.3 | `64Mi` | 0.10 | 10 | 33.3 |\n| 1000 | 291.8 | 29.2 | `384Mi` | 0.20 | 200 | 20.0 |\n", "fleets by N, the failed one left out")
	assert.NotContains(t, got, "| 5000 |", "the newest fleet run only")
	assert.Contains(t, got, "| 300 | 115.8 | 38.6 | `192Mi` | 0.25 | 2 | 1 |\n| 1000 | 154.2 | 15.4 | `192Mi` | 0.30 | 10 | 2 |\n", "repeats folded, largest numbers")
	assert.True(t, len(got) > 0 && got[len(got)-len("\n\nafter\n"):] == "\n\nafter\n", "the rest of the document stays")
	again, err := SizedDoc(got, dir)
	require.NoError(t, err)
	assert.Equal(t, got, again, "idempotent")

	_, err = SizedDoc("no markers", dir)
	assert.Error(t, err)
}

// TestInstallSizingIsCurrent: docs/install.md's sizing table is what the
// newest results in bench/results give. After a `make bench` that did not
// rewrite it, FLEETMESH_UPDATE_SIZING=1 runs this test to rewrite it.
func TestInstallSizingIsCurrent(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	path, dir := filepath.Join(root, "docs", "install.md"), filepath.Join(root, "bench", "results")
	if os.Getenv("FLEETMESH_UPDATE_SIZING") != "" {
		require.NoError(t, UpdateSizing(path, dir))
	}
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	want, err := SizedDoc(string(doc), dir)
	require.NoError(t, err)
	assert.Equal(t, want, string(doc), "docs/install.md's sizing table is stale: run `FLEETMESH_UPDATE_SIZING=1 go test ./benchmark -run TestInstallSizingIsCurrent` in e2e and commit it")
}
