package sailinstall

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFetchSendsCredentialsOnlyToTheRepository: the repository's index
// names the archive on another host (a second server on 127.0.0.1). The
// repository's credentials go to the repository, never to that host.
func TestFetchSendsCredentialsOnlyToTheRepository(t *testing.T) {
	archive := tinyChart(t, "1.30.0")
	var elsewhereAuth, elsewhereHits atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhereHits.Add(1)
		if r.Header.Get("Authorization") != "" {
			elsewhereAuth.Add(1)
		}
		_, _ = w.Write(archive)
	}))
	t.Cleanup(elsewhere.Close)
	var repoAuth atomic.Int32
	repoSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); ok && u == "mirror" && p == "s3cret" {
			repoAuth.Add(1)
		}
		if r.URL.Path != "/repo/index.yaml" {
			http.NotFound(w, r)
			return
		}
		_, _ = fmt.Fprintf(w, "apiVersion: v1\nentries:\n  sail-operator:\n  - name: sail-operator\n    apiVersion: v2\n    version: 1.30.0\n    urls: [%s/charts/sail-operator-1.30.0.tgz]\n", elsewhere.URL)
	}))
	t.Cleanup(repoSrv.Close)
	require.True(t, strings.HasPrefix(elsewhere.URL, "http://127.0.0.1:") && strings.HasPrefix(repoSrv.URL, "http://127.0.0.1:"))

	src := ChartSource{Repository: repoSrv.URL + "/repo", Name: "sail-operator", Version: "1.30.0", Digest: sha("", archive),
		InsecureHTTP: true, Username: "mirror", Password: "s3cret"}
	ch, err := src.Fetch(context.Background(), repoSrv.Client())
	require.NoError(t, err)
	assert.Equal(t, "1.30.0", ch.Metadata.Version)
	assert.Positive(t, repoAuth.Load(), "the repository gets its credentials")
	assert.Positive(t, elsewhereHits.Load(), "the archive came from the host the index names")
	assert.Zero(t, elsewhereAuth.Load(), "the host the index names never sees the Authorization header")
}

// TestFetchRefusesAChartOtherThanThePinned: the repository serves another
// archive under the pinned version (its index's digest matching it, or no
// digest at all); only the pinned digest decides, and it refuses.
func TestFetchRefusesAChartOtherThanThePinned(t *testing.T) {
	pinned := tinyChart(t, "1.30.0")
	other := append(tinyChart(t, "1.30.0"), 0) // the same chart, another archive
	for name, digest := range map[string]func(string, []byte) string{
		"the index names the served archive's digest": sha,
		"the index names no digest":                   func(string, []byte) string { return "" },
	} {
		t.Run(name, func(t *testing.T) {
			srv := repo(t, map[string][]byte{"1.30.0": other}, digest)
			_, err := ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator", Version: "1.30.0", Digest: sha("", pinned), InsecureHTTP: true}.
				Fetch(context.Background(), srv.Client())
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrChartNotPinned)
			assert.Contains(t, err.Error(), sha("", pinned), "the refusal names the pinned digest")
		})
	}
	t.Run("no digest pinned", func(t *testing.T) {
		srv := repo(t, map[string][]byte{"1.30.0": pinned}, sha)
		_, err := ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator", Version: "1.30.0", InsecureHTTP: true}.Fetch(context.Background(), srv.Client())
		assert.ErrorIs(t, err, ErrChartNotPinned)
	})
}
