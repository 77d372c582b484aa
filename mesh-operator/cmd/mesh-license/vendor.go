//go:build licensevendor

package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
)

// The vendor build: whoever issues licenses holds a private key and needs
// keygen and sign. Releases never publish this build.

const vendorUsage = `
Vendor build (licensevendor):
  keygen --out DIR [--name NAME] [--force]
        write NAME.key (private, PEM, mode 0600) and NAME.pub (PEM) to DIR
  pubkey --key PRIV
        print the public key of a private key as base64
  sign --key PRIV --licensee NAME --features LIST (--not-after TIME | --valid-for DURATION)
       [--not-before TIME] [--issued-at TIME] [--id ID] [--out FILE]
        write a signed license file (to stdout unless --out)
`

func vendorCommands() map[string]command {
	return map[string]command{"keygen": keygen, "sign": sign}
}

// publicOfPrivateKey serves pubkey --key.
var publicOfPrivateKey = func(path string) (ed25519.PublicKey, error) {
	priv, err := readPrivateKey(path)
	if err != nil {
		return nil, err
	}
	return priv.Public().(ed25519.PublicKey), nil
}

func keygen(args []string, _ io.Reader, stdout, stderr io.Writer, _ time.Time) error {
	fs := newFlags("keygen", stderr)
	dir := fs.String("out", "", "directory to write the key pair to (created if needed)")
	name := fs.String("name", "license-signing", "base name of the key files")
	force := fs.Bool("force", false, "overwrite existing key files")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() != 0 {
		return usageErr("keygen needs --out DIR and no arguments")
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	privPEM, err := license.MarshalPrivateKeyPEM(priv)
	if err != nil {
		return err
	}
	pubPEM, err := license.MarshalPublicKeyPEM(pub)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	privPath := filepath.Join(*dir, *name+".key")
	pubPath := filepath.Join(*dir, *name+".pub")
	if !*force {
		// Overwriting a signing key silently would orphan every license
		// signed with it.
		for _, p := range []string{privPath, pubPath} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s already exists; use --force to replace the key pair", p)
			}
		}
	}
	if err := os.WriteFile(privPath, privPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(pubPath, pubPEM, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "private key: %s (keep it secret; never commit it)\npublic key:  %s\nbase64:      %s\n",
		privPath, pubPath, license.EncodePublicKey(pub))
	return nil
}

func sign(args []string, _ io.Reader, stdout, stderr io.Writer, now time.Time) error {
	fs := newFlags("sign", stderr)
	keyPath := fs.String("key", "", "private key file (PEM or base64)")
	licensee := fs.String("licensee", "", "who the license is issued to")
	features := fs.String("features", "", "comma-separated features, e.g. service-mesh,preview")
	id := fs.String("id", "", "license ID (default: a random lic-... ID)")
	notBefore := fs.String("not-before", "", "start of validity (default: now)")
	notAfter := fs.String("not-after", "", "end of validity")
	validFor := fs.Duration("valid-for", 0, "validity from --not-before, instead of --not-after (e.g. 720h)")
	issuedAt := fs.String("issued-at", "", "issue time (default: now)")
	out := fs.String("out", "", "write the license to this file instead of stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 0:
		return usageErr("unexpected arguments %q", fs.Args())
	case *keyPath == "":
		return usageErr("--key is required")
	case *licensee == "":
		return usageErr("--licensee is required")
	case (*notAfter == "") == (*validFor == 0):
		return usageErr("give exactly one of --not-after or --valid-for")
	}
	// Whole seconds: the license file stays readable, and nothing needs
	// finer validity than that.
	now = now.UTC().Truncate(time.Second)
	l := license.License{ID: *id, Licensee: *licensee, Features: splitList(*features), NotBefore: now, IssuedAt: now}
	var err error
	if *notBefore != "" {
		if l.NotBefore, err = parseWhen("--not-before", *notBefore); err != nil {
			return err
		}
	}
	if *issuedAt != "" {
		if l.IssuedAt, err = parseWhen("--issued-at", *issuedAt); err != nil {
			return err
		}
	}
	if *validFor != 0 {
		l.NotAfter = l.NotBefore.Add(*validFor)
	} else if l.NotAfter, err = parseWhen("--not-after", *notAfter); err != nil {
		return err
	}
	if l.ID == "" {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		l.ID = "lic-" + hex.EncodeToString(b)
	}
	if !l.Allows() {
		// Allowed (tests need such licenses), but almost always a mistake.
		fmt.Fprintf(stderr, "mesh-license sign: warning: features %q include neither %s nor %s; the operator will refuse this license\n",
			*features, license.FeatureServiceMesh, license.FeaturePreview)
	}
	priv, err := readPrivateKey(*keyPath)
	if err != nil {
		return err
	}
	raw, err := license.Sign(l, priv)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(raw)
		return err
	}
	return os.WriteFile(*out, raw, 0o644)
}

func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := license.ParsePrivateKey(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
