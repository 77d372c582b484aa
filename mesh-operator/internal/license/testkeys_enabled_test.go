//go:build licensetestkey

package license

import (
	"flag"
	"testing"
)

// Run with: go test -tags licensetestkey ./internal/license/

func TestTestBuildTrustsTestKeyFromEnv(t *testing.T) {
	if !TestKeysEnabled {
		t.Fatal("TestKeysEnabled is false with the licensetestkey tag")
	}
	pub, priv := testKeyPair(9)
	t.Setenv(TestPublicKeyEnv, EncodePublicKey(pub))
	keys, err := TrustedKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != len(ReleaseKeys())+1 || !keys[len(keys)-1].Equal(pub) {
		t.Fatalf("test key not added: %d keys", len(keys))
	}
	if _, err := Verify(mint(t, baseLicense(), priv), keys, now); err != nil {
		t.Fatalf("test-key license in a test build: %v", err)
	}
}

func TestTestBuildTrustsTestKeyFromFlagPEM(t *testing.T) {
	pub, _ := testKeyPair(9)
	t.Setenv(TestPublicKeyEnv, "")
	pemText, _ := MarshalPublicKeyPEM(pub)
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	var o KeyOptions
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--" + TestPublicKeyFlag, string(pemText)}); err != nil {
		t.Fatal(err)
	}
	keys, err := o.TrustedKeys()
	if err != nil || !keys[len(keys)-1].Equal(pub) {
		t.Fatalf("got %d keys, %v", len(keys), err)
	}
}

func TestTestBuildRejectsBadTestKey(t *testing.T) {
	if keys, err := (KeyOptions{TestPublicKey: "not-a-key"}).TrustedKeys(); err == nil || keys != nil {
		t.Fatalf("bad test key accepted: %d keys, %v", len(keys), err)
	}
}

func TestTestBuildWithoutTestKey(t *testing.T) {
	keys, err := (KeyOptions{}).TrustedKeys()
	if err != nil || len(keys) != len(ReleaseKeys()) {
		t.Fatalf("got %d keys, %v", len(keys), err)
	}
}
