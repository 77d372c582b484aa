package license

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"
)

// Tests use their own deterministic key pairs, never the release key: the
// private half of that one is not in the repository.
func testKeyPair(seed byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	priv := ed25519.NewKeyFromSeed(s)
	return priv.Public().(ed25519.PublicKey), priv
}

// now is the instant the tests verify at, inside baseLicense's validity.
var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func baseLicense() License {
	return License{
		ID:        "lic-test-0001",
		Licensee:  "Example Corp",
		Features:  []string{FeatureServiceMesh},
		IssuedAt:  time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotBefore: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:  time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC),
	}
}

func mint(t testing.TB, l License, priv ed25519.PrivateKey) []byte {
	t.Helper()
	raw, err := Sign(l, priv)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return raw
}

// rawEnvelope builds an envelope by hand, for the shapes Sign refuses to make.
func rawEnvelope(version int, payload, sig []byte) []byte {
	out, err := json.Marshal(map[string]any{
		"version":   version,
		"payload":   base64.StdEncoding.EncodeToString(payload),
		"signature": base64.StdEncoding.EncodeToString(sig),
	})
	if err != nil {
		panic(err)
	}
	return out
}

// signedDoc signs an arbitrary document body, valid or not.
func signedDoc(doc string, priv ed25519.PrivateKey) []byte {
	return rawEnvelope(1, []byte(doc), ed25519.Sign(priv, []byte(doc)))
}
