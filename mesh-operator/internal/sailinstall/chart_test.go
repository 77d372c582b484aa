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

// repacked is the same chart packed again with its files in another order:
// a valid archive whose sha256 differs from archive's. tinyChart's order
// comes from map iteration, so one call alone may repeat archive's bytes.
func repacked(t *testing.T, archive []byte, version string) []byte {
	t.Helper()
	for {
		if other := tinyChart(t, version); !bytes.Equal(other, archive) {
			return other
		}
	}
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
		index += fmt.Sprintf("  - name: sail-operator\n    apiVersion: v2\n    version: %s\n    urls: [sail-operator-%s.tgz]\n    digest: %s\n", v, v, digest(v, a))
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
	pinned := func(version string) string { return sha("", archives[version]) }

	ch, err := ChartSource{Repository: srv.URL + "/repo/", Name: "sail-operator", Version: "1.29.0", Digest: pinned("1.29.0"), InsecureHTTP: true}.Fetch(ctx, srv.Client())
	require.NoError(t, err)
	assert.Equal(t, "1.29.0", ch.Metadata.Version)

	ch, err = ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator", Version: "1.31.0-rc.1", Digest: "sha256:" + pinned("1.31.0-rc.1"), InsecureHTTP: true}.Fetch(ctx, srv.Client())
	require.NoError(t, err, "a pinned release candidate, digest with its algorithm prefix")
	assert.Equal(t, "1.31.0-rc.1", ch.Metadata.Version)

	ch, err = ChartSource{Repository: srv.URL + "/repo/sail-operator-1.29.0.tgz", Name: "sail-operator", Version: "1.29.0", Digest: pinned("1.29.0"), InsecureHTTP: true}.Fetch(ctx, srv.Client())
	require.NoError(t, err, "a .tgz URL is the archive itself")
	assert.Equal(t, "1.29.0", ch.Metadata.Version)

	names, err := CRDNames(ch)
	require.NoError(t, err)
	assert.Equal(t, []string{"istios.sailoperator.io", "peerauthentications.security.istio.io", "ztunnels.sailoperator.io"}, names)

	for name, src := range map[string]ChartSource{
		"no version (newest is not pinned)": {Repository: srv.URL + "/repo", Name: "sail-operator", Digest: pinned("1.30.1")},
		"unknown version":                   {Repository: srv.URL + "/repo", Name: "sail-operator", Version: "1.28.0", Digest: pinned("1.29.0")},
		"unknown chart":                     {Repository: srv.URL + "/repo", Name: "istiod", Version: "1.29.0", Digest: pinned("1.29.0")},
		"no repository":                     {Repository: srv.URL + "/nothing", Name: "sail-operator", Version: "1.29.0", Digest: pinned("1.29.0")},
		"archive of another version":        {Repository: srv.URL + "/repo/sail-operator-1.29.0.tgz", Name: "sail-operator", Version: "1.30.1", Digest: pinned("1.29.0")},
		"not a chart":                       {Repository: srv.URL + "/repo/index.yaml.tgz", Name: "sail-operator", Version: "1.29.0", Digest: pinned("1.29.0")},
		"bad repository url":                {Repository: "http://127.0.0.1:1/\x7f", Name: "sail-operator", Version: "1.29.0", Digest: pinned("1.29.0")},
	} {
		t.Run(name, func(t *testing.T) {
			src.InsecureHTTP = true
			_, err := src.Fetch(ctx, srv.Client())
			assert.Error(t, err)
		})
	}
}

// TestFetchRequiresHTTPS: without InsecureHTTP nothing is fetched from a
// plain http repository or archive URL. (What an index points to is
// pinned by the digest, and gets no credentials unless on the
// repository's own scheme and host: TestFetchSendsCredentialsOnlyToTheRepository.)
func TestFetchRequiresHTTPS(t *testing.T) {
	ctx := context.Background()
	archive := tinyChart(t, "1.30.0")
	plain := repo(t, map[string][]byte{"1.30.0": archive}, sha)
	_, err := ChartSource{Repository: plain.URL + "/repo", Name: "sail-operator", Version: "1.30.0", Digest: sha("", archive)}.Fetch(ctx, plain.Client())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "https")
	_, err = ChartSource{Repository: plain.URL + "/repo/sail-operator-1.30.0.tgz", Name: "sail-operator", Version: "1.30.0", Digest: sha("", archive)}.Fetch(ctx, plain.Client())
	require.Error(t, err, "an archive URL too")

	tlsSrv := httptest.NewTLSServer(repoHandler(t, map[string][]byte{"1.30.0": archive}, sha))
	t.Cleanup(tlsSrv.Close)
	ch, err := ChartSource{Repository: tlsSrv.URL + "/repo", Name: "sail-operator", Version: "1.30.0", Digest: sha("", archive)}.Fetch(ctx, tlsSrv.Client())
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
