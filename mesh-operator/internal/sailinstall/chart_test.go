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
	srv := httptest.NewServer(repoHandler(t, archives, digest))
	t.Cleanup(srv.Close)
	return srv
}

// repoHandler serves archives as a chart repository under /repo.
func repoHandler(t *testing.T, archives map[string][]byte, digest func(string, []byte) string) http.Handler {
	t.Helper()
	index := "apiVersion: v1\nentries:\n  sail-operator:\n"
	for v, a := range archives {
		index += fmt.Sprintf("  - version: %s\n    urls: [sail-operator-%s.tgz]\n    digest: %s\n", v, v, digest(v, a))
	}
	index += "  - version: not-semver\n    urls: [x.tgz]\n  - version: 9.9.9\n    urls: []\n"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	})
}

func sha(_ string, b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestFetch(t *testing.T) {
	archives := map[string][]byte{"1.29.0": tinyChart(t, "1.29.0"), "1.30.1": tinyChart(t, "1.30.1"), "1.31.0-rc.1": tinyChart(t, "1.31.0-rc.1")}
	srv := repo(t, archives, sha)
	ctx := context.Background()

	ch, err := ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator", InsecureHTTP: true}.Fetch(ctx, srv.Client())
	require.NoError(t, err)
	assert.Equal(t, "1.30.1", ch.Metadata.Version, "newest stable, release candidates skipped")

	ch, err = ChartSource{Repository: srv.URL + "/repo/", Name: "sail-operator", Version: "1.29.0", InsecureHTTP: true}.Fetch(ctx, srv.Client())
	require.NoError(t, err)
	assert.Equal(t, "1.29.0", ch.Metadata.Version)

	ch, err = ChartSource{Repository: srv.URL + "/repo/sail-operator-1.29.0.tgz", Name: "sail-operator", InsecureHTTP: true}.Fetch(ctx, srv.Client())
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
			src.InsecureHTTP = true
			_, err := src.Fetch(ctx, srv.Client())
			assert.Error(t, err)
		})
	}
}

func TestFetchChecksDigest(t *testing.T) {
	srv := repo(t, map[string][]byte{"1.30.0": tinyChart(t, "1.30.0")}, func(string, []byte) string { return "00" })
	_, err := ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator", InsecureHTTP: true}.Fetch(context.Background(), srv.Client())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not match the repository index's digest")
}

// TestFetchRequiresHTTPS: without InsecureHTTP nothing is fetched over plain
// http, neither the repository, nor an archive an https index points to,
// nor the target of a redirect.
func TestFetchRequiresHTTPS(t *testing.T) {
	ctx := context.Background()
	archive := tinyChart(t, "1.30.0")
	plain := repo(t, map[string][]byte{"1.30.0": archive}, sha)
	_, err := ChartSource{Repository: plain.URL + "/repo", Name: "sail-operator"}.Fetch(ctx, plain.Client())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "https")
	_, err = ChartSource{Repository: plain.URL + "/repo/sail-operator-1.30.0.tgz", Name: "sail-operator"}.Fetch(ctx, plain.Client())
	require.Error(t, err, "an archive URL too")

	// An https index whose chart URL is plain http.
	var requested []string
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requested = append(requested, r.URL.Path)
		switch r.URL.Path {
		case "/repo/index.yaml":
			_, _ = fmt.Fprintf(w, "apiVersion: v1\nentries:\n  sail-operator:\n  - version: 1.30.0\n    urls: [%s/repo/sail-operator-1.30.0.tgz]\n    digest: %s\n", plain.URL, sha("", archive))
		case "/redirect/index.yaml":
			http.Redirect(w, r, plain.URL+"/repo/index.yaml", http.StatusFound)
		case "/good/index.yaml":
			_, _ = fmt.Fprintf(w, "apiVersion: v1\nentries:\n  sail-operator:\n  - version: 1.30.0\n    urls: [sail-operator-1.30.0.tgz]\n    digest: %s\n", sha("", archive))
		case "/good/sail-operator-1.30.0.tgz":
			_, _ = w.Write(archive)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(tlsSrv.Close)
	_, err = ChartSource{Repository: tlsSrv.URL + "/repo", Name: "sail-operator"}.Fetch(ctx, tlsSrv.Client())
	require.Error(t, err, "an https index pointing at an http archive")
	assert.Contains(t, err.Error(), "https")
	_, err = ChartSource{Repository: tlsSrv.URL + "/redirect", Name: "sail-operator"}.Fetch(ctx, tlsSrv.Client())
	require.Error(t, err, "a redirect to http")
	assert.Contains(t, err.Error(), "https")

	ch, err := ChartSource{Repository: tlsSrv.URL + "/good", Name: "sail-operator", Version: "1.30.0"}.Fetch(ctx, tlsSrv.Client())
	require.NoError(t, err, "https all the way")
	assert.Equal(t, "1.30.0", ch.Metadata.Version)
}

func TestRemovableCRDs(t *testing.T) {
	chartCRDs := []string{"istios.sailoperator.io", "ztunnels.sailoperator.io", "peerauthentications.security.istio.io", "widgets.example.com"}
	remove, ignored := RemovableCRDs([]string{
		"istios.sailoperator.io", "peerauthentications.security.istio.io", // the chart's, in Sail's API groups
		"istiorevisions.sailoperator.io",          // a Sail group, but not in this chart
		"widgets.example.com",                     // in the chart, but not a Sail API group
		"servicemeshes.core.navique.com", "", " ", // anything else
		"istios.sailoperator.io", // twice
	}, chartCRDs)
	assert.Equal(t, []string{"istios.sailoperator.io", "peerauthentications.security.istio.io"}, remove)
	assert.Equal(t, []string{"istiorevisions.sailoperator.io", "servicemeshes.core.navique.com", "widgets.example.com"}, ignored)

	for group, want := range map[string]bool{
		"sailoperator.io": true, "security.istio.io": true, "networking.istio.io": true, "extensions.istio.io": true,
		"istio.io": false, "evilistio.io": false, "core.navique.com": false, "apiextensions.k8s.io": false, "sailoperator.io.example.com": false,
	} {
		assert.Equal(t, want, SailAPIGroup(group), group)
	}
}
