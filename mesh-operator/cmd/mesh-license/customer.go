//go:build !licensevendor

package main

import (
	"crypto/ed25519"
	"io"
	"time"
)

// The customer build, the one releases publish: it verifies and inspects
// licenses and holds no code that reads a private key or signs, so nothing
// but the vendor's own build can mint a license.

const vendorUsage = `
keygen and sign exist only in the vendor build (go build -tags licensevendor).
`

// vendorCommands answers keygen and sign with where they are.
func vendorCommands() map[string]command {
	refuse := func(name string) command {
		return func([]string, io.Reader, io.Writer, io.Writer, time.Time) error {
			return usageErr("%s is not in this build: keygen and sign exist only in the vendor build (go build -tags licensevendor); this one verifies and inspects", name)
		}
	}
	return map[string]command{"keygen": refuse("keygen"), "sign": refuse("sign")}
}

// publicOfPrivateKey is nil: pubkey --key is the vendor build's.
var publicOfPrivateKey func(path string) (ed25519.PublicKey, error)
