package sailinstall

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
	helmregistry "helm.sh/helm/v4/pkg/registry"
)

// ociRegistry runs a Docker registry (distribution) in memory on
// 127.0.0.1 with basic auth, and returns its host:port.
func ociRegistry(t *testing.T, user, password string) string {
	t.Helper()
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	require.NoError(t, err)
	htpasswd := filepath.Join(dir, "htpasswd")
	require.NoError(t, os.WriteFile(htpasswd, fmt.Appendf(nil, "%s:%s\n", user, hash), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host := ln.Addr().String()
	require.NoError(t, ln.Close())

	cfg := &configuration.Configuration{}
	cfg.HTTP.Addr = host
	cfg.HTTP.DrainTimeout = time.Second
	cfg.Storage = map[string]configuration.Parameters{"inmemory": map[string]any{}}
	cfg.Auth = configuration.Auth{"htpasswd": configuration.Parameters{"realm": "test", "path": htpasswd}}
	cfg.Log.AccessLog.Disabled = true
	cfg.Log.Level = "error"
	ctx, cancel := context.WithCancel(context.Background())
	reg, err := registry.NewRegistry(ctx, cfg)
	require.NoError(t, err)
	go func() { _ = reg.ListenAndServe() }()
	t.Cleanup(func() {
		cancel()
		_ = reg.Shutdown(context.Background())
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + host + "/v2/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	}, 10*time.Second, 50*time.Millisecond, "the test registry on %s", host)
	return host
}

// TestFetchFromOCIRegistry: an oci:// repository is pulled through Helm's
// registry client, with basic auth, at the pinned version.
func TestFetchFromOCIRegistry(t *testing.T) {
	const user, password = "mirror", "s3cret"
	host := ociRegistry(t, user, password)
	pusher, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptBasicAuth(user, password),
		helmregistry.ClientOptWriter(io.Discard), helmregistry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")))
	require.NoError(t, err)
	vendor := newSigner(t, "vendor")
	archive := tinyChart(t, "1.30.0")
	_, err = pusher.Push(archive, host+"/charts/sail-operator:1.30.0",
		helmregistry.PushOptProvData(vendor.sign(t, archive, "sail-operator-1.30.0.tgz", "1.30.0")))
	require.NoError(t, err)
	_, err = pusher.Push(tinyChart(t, "1.31.0"), host+"/charts/sail-operator:1.31.0")
	require.NoError(t, err)

	src := ChartSource{Repository: "oci://" + host + "/charts", Name: "sail-operator", Version: "1.30.0", Digest: sha("", archive), InsecureHTTP: true, Username: user, Password: password}
	ch, err := src.Fetch(context.Background(), &http.Client{Timeout: 30 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, "sail-operator", ch.Metadata.Name)
	assert.Equal(t, "1.30.0", ch.Metadata.Version, "the pinned version, not the newest")

	bad := src
	bad.Password = "wrong"
	_, err = bad.Fetch(context.Background(), nil)
	require.Error(t, err)
	assert.Contains(t, strings.ToLower(err.Error()), "unauthorized")

	https := src
	https.InsecureHTTP = false
	_, err = https.Fetch(context.Background(), nil)
	require.Error(t, err, "without the insecure setting an OCI registry is spoken to over https only")

	// With a keyring: the provenance layer pushed with 1.30.0 is verified;
	// 1.31.0 has none, and another key does not vouch for 1.30.0.
	signed := src
	signed.Keyring = vendor.keyring
	_, err = signed.Fetch(context.Background(), nil)
	require.NoError(t, err)
	unsigned := signed
	unsigned.Version = "1.31.0"
	_, err = unsigned.Fetch(context.Background(), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "provenance")
	foreign := signed
	foreign.Keyring = newSigner(t, "other").keyring
	_, err = foreign.Fetch(context.Background(), nil)
	require.ErrorContains(t, err, "provenance verification failed")

	unpinned := src
	unpinned.Version = ""
	_, err = unpinned.Fetch(context.Background(), nil)
	require.ErrorIs(t, err, ErrChartNotPinned)
	assert.Contains(t, err.Error(), "no chart version")

	otherDigest := src
	otherDigest.Digest = sha("", repacked(t, archive, "1.30.0"))
	_, err = otherDigest.Fetch(context.Background(), nil)
	require.ErrorIs(t, err, ErrChartNotPinned, "the registry's own digests do not replace the pinned one")
}

// TestHTTPClientTrustsCAFile: a repository whose certificate a private CA
// signed (an internal mirror) is trusted with that CA's bundle, and refused
// without it.
func TestHTTPClientTrustsCAFile(t *testing.T) {
	archive := tinyChart(t, "1.30.0")
	srv := httptest.NewTLSServer(repoHandler(t, map[string][]byte{"1.30.0": archive}, sha))
	t.Cleanup(srv.Close)
	require.True(t, strings.HasPrefix(srv.URL, "https://127.0.0.1:"))
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	src := ChartSource{Repository: srv.URL + "/repo", Name: "sail-operator", Version: "1.30.0", Digest: sha("", archive)}

	hc, err := HTTPClient(caFile, time.Minute)
	require.NoError(t, err)
	ch, err := src.Fetch(context.Background(), hc)
	require.NoError(t, err)
	assert.Equal(t, "1.30.0", ch.Metadata.Version)

	hc, err = HTTPClient("", time.Minute)
	require.NoError(t, err)
	_, err = src.Fetch(context.Background(), hc)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")

	_, err = HTTPClient(filepath.Join(t.TempDir(), "missing.crt"), time.Minute)
	require.Error(t, err)
	empty := filepath.Join(t.TempDir(), "empty.crt")
	require.NoError(t, os.WriteFile(empty, []byte("not a certificate"), 0o600))
	_, err = HTTPClient(empty, time.Minute)
	require.ErrorContains(t, err, "no PEM certificate")
}
