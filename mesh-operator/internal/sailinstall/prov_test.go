package sailinstall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/provenance"
)

// signer is an OpenPGP key that signs charts as `helm package --sign` does,
// with its public keyring written to a file.
type signer struct {
	entity  *openpgp.Entity
	keyring string
}

func newSigner(t *testing.T, name string) signer {
	t.Helper()
	e, err := openpgp.NewEntity(name, "test", name+"@example.com", nil)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name+".gpg")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, e.Serialize(f))
	require.NoError(t, f.Close())
	return signer{entity: e, keyring: path}
}

func (s signer) sign(t *testing.T, archive []byte, filename, version string) []byte {
	t.Helper()
	prov, err := (&provenance.Signatory{Entity: s.entity}).ClearSign(archive, filename,
		fmt.Appendf(nil, "apiVersion: v2\nname: sail-operator\nversion: %s\n", version))
	require.NoError(t, err)
	return []byte(prov)
}

// provRepo serves one chart version, its archive and its .prov.
func provRepo(t *testing.T, archive, prov []byte) *httptest.Server {
	t.Helper()
	sum := sha256.Sum256(archive)
	index := fmt.Sprintf("apiVersion: v1\nentries:\n  sail-operator:\n  - name: sail-operator\n    apiVersion: v2\n    version: 1.30.0\n    urls: [sail-operator-1.30.0.tgz]\n    digest: %s\n", hex.EncodeToString(sum[:]))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/index.yaml":
			_, _ = w.Write([]byte(index))
		case "/sail-operator-1.30.0.tgz":
			_, _ = w.Write(archive)
		case "/sail-operator-1.30.0.tgz.prov":
			if prov == nil {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write(prov)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestFetchVerifiesProvenance: with a keyring, the chart is installed only
// when its .prov is signed by a key of the keyring and names the archive's
// sha256 (helm install --verify).
func TestFetchVerifiesProvenance(t *testing.T) {
	archive := tinyChart(t, "1.30.0")
	vendor, other := newSigner(t, "vendor"), newSigner(t, "other")
	const file = "sail-operator-1.30.0.tgz"
	fetch := func(srv *httptest.Server, keyring string) error {
		src := ChartSource{Repository: srv.URL, Name: "sail-operator", Version: "1.30.0", Digest: sha("", archive), InsecureHTTP: true, Keyring: keyring}
		_, err := src.Fetch(context.Background(), srv.Client())
		return err
	}

	require.NoError(t, fetch(provRepo(t, archive, vendor.sign(t, archive, file, "1.30.0")), vendor.keyring), "signed by the trusted key")

	err := fetch(provRepo(t, archive, other.sign(t, archive, file, "1.30.0")), vendor.keyring)
	require.Error(t, err, "signed by a key outside the keyring")
	assert.Contains(t, err.Error(), "provenance")

	// The same chart packed again (files in another order): a valid
	// archive whose sha256 the .prov does not name.
	tampered := repacked(t, archive, "1.30.0")
	err = fetch(provRepo(t, tampered, vendor.sign(t, archive, file, "1.30.0")), vendor.keyring)
	require.Error(t, err, "the .prov names another archive")
	assert.Contains(t, err.Error(), "sha256")

	err = fetch(provRepo(t, archive, nil), vendor.keyring)
	require.Error(t, err, "no .prov at all")
	assert.Contains(t, err.Error(), ".prov")

	require.NoError(t, fetch(provRepo(t, archive, nil), ""), "without a keyring no provenance is required")
}
