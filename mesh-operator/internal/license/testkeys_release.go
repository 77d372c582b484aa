//go:build !licensetestkey

package license

import (
	"crypto/ed25519"
	"strings"
)

// TestKeysEnabled reports whether this build honours a test public key.
// False here: this file is what release builds (no licensetestkey tag)
// compile, and it contains no code that could add a key.
const TestKeysEnabled = false

func testKeys(value string) ([]ed25519.PublicKey, error) {
	if strings.TrimSpace(value) != "" {
		return nil, ErrTestKeysDisabled
	}
	return nil, nil
}
