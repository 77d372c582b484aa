package sailinstall

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyChart is a chart archive with one template and two CRDs in one file.
func tinyChart(t *testing.T, version string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, data := range map[string]string{
		"Chart.yaml":           fmt.Sprintf("apiVersion: v2\nname: sail-operator\nversion: %s\n", version),
		"templates/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
		"crds/sail.yaml":       "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: istios.sailoperator.io\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: ztunnels.sailoperator.io\n",
		"crds/security.yml":    "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: peerauthentications.security.istio.io\n",
		"crds/README.md":       "not a manifest",
		"templates/NOTES.txt":  "hello",
		"values.yaml":          "{}\n",
		"templates/other.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: y\n",
	} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "sail-operator/" + name, Mode: 0o644, Size: int64(len(data))}))
		_, err := tw.Write([]byte(data))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, gz.Close())
	return buf.Bytes()
}

func repo(t *testing.T, archives map[string][]byte, digest func(string, []byte) string) *httptest.Server {
	index := "apiVersion: v1\nentries:\n  sail-operator:\n"
	for v, a := range archives {
		index += fmt.Sprintf("  - version: %s\n    urls: [sail-operator-%s.tgz]\n    digest: %s\n", v, v, digest(v, a))
	}
	index += "  - version: not-semver\n    urls: [x.tgz]\n  - version: 9.9.9\n    urls: []\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/repo/index.yaml" {
			_, _ = w.Write([]byte(index))
			return
		}
		for v, a := range archives {
			if r.URL.Path == "/repo/sail-operator-"+v+".tgz" {
				_, _ = w.Write(a)
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func sha(_ string, b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestFetch(t *testing.T) {
	archives := map[string][]byte{"1.29.0": tinyChart(t, "1.29.0"), "1.30.1": tinyChart(t, "1.30.1"), "1.31.0-rc.1": tinyChart(t, "1.31.0-rc.1")}
	srv := repo(t, archives, sha)
	ctx := context.Background()

	ch, err := ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator"}.Fetch(ctx, srv.Client())
	require.NoError(t, err)
	assert.Equal(t, "1.30.1", ch.Metadata.Version, "newest stable, release candidates skipped")

	ch, err = ChartSource{Repository: srv.URL + "/repo/", Name: "sail-operator", Version: "1.29.0"}.Fetch(ctx, srv.Client())
	require.NoError(t, err)
	assert.Equal(t, "1.29.0", ch.Metadata.Version)

	ch, err = ChartSource{Repository: srv.URL + "/repo/sail-operator-1.29.0.tgz", Name: "sail-operator"}.Fetch(ctx, srv.Client())
	require.NoError(t, err, "a .tgz URL is the archive itself")
	assert.Equal(t, "1.29.0", ch.Metadata.Version)

	names, err := CRDNames(ch)
	require.NoError(t, err)
	assert.Equal(t, []string{"istios.sailoperator.io", "peerauthentications.security.istio.io", "ztunnels.sailoperator.io"}, names)

	for name, src := range map[string]ChartSource{
		"unknown version":    {Repository: srv.URL + "/repo", Name: "sail-operator", Version: "1.28.0"},
		"unknown chart":      {Repository: srv.URL + "/repo", Name: "istiod"},
		"no repository":      {Repository: srv.URL + "/nothing", Name: "sail-operator"},
		"archive mismatch":   {Repository: srv.URL + "/repo/sail-operator-1.29.0.tgz", Name: "sail-operator", Version: "1.30.1"},
		"not a chart":        {Repository: srv.URL + "/repo/index.yaml.tgz", Name: "sail-operator"},
		"bad repository url": {Repository: "http://127.0.0.1:1/\x7f", Name: "sail-operator"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := src.Fetch(ctx, srv.Client())
			assert.Error(t, err)
		})
	}
}

func TestFetchChecksDigest(t *testing.T) {
	srv := repo(t, map[string][]byte{"1.30.0": tinyChart(t, "1.30.0")}, func(string, []byte) string { return "00" })
	_, err := ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator"}.Fetch(context.Background(), srv.Client())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not match the repository index's digest")
}
