package controller

import (
	"crypto/ed25519"
	"flag"
	"fmt"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
)

// Config is the operator-wide configuration that comes from flags (set by the chart).
type Config struct {
	// OperatorNamespace holds the license Secret.
	OperatorNamespace string
	// LicenseSecret names the license Secret in OperatorNamespace.
	LicenseSecret string
	// Keys are the license public keys this build trusts (set by Validate).
	Keys []ed25519.PublicKey

	keyOptions license.KeyOptions
	// KeyWarning is set when a test key was configured for a release build.
	KeyWarning error
}

// BindFlags registers the operator's own flags.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.LicenseSecret, "license-secret", "mesh-operator-license", "name of the license Secret in the operator's namespace")
	c.keyOptions.BindFlags(fs)
}

// Validate checks the flags and resolves the trusted license keys.
func (c *Config) Validate() error {
	if c.OperatorNamespace == "" || c.LicenseSecret == "" {
		return fmt.Errorf("the operator namespace and --license-secret are required")
	}
	keys, err := c.keyOptions.TrustedKeys()
	switch {
	case err == license.ErrTestKeysDisabled:
		c.KeyWarning = err
	case err != nil:
		return err
	}
	c.Keys = keys
	return nil
}
