package charts

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// samplesDir holds the user-facing samples (docs/samples).
func samplesDir(t testing.TB) string {
	return filepath.Join(repoRoot(t), "docs", "samples")
}

func loadSample(t testing.TB, name string) manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(samplesDir(t), name))
	require.NoError(t, err)
	m, err := decodeManifest(string(b))
	require.NoError(t, err, name)
	return m
}

// TestSamplesConsistent checks what the API server cannot: that the objects
// of a sample fit together the way the docs say.
func TestSamplesConsistent(t *testing.T) {
	m := loadSample(t, "fleet-basic.yaml")
	require.Len(t, m, 2, "a CelldFleet and its client:\n%s", m)
	fleets := m.all("CelldFleet")
	require.Len(t, fleets, 1)
	fleet := fleets[0]
	assert.Equal(t, "celld.eric.dev/v1alpha1", fleet.GetAPIVersion())
	for _, o := range m {
		assert.Empty(t, o.GetNamespace(), "%s %s: samples apply to any namespace (kubectl apply -n)", o.GetKind(), o.GetName())
	}
	size, found, err := unstructured.NestedString(fleet.Object, "spec", "storage", "size")
	require.NoError(t, err)
	assert.True(t, found && size != "", "a persistent fleet has spec.storage.size")

	deployments := m.all("Deployment")
	require.Len(t, deployments, 1)
	d := convert[appsv1.Deployment](t, deployments[0])
	assert.Equal(t, fleet.GetName(), d.Spec.Template.Labels["celld.eric.dev/client-of"],
		"the client's Pod template carries the label the fleet NetworkPolicy admits")
	for k, v := range d.Spec.Selector.MatchLabels {
		assert.Equal(t, v, d.Spec.Template.Labels[k])
	}
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	var urls []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		urls = append(urls, e.Value)
	}
	assert.Contains(t, urls, "http://"+fleet.GetName()+":8080", "the client calls the fleet Service on 8080")

	m = loadSample(t, "servicemesh.yaml")
	require.Len(t, m, 1)
	assert.Equal(t, "ServiceMesh", m[0].GetKind())
	assert.Equal(t, "cluster", m[0].GetName(), "the singleton must be named cluster")
	b, err := os.ReadFile(filepath.Join(samplesDir(t), "servicemesh.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "--from-file=license=license.json", "the sample says how to create the license Secret")
	assert.Contains(t, string(b), "mesh-operator-license")
}
