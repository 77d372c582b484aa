package license

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
)

func TestReleaseKey(t *testing.T) {
	keys := ReleaseKeys()
	if len(keys) == 0 {
		t.Fatal("no release keys")
	}
	for seed := range byte(8) {
		pub, _ := testKeyPair(seed)
		for _, k := range keys {
			if k.Equal(pub) {
				t.Fatalf("the release key is a test key (seed %d)", seed)
			}
		}
	}
	// The test keys must not verify as release keys: a license minted for a
	// test is refused by a release build.
	_, priv := testKeyPair(1)
	if _, err := Verify(mint(t, baseLicense(), priv), keys, now); ReasonOf(err) != ReasonBadSignature {
		t.Fatalf("test-signed license against release keys: %v", err)
	}
}

func TestParsePublicKey(t *testing.T) {
	pub, _ := testKeyPair(3)
	pemText, err := MarshalPublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string]string{
		"pem":             string(pemText),
		"pem with text":   "# test key\n" + string(pemText) + "trailer\n",
		"base64":          EncodePublicKey(pub),
		"base64 newlines": "\n" + EncodePublicKey(pub) + "\n",
	} {
		got, err := ParsePublicKey([]byte(in))
		if err != nil || !got.Equal(pub) {
			t.Errorf("%s: got %x, %v", name, got, err)
		}
	}
	privPEM, _ := MarshalPrivateKeyPEM(ed25519.NewKeyFromSeed(make([]byte, 32)))
	for name, in := range map[string]string{
		"empty":           "",
		"short":           base64.StdEncoding.EncodeToString(pub[:31]),
		"long":            base64.StdEncoding.EncodeToString(append(bytes.Clone(pub), 0)),
		"not base64":      "not a key",
		"url base64":      base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)),
		"private pem":     string(privPEM),
		"garbage pem":     "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
		"truncated pem":   strings.Split(string(pemText), "\n")[0],
		"rsa-looking pem": "-----BEGIN RSA PUBLIC KEY-----\nAAAA\n-----END RSA PUBLIC KEY-----\n",
	} {
		if k, err := ParsePublicKey([]byte(in)); err == nil {
			t.Errorf("%s: accepted as %x", name, k)
		}
	}
}

func TestParsePrivateKey(t *testing.T) {
	pub, priv := testKeyPair(4)
	pemText, err := MarshalPrivateKeyPEM(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, _ := MarshalPublicKeyPEM(pub)
	for name, in := range map[string]string{
		"pem":                 string(pemText),
		"pem after comments":  "# keep secret\n# public: " + EncodePublicKey(pub) + "\n" + string(pemText) + string(pubPEM),
		"base64 seed":         base64.StdEncoding.EncodeToString(priv.Seed()),
		"base64 64-byte form": base64.StdEncoding.EncodeToString(priv),
	} {
		got, err := ParsePrivateKey([]byte(in))
		if err != nil || !got.Equal(priv) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	inconsistent := bytes.Clone(priv)
	inconsistent[40] ^= 1
	for name, in := range map[string]string{
		"empty":        "",
		"public pem":   string(pubPEM),
		"inconsistent": base64.StdEncoding.EncodeToString(inconsistent),
		"wrong size":   base64.StdEncoding.EncodeToString(priv[:40]),
		"garbage":      "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
	} {
		if _, err := ParsePrivateKey([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
