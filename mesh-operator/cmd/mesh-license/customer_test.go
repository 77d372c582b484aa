//go:build !licensevendor

package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
)

// TestCustomerBuildCannotSign: the build customers get (no licensevendor
// tag) refuses keygen and sign, and its binary does not even contain the
// code that reads a private key or signs a license.
func TestCustomerBuildCannotSign(t *testing.T) {
	dir := t.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pemKey, err := license.MarshalPrivateKeyPEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "vendor.key")
	if err := os.WriteFile(key, pemKey, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"keygen", "--out", dir, "--name", "mine"},
		{"sign", "--key", key, "--licensee", "me", "--features", "service-mesh", "--valid-for", "8760h"},
		{"pubkey", "--key", key},
	} {
		code, out, errOut := cli(t, "", args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "vendor build") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout, a pointer to the vendor build", args, code, out, errOut, exitUsage)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "mine.key")); err == nil {
		t.Error("keygen wrote a key pair")
	}
	if code, _, errOut := cli(t, "", "--help"); code != exitOK || strings.Contains(errOut, "sign --key") {
		t.Errorf("the customer build's help offers signing: %s", errOut)
	}

	// The binary itself: the linker keeps only reachable code, so signing
	// and private-key parsing must be absent from the symbol table.
	bin := filepath.Join(dir, "mesh-license")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	nm, err := exec.Command("go", "tool", "nm", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool nm: %v\n%s", err, nm)
	}
	verifyLinked := false
	for _, line := range strings.Split(string(nm), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		sym := f[len(f)-1]
		verifyLinked = verifyLinked || strings.HasSuffix(sym, "internal/license.Verify")
		for _, banned := range []string{"internal/license.Sign", "internal/license.ParsePrivateKey", "internal/license.MarshalPrivateKeyPEM", "ed25519.GenerateKey", "ed25519.Sign"} {
			if strings.HasSuffix(sym, banned) {
				t.Errorf("the customer binary links %s", sym)
			}
		}
	}
	if !verifyLinked {
		t.Error("internal/license.Verify not found in the binary's symbols: the check above would see nothing")
	}
}

// TestCustomerVerifyAndInspect: verify checks a license against a public
// key; inspect shows what any license file says, and whether it verifies,
// even when it does not.
func TestCustomerVerifyAndInspect(t *testing.T) {
	dir := t.TempDir()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := license.MarshalPublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := filepath.Join(dir, "vendor.pub")
	if err := os.WriteFile(pubFile, pubPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := license.Sign(license.License{
		ID: "lic-7", Licensee: "Example Corp", Features: []string{"service-mesh"},
		NotBefore: fixedNow.Add(-24 * time.Hour), NotAfter: fixedNow.Add(30 * 24 * time.Hour), IssuedAt: fixedNow.Add(-24 * time.Hour),
	}, priv)
	if err != nil {
		t.Fatal(err)
	}
	lic := filepath.Join(dir, "license.json")
	if err := os.WriteFile(lic, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := cli(t, "", "verify", "--pub", pubFile, lic); code != exitOK || !strings.Contains(out, `valid: license "lic-7" for "Example Corp"`) {
		t.Fatalf("verify: %d %q %q", code, out, errOut)
	}
	code, out, errOut := cli(t, "", "inspect", "--pub", pubFile, lic)
	if code != exitOK || !strings.Contains(out, `license "lic-7" for "Example Corp"`) || !strings.Contains(out, "features:  service-mesh") ||
		!strings.Contains(out, "signature: valid") {
		t.Fatalf("inspect: %d %q %q", code, out, errOut)
	}
	// Against the build's keys the vendor's test key is unknown: inspect
	// still shows the content and says the signature does not verify.
	t.Setenv("MESH_LICENSE_TEST_PUBLIC_KEY", "")
	code, out, errOut = cli(t, string(raw), "inspect", "-")
	if code != exitFailed || !strings.Contains(out, `license "lic-7" for "Example Corp"`) || !strings.Contains(out, "signature: LicenseBadSignature") {
		t.Fatalf("inspect, unknown key: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, "not a license", "inspect", "-"); code != exitFailed || !strings.Contains(errOut, "LicenseMalformed") {
		t.Fatalf("inspect, garbage: %d %q", code, errOut)
	}
}
