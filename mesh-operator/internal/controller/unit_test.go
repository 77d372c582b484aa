package controller

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/detect"
)

func TestImageTag(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/istio/pilot:1.29.2":           "1.29.2",
		"registry.local:5000/istio/pilot:1.30.0": "1.30.0",
		"registry.local:5000/istio/pilot":        "",
		"gcr.io/istio-release/pilot@sha256:abcd": "",
		"quay.io/sail/pilot:1.30.0@sha256:abcd":  "1.30.0",
		"pilot":                                  "",
	} {
		assert.Equal(t, want, imageTag(in), in)
	}
}

func TestIstiodOf(t *testing.T) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod", Generation: 3, Labels: map[string]string{"istio.io/rev": "stable"}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "discovery", Image: "docker.io/istio/pilot:1.30.0"}}}}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, AvailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}},
	}
	got := istiodOf(d)
	assert.Equal(t, detect.Istiod{Namespace: "istio-system", Name: "istiod", Revision: "stable", Version: "1.30.0"}, got, "a stale Available is not trusted")
	d.Status.ObservedGeneration = 3
	assert.True(t, istiodOf(d).Available)
	d.Status.AvailableReplicas = 0
	assert.False(t, istiodOf(d).Available)
}

func TestPickIstiod(t *testing.T) {
	canary := detect.Istiod{Name: "istiod-canary", Revision: "canary", Available: true}
	def := detect.Istiod{Name: "istiod"}
	defUp := detect.Istiod{Name: "istiod", Available: true}
	assert.Equal(t, canary, pickIstiod([]detect.Istiod{def, canary}), "available first")
	assert.Equal(t, defUp, pickIstiod([]detect.Istiod{canary, defUp}), "then the default revision")
}

func TestConfigFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.BindFlags(fs)
	require.NoError(t, fs.Parse(nil))
	assert.True(t, c.SailInstall)
	assert.Equal(t, DefaultSailChartRepository, c.SailChart.Repository)
	assert.Equal(t, DefaultSailNamespace, c.SailNamespace)
	c.OperatorNamespace = "mesh-system"
	require.NoError(t, c.Validate())

	assert.Equal(t, DefaultSailChartVersion, c.SailChart.Version, "the tested chart version is pinned by default")
	assert.NotEmpty(t, c.SailChart.Version)
	assert.Equal(t, DefaultSailChartDigest, c.SailChart.Digest, "with the digest this release ships for it")
	assert.False(t, c.SailChart.InsecureHTTP)

	require.NoError(t, fs.Parse([]string{"--sail-chart-repository", "oci://registry.local/charts"}))
	require.NoError(t, c.Validate(), "OCI registries are supported (over https unless --sail-chart-insecure-http)")
	require.NoError(t, fs.Parse([]string{"--sail-chart-repository", "ftp://registry.local/charts"}))
	assert.ErrorContains(t, c.Validate(), "https or oci URL")
	t.Setenv(EnvSailChartUsername, "mirror")
	t.Setenv(EnvSailChartPassword, "s3cret")
	require.NoError(t, fs.Parse([]string{"--sail-chart-repository", "https://mirror.example.com/charts"}))
	require.NoError(t, c.Validate())
	assert.Equal(t, "mirror", c.SailChart.Username, "credentials come from the environment")
	assert.Equal(t, "s3cret", c.SailChart.Password)
	require.NoError(t, fs.Parse([]string{"--sail-chart-repository", "http://mirror.example.com/charts"}))
	assert.ErrorContains(t, c.Validate(), "--sail-chart-insecure-http", "plain http needs the explicit flag")
	require.NoError(t, fs.Parse([]string{"--sail-chart-repository", "http://mirror.example.com/charts", "--sail-chart-insecure-http"}))
	require.NoError(t, c.Validate())
	assert.True(t, c.SailChart.InsecureHTTP)
	require.NoError(t, fs.Parse([]string{"--sail-chart-repository", "https://mirror.example.com/charts", "--sail-chart-insecure-http=false"}))
	require.NoError(t, c.Validate())
	require.NoError(t, fs.Parse([]string{"--sail-install=false"}))
	require.NoError(t, c.Validate(), "the repository is not used without installs")
}

// TestChartValuesPinTheTestedSailVersion: the mesh-operator chart passes
// --sail-chart-version, so its default must be the same pinned version.
// TestSailChartDigestPairsWithItsVersion: the compiled-in digest vouches
// for the compiled-in version only; another version takes its own digest.
func TestSailChartDigestPairsWithItsVersion(t *testing.T) {
	parse := func(args ...string) Config {
		var c Config
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c.BindFlags(fs)
		require.NoError(t, fs.Parse(args))
		c.OperatorNamespace = "mesh-system"
		require.NoError(t, c.Validate())
		return c
	}
	assert.Empty(t, parse("--sail-chart-version=1.31.0").SailChart.Digest, "another version without its digest pins nothing: the fetch refuses it")
	digest := strings.Repeat("0f", 32)
	c := parse("--sail-chart-version=1.31.0", "--sail-chart-digest="+digest)
	assert.Equal(t, "1.31.0", c.SailChart.Version)
	assert.Equal(t, digest, c.SailChart.Digest)
	assert.Equal(t, digest, parse("--sail-chart-digest="+digest).SailChart.Digest, "a digest given for the default version replaces the compiled-in one")
}

func TestChartValuesPinTheTestedSailVersion(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "charts", "mesh-operator", "values.yaml"))
	require.NoError(t, err)
	var v struct {
		Sail struct {
			Chart struct {
				Repository   string `json:"repository"`
				Version      string `json:"version"`
				Digest       string `json:"digest"`
				InsecureHTTP bool   `json:"insecureHTTP"`
			} `json:"chart"`
		} `json:"sail"`
	}
	require.NoError(t, yaml.Unmarshal(data, &v))
	assert.Equal(t, DefaultSailChartVersion, v.Sail.Chart.Version)
	assert.Empty(t, v.Sail.Chart.Digest, "the chart leaves the digest to the operator's compiled-in one for its default version")
	assert.Equal(t, DefaultSailChartRepository, v.Sail.Chart.Repository)
	assert.False(t, v.Sail.Chart.InsecureHTTP)
}

func TestSailValuesFlag(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.BindFlags(fs)
	require.NoError(t, fs.Parse([]string{`--sail-values={"image":"mirror.example/sail-operator:1.30.0","operator":{"replicas":2}}`}))
	assert.Equal(t, map[string]any{"image": "mirror.example/sail-operator:1.30.0", "operator": map[string]any{"replicas": float64(2)}}, c.SailValues)

	for _, bad := range []string{`[1]`, `image: x`, `"x"`} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.BindFlags(fs)
		err := fs.Parse([]string{"--sail-values=" + bad})
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "--sail-values must be a JSON object")
	}
}
