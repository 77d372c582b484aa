//go:build licensetestkey

package license

import (
	"crypto/ed25519"
	"fmt"
	"strings"
)

// TestKeysEnabled reports whether this build honours a test public key.
// True only in builds made with -tags licensetestkey (tests, the local e2e,
// demos); release builds compile testkeys_release.go instead.
const TestKeysEnabled = true

func testKeys(value string) ([]ed25519.PublicKey, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	k, err := ParsePublicKey([]byte(value))
	if err != nil {
		return nil, fmt.Errorf("--%s / $%s: %w", TestPublicKeyFlag, TestPublicKeyEnv, err)
	}
	return []ed25519.PublicKey{k}, nil
}
