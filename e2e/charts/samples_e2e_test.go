//go:build e2e

package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSamplesApply applies every docs/samples manifest to a real API server
// with the operators' CRDs, so the CRD schemas and CEL rules judge them, and
// checks that broken variants of the same samples are refused, so a pass
// means the validation ran.
func TestSamplesApply(t *testing.T) {
	samples, err := filepath.Glob(filepath.Join(samplesDir(t), "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, samples)

	c := upAPIServer(t, operatorCRDPaths(t)...)
	for _, path := range samples {
		t.Run(filepath.Base(path), func(t *testing.T) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, applyYAML(t, c, string(b)))
			assertStored(t, c, loadSample(t, filepath.Base(path)))
		})
	}

	// The same samples with one mistake each.
	for _, tc := range []struct {
		sample, old, new, want string
	}{
		{"fleet-basic.yaml", "replicas: 3 ", "replicas: 300 ", "spec.replicas"},
		{"fleet-basic.yaml", "size: 10Gi", "size: 10", "spec.storage.size"},
		{"fleet-basic.yaml", "name: my-fleet ", "name: my-fleet-with-a-name-that-is-longer-than-forty-seven ", "metadata.name"},
		{"servicemesh.yaml", "mode: managed", "mode: managd", "spec.mode"},
		{"servicemesh.yaml", `version: "1.30"`, `version: "latest"`, "spec.version"},
	} {
		t.Run("refused: "+tc.sample+" "+tc.new, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(samplesDir(t), tc.sample))
			require.NoError(t, err)
			require.Equal(t, 1, strings.Count(string(b), tc.old), "the sample changed: %q not found once", tc.old)
			err = applyYAML(t, c, strings.Replace(string(b), tc.old, tc.new, 1))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
