package license

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// releasePublicKey verifies licenses issued for release builds: standard
// base64 of the raw 32-byte Ed25519 key. Only the public half lives in the
// repository; the private half is held by whoever issues licenses.
const releasePublicKey = "PamcT6/iUKrv2bXl0gTuo620QR+qFZate4s/mQynBJY="

// ReleaseKeys are the compiled-in keys every build trusts. A slice, so a
// key can be rotated by shipping the new key next to the old one for a
// while.
func ReleaseKeys() []ed25519.PublicKey {
	k, err := ParsePublicKey([]byte(releasePublicKey))
	if err != nil {
		// A constant that does not parse is a build mistake a unit test catches.
		panic("license: compiled-in release key is invalid: " + err.Error())
	}
	return []ed25519.PublicKey{k}
}

// Where a test build takes its extra trusted key from.
const (
	TestPublicKeyFlag = "license-test-public-key"
	TestPublicKeyEnv  = "MESH_LICENSE_TEST_PUBLIC_KEY"
)

// ErrTestKeysDisabled reports that a test key was configured for a release
// build, which ignores it. The operator should warn and carry on with the
// release keys: a license signed by the test key is then refused with
// ReasonBadSignature, which is the right outcome.
var ErrTestKeysDisabled = errors.New("a license test public key was configured (--" + TestPublicKeyFlag + " or $" +
	TestPublicKeyEnv + ") but this is a release build, which trusts only its compiled-in key; the test key is ignored")

// KeyOptions is the operator's license-key configuration.
type KeyOptions struct {
	// TestPublicKey is an extra key to trust (PEM or base64, see
	// ParsePublicKey). Honoured only by builds with the licensetestkey tag.
	TestPublicKey string
}

// BindFlags registers --license-test-public-key, defaulting to
// $MESH_LICENSE_TEST_PUBLIC_KEY. The flag exists in release builds too, so a
// mistaken deployment gets ErrTestKeysDisabled rather than a startup failure
// on an unknown flag.
func (o *KeyOptions) BindFlags(fs *flag.FlagSet) {
	usage := "extra Ed25519 public key (PEM or base64) trusted for licenses; honoured only by test builds (licensetestkey tag), ignored with a warning by release builds"
	fs.StringVar(&o.TestPublicKey, TestPublicKeyFlag, os.Getenv(TestPublicKeyEnv), usage)
}

// TrustedKeys returns the keys licenses are verified against: the release
// keys, plus the test key when this is a test build and one is configured.
// In a release build with a test key configured it returns the release keys
// and ErrTestKeysDisabled; in a test build a test key that does not parse is
// an error (and no keys), since a test that meant to use it would otherwise
// fail confusingly later.
func (o KeyOptions) TrustedKeys() ([]ed25519.PublicKey, error) {
	keys := ReleaseKeys()
	extra, err := testKeys(o.TestPublicKey)
	if errors.Is(err, ErrTestKeysDisabled) {
		return keys, err
	}
	if err != nil {
		return nil, err
	}
	return append(keys, extra...), nil
}

// TrustedKeys is KeyOptions.TrustedKeys with the test key taken from
// $MESH_LICENSE_TEST_PUBLIC_KEY, for callers without flags.
func TrustedKeys() ([]ed25519.PublicKey, error) {
	return KeyOptions{TestPublicKey: os.Getenv(TestPublicKeyEnv)}.TrustedKeys()
}

// ParsePublicKey reads an Ed25519 public key as a PEM "PUBLIC KEY" block
// (PKIX, what openssl and mesh-license keygen write) or as standard base64
// of the raw 32 bytes (handy in an environment variable). Surrounding
// whitespace is ignored.
func ParsePublicKey(text []byte) (ed25519.PublicKey, error) {
	s := strings.TrimSpace(string(text))
	if s == "" {
		return nil, errors.New("public key is empty")
	}
	if strings.Contains(s, "-----BEGIN") {
		der, err := pemBlock([]byte(s), "PUBLIC KEY")
		if err != nil {
			return nil, err
		}
		k, err := x509.ParsePKIXPublicKey(der)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key is %T, not Ed25519", k)
		}
		return pub, nil
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("public key is neither PEM nor base64: %w", err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key is %d bytes, an Ed25519 public key is %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// ParsePrivateKey reads an Ed25519 private key as a PEM "PRIVATE KEY" block
// (PKCS #8; other text around the block is ignored) or as standard base64
// of the 32-byte seed or the 64-byte key.
func ParsePrivateKey(text []byte) (ed25519.PrivateKey, error) {
	s := strings.TrimSpace(string(text))
	if s == "" {
		return nil, errors.New("private key is empty")
	}
	if strings.Contains(s, "-----BEGIN") {
		der, err := pemBlock([]byte(s), "PRIVATE KEY")
		if err != nil {
			return nil, err
		}
		k, err := x509.ParsePKCS8PrivateKey(der)
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key is %T, not Ed25519", k)
		}
		return priv, nil
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("private key is neither PEM nor base64: %w", err)
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		// The second half is the public key; a mismatched one would produce
		// signatures nobody can verify, so rebuild from the seed and compare.
		k := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
		if !k.Equal(ed25519.PrivateKey(raw)) {
			return nil, errors.New("private key is inconsistent: its public half does not match its seed")
		}
		return k, nil
	default:
		return nil, fmt.Errorf("private key is %d bytes, expected a %d-byte seed or a %d-byte key", len(raw), ed25519.SeedSize, ed25519.PrivateKeySize)
	}
}

// pemBlock returns the bytes of the first PEM block of the given type.
func pemBlock(data []byte, typ string) ([]byte, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, fmt.Errorf("no PEM %q block found", typ)
		}
		if b.Type == typ {
			return b.Bytes, nil
		}
	}
}

// EncodePublicKey renders pub as standard base64, the form
// $MESH_LICENSE_TEST_PUBLIC_KEY takes.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// MarshalPublicKeyPEM renders pub as a PEM "PUBLIC KEY" block.
func MarshalPublicKeyPEM(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// MarshalPrivateKeyPEM renders priv as a PEM "PRIVATE KEY" block (PKCS #8).
func MarshalPrivateKeyPEM(priv ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
