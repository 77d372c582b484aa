//go:build licensevendor

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeygenSignVerify(t *testing.T) {
	dir := t.TempDir()
	if code, out, errOut := cli(t, "", "keygen", "--out", dir); code != 0 || !strings.Contains(out, "base64:") {
		t.Fatalf("keygen: %d %s %s", code, out, errOut)
	}
	priv := filepath.Join(dir, "license-signing.key")
	pub := filepath.Join(dir, "license-signing.pub")
	if st, err := os.Stat(priv); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode: %v %v", st, err)
	}
	if code, _, errOut := cli(t, "", "keygen", "--out", dir); code != exitFailed || !strings.Contains(errOut, "--force") {
		t.Fatalf("keygen overwrote a key pair: %d %s", code, errOut)
	}

	code, lic, errOut := cli(t, "", "sign", "--key", priv, "--licensee", "Example Corp",
		"--features", "service-mesh, preview", "--not-before", "2026-01-01", "--not-after", "2026-10-01T00:00:00Z", "--id", "lic-1")
	if code != 0 || errOut != "" {
		t.Fatalf("sign: %d %s", code, errOut)
	}
	file := filepath.Join(dir, "license.json")
	if err := os.WriteFile(file, []byte(lic), 0o644); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := cli(t, "", "verify", "--pub", pub, file)
	if code != 0 || !strings.Contains(out, `valid: license "lic-1" for "Example Corp"`) || !strings.Contains(out, "121 days left") {
		t.Fatalf("verify: %d %q %q", code, out, errOut)
	}
	if code, out, _ := cli(t, lic, "verify", "--pub", pub, "-"); code != 0 {
		t.Fatalf("verify from stdin: %d %s", code, out)
	}
	if code, _, errOut := cli(t, "", "verify", "--pub", pub, "--at", "2026-10-01", file); code != exitFailed ||
		!strings.Contains(errOut, "LicenseExpired: license \"lic-1\" for \"Example Corp\" expired on 2026-10-01") {
		t.Fatalf("verify expired: %d %s", code, errOut)
	}
	// Against the build's own keys (the release key in a default build) a
	// license signed with a fresh key is refused.
	t.Setenv("MESH_LICENSE_TEST_PUBLIC_KEY", "")
	if code, _, errOut := cli(t, "", "verify", file); code != exitFailed || !strings.Contains(errOut, "LicenseBadSignature") {
		t.Fatalf("verify with build keys: %d %s", code, errOut)
	}

	code, b64, _ := cli(t, "", "pubkey", "--key", priv)
	code2, b64FromPub, _ := cli(t, "", "pubkey", "--pub", pub)
	if code != 0 || code2 != 0 || b64 != b64FromPub || len(strings.TrimSpace(b64)) != 44 {
		t.Fatalf("pubkey: %q %q", b64, b64FromPub)
	}
}

func TestSignToFileAndValidFor(t *testing.T) {
	dir := t.TempDir()
	cli(t, "", "keygen", "--out", dir, "--name", "k")
	out := filepath.Join(dir, "l.json")
	if code, _, errOut := cli(t, "", "sign", "--key", filepath.Join(dir, "k.key"), "--licensee", "X",
		"--features", "preview", "--valid-for", "1h", "--out", out); code != 0 {
		t.Fatalf("sign: %s", errOut)
	}
	if code, stdout, errOut := cli(t, "", "verify", "--pub", filepath.Join(dir, "k.pub"), out); code != 0 ||
		!strings.Contains(stdout, "1h0m0s left") || !strings.Contains(stdout, `"lic-`) {
		t.Fatalf("verify: %d %s %s", code, stdout, errOut)
	}
}

func TestSignWarnsWithoutMeshFeature(t *testing.T) {
	dir := t.TempDir()
	cli(t, "", "keygen", "--out", dir)
	code, _, errOut := cli(t, "", "sign", "--key", filepath.Join(dir, "license-signing.key"), "--licensee", "X",
		"--features", "observability", "--valid-for", "24h")
	if code != 0 || !strings.Contains(errOut, "warning") {
		t.Fatalf("%d %s", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"keygen"},
		{"sign", "--licensee", "X", "--valid-for", "1h"},
		{"sign", "--key", "k", "--valid-for", "1h"},
		{"sign", "--key", "k", "--licensee", "X"},
		{"sign", "--key", "k", "--licensee", "X", "--valid-for", "1h", "--not-after", "2027-01-01"},
		{"sign", "--key", "k", "--licensee", "X", "--not-after", "next tuesday"},
		{"verify"},
		{"verify", "a", "b"},
		{"verify", "--bogus", "a"},
		{"pubkey"},
	} {
		if code, _, _ := cli(t, "", args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, errOut := cli(t, "", "--help"); code != 0 || !strings.Contains(errOut, "keygen --out DIR") {
		t.Errorf("help: %d", code)
	}
}
