//go:build !licensetestkey

package license

import (
	"crypto/ed25519"
	"errors"
	"flag"
	"testing"
)

// These tests run in the default build, the one releases are made from,
// and prove that no run-time setting adds a trusted key there.

func TestReleaseBuildHasNoTestKeyPath(t *testing.T) {
	if TestKeysEnabled {
		t.Fatal("TestKeysEnabled is true without the licensetestkey tag")
	}
}

func TestReleaseBuildIgnoresTestKeyEnv(t *testing.T) {
	pub, priv := testKeyPair(9)
	t.Setenv(TestPublicKeyEnv, EncodePublicKey(pub))

	keys, err := TrustedKeys()
	if !errors.Is(err, ErrTestKeysDisabled) {
		t.Fatalf("err = %v, want ErrTestKeysDisabled", err)
	}
	assertReleaseKeysOnly(t, keys)
	// The license a test would mint is refused, as a release build must.
	if _, err := Verify(mint(t, baseLicense(), priv), keys, now); ReasonOf(err) != ReasonBadSignature {
		t.Fatalf("test-key license in a release build: %v, want %s", err, ReasonBadSignature)
	}
}

func TestReleaseBuildIgnoresTestKeyFlag(t *testing.T) {
	pub, _ := testKeyPair(9)
	t.Setenv(TestPublicKeyEnv, "")
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	var o KeyOptions
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--" + TestPublicKeyFlag + "=" + EncodePublicKey(pub)}); err != nil {
		t.Fatalf("the flag must exist in release builds too: %v", err)
	}
	keys, err := o.TrustedKeys()
	if !errors.Is(err, ErrTestKeysDisabled) {
		t.Fatalf("err = %v, want ErrTestKeysDisabled", err)
	}
	assertReleaseKeysOnly(t, keys)
}

func TestReleaseBuildWithoutTestKey(t *testing.T) {
	t.Setenv(TestPublicKeyEnv, "")
	keys, err := TrustedKeys()
	if err != nil {
		t.Fatal(err)
	}
	assertReleaseKeysOnly(t, keys)
}

func assertReleaseKeysOnly(t *testing.T, keys []ed25519.PublicKey) {
	t.Helper()
	release := ReleaseKeys()
	if len(keys) != len(release) {
		t.Fatalf("got %d trusted keys, want only the %d release keys", len(keys), len(release))
	}
	for i := range keys {
		if !keys[i].Equal(release[i]) {
			t.Fatalf("trusted key %d is not the release key", i)
		}
	}
}
