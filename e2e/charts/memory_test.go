package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// memoryLimitShare is shared/manager's: the operators set GOMEMLIMIT to this
// part of the container's memory limit.
const memoryLimitShare = 0.9

// TestMemoryLimitFromDownwardAPI: both charts pass the operator container's
// memory limit in MiB through the downward API (MEMORY_LIMIT_MIB), from
// which the operator sets GOMEMLIMIT to 90 % of it (shared/manager);
// whatever limit the Pod ends up with (values, a LimitRange, a VPA), the
// soft limit follows. A GOMEMLIMIT in extraEnv wins.
func TestMemoryLimitFromDownwardAPI(t *testing.T) {
	want := corev1.EnvVar{Name: "MEMORY_LIMIT_MIB", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
		ContainerName: "operator", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}}
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			c := operatorContainer(t, deployment(t, render(t, r, nil), r.namespace, r.name))
			assert.Contains(t, c.Env, want)
			for _, e := range c.Env {
				assert.NotEqual(t, "GOMEMLIMIT", e.Name, "the operator derives it; the chart sets none")
			}
			c = operatorContainer(t, deployment(t, render(t, r, values{"extraEnv": []values{{"name": "GOMEMLIMIT", "value": "300MiB"}}}), r.namespace, r.name))
			assert.Contains(t, c.Env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: "300MiB"})
		})
	}
}

// TestDefaultMemoryLimitFitsBenchmark: each chart's default memory limit,
// of which GOMEMLIMIT takes 90 %, holds the largest peak RSS the newest
// benchmark measured (bench/results: fleets up to N=1,000, mesh namespaces
// up to M=1,000), so the default install runs the benchmarked load without
// the garbage collector working harder than it did there.
func TestDefaultMemoryLimitFitsBenchmark(t *testing.T) {
	fleetPeak, meshPeak := newestPeaks(t)
	for _, tc := range []struct {
		release release
		peakMiB float64
	}{{fleetRelease, fleetPeak}, {meshRelease, meshPeak}} {
		t.Run(tc.release.chart, func(t *testing.T) {
			c := operatorContainer(t, deployment(t, render(t, tc.release, nil), tc.release.namespace, tc.release.name))
			limit, ok := c.Resources.Limits[corev1.ResourceMemory]
			require.True(t, ok, "a default memory limit")
			soft := float64(limit.Value()) * memoryLimitShare / (1 << 20)
			assert.GreaterOrEqual(t, soft, tc.peakMiB, "GOMEMLIMIT of the default limit %s (%.0f MiB) is below the benchmark's peak RSS %.1f MiB", limit.String(), soft, tc.peakMiB)
			req := c.Resources.Requests[corev1.ResourceMemory]
			assert.LessOrEqual(t, req.Value(), limit.Value())
		})
	}
}

// newestPeaks is the largest peak RSS of the newest result with fleets and
// of the newest with mesh namespaces.
func newestPeaks(t *testing.T) (fleet, mesh float64) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "bench", "results", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	sort.Sort(sort.Reverse(sort.StringSlice(files)))
	for _, f := range files {
		var run struct {
			Results []struct {
				PeakRSSMiB float64 `json:"peakRSSMiB"`
				Error      string  `json:"error"`
			} `json:"results"`
			Mesh []struct {
				PeakRSSMiB float64 `json:"peakRSSMiB"`
				Error      string  `json:"error"`
			} `json:"mesh"`
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &run), f)
		if fleet == 0 {
			for _, x := range run.Results {
				if x.Error == "" {
					fleet = max(fleet, x.PeakRSSMiB)
				}
			}
		}
		if mesh == 0 {
			for _, x := range run.Mesh {
				if x.Error == "" {
					mesh = max(mesh, x.PeakRSSMiB)
				}
			}
		}
	}
	require.NotZero(t, fleet, "no fleet result in bench/results")
	require.NotZero(t, mesh, "no mesh result in bench/results")
	return fleet, mesh
}
