//go:build licensetestkey && licensevendor

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// In a test build the key from $MESH_LICENSE_TEST_PUBLIC_KEY is trusted, so
// verify without --pub sees what a test-build operator would.
func TestVerifyWithTestKeyFromEnv(t *testing.T) {
	dir := t.TempDir()
	cli(t, "", "keygen", "--out", dir)
	priv := filepath.Join(dir, "license-signing.key")
	_, b64, _ := cli(t, "", "pubkey", "--key", priv)
	t.Setenv("MESH_LICENSE_TEST_PUBLIC_KEY", strings.TrimSpace(b64))
	_, lic, _ := cli(t, "", "sign", "--key", priv, "--licensee", "e2e", "--features", "preview", "--valid-for", "24h")
	if code, out, errOut := cli(t, lic, "verify", "-"); code != 0 {
		t.Fatalf("verify: %d %s %s", code, out, errOut)
	}
}
