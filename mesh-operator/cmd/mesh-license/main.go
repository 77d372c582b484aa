// Command mesh-license creates and checks mesh-operator license files.
//
//	mesh-license keygen --out DIR                    write a signing key pair
//	mesh-license pubkey --key PRIV                   print a public key as base64
//	mesh-license sign --key PRIV --licensee NAME --features service-mesh \
//	    --not-after 2027-01-01 [--not-before ...] > license.json
//	mesh-license verify [--pub PUB] [--at TIME] license.json
//
// Tests, the local e2e and demos use it to mint licenses with their own key
// pair; an operator built with -tags licensetestkey then trusts that key via
// --license-test-public-key or $MESH_LICENSE_TEST_PUBLIC_KEY. Release
// licenses are signed the same way with the release key, which never enters
// the repository.
package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, time.Now))
}

// Exit codes: 0 success, 1 a refused license or failed operation, 2 usage.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

// errUsage marks errors that are the caller's invocation, not the license.
var errUsage = errors.New("usage")

const usage = `mesh-license creates and checks mesh-operator license files.

Commands:
  keygen --out DIR [--name NAME] [--force]
        write NAME.key (private, PEM, mode 0600) and NAME.pub (PEM) to DIR
  pubkey (--key PRIV | --pub PUB)
        print the public key as base64, the form $MESH_LICENSE_TEST_PUBLIC_KEY takes
  sign --key PRIV --licensee NAME --features LIST (--not-after TIME | --valid-for DURATION)
       [--not-before TIME] [--issued-at TIME] [--id ID] [--out FILE]
        write a signed license file (to stdout unless --out)
  verify [--pub PUB]... [--at TIME] FILE
        check a license file (FILE "-" reads stdin); without --pub, against the
        keys this build trusts

TIME is RFC 3339 (2026-01-02T15:04:05Z) or a date (2026-01-02, midnight UTC).
`

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, clock func() time.Time) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmds := map[string]func([]string, io.Reader, io.Writer, io.Writer, time.Time) error{
		"keygen": keygen,
		"pubkey": pubkey,
		"sign":   sign,
		"verify": verify,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "mesh-license: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	err := cmd(args[1:], stdin, stdout, stderr, clock())
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "mesh-license %s: %v\n", args[0], err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "mesh-license %s: %v\n", args[0], err)
		return exitFailed
	}
}

func usageErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mesh-license "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses and turns flag errors into usage errors (the flag
// package has already printed the details).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", err)
	}
	return nil
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

func pubkey(args []string, _ io.Reader, stdout, stderr io.Writer, _ time.Time) error {
	fs := newFlags("pubkey", stderr)
	privPath := fs.String("key", "", "private key file")
	pubPath := fs.String("pub", "", "public key file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*privPath == "") == (*pubPath == "") || fs.NArg() != 0 {
		return usageErr("pubkey needs exactly one of --key or --pub")
	}
	var pub ed25519.PublicKey
	if *privPath != "" {
		priv, err := readPrivateKey(*privPath)
		if err != nil {
			return err
		}
		pub = priv.Public().(ed25519.PublicKey)
	} else {
		var err error
		if pub, err = readPublicKey(*pubPath); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, license.EncodePublicKey(pub))
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

// pubFlags collects repeated --pub values.
type pubFlags []string

func (p *pubFlags) String() string     { return strings.Join(*p, ",") }
func (p *pubFlags) Set(s string) error { *p = append(*p, s); return nil }

func verify(args []string, stdin io.Reader, stdout, stderr io.Writer, now time.Time) error {
	fs := newFlags("verify", stderr)
	var pubs pubFlags
	fs.Var(&pubs, "pub", "public key file to trust (repeatable; default: the keys this build trusts)")
	at := fs.String("at", "", "verify as of this time instead of now")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErr("verify needs exactly one license file (or - for stdin)")
	}
	if *at != "" {
		var err error
		if now, err = parseWhen("--at", *at); err != nil {
			return err
		}
	}
	var keys []ed25519.PublicKey
	if len(pubs) == 0 {
		var err error
		keys, err = license.TrustedKeys()
		if errors.Is(err, license.ErrTestKeysDisabled) {
			fmt.Fprintf(stderr, "mesh-license verify: warning: %v\n", err)
		} else if err != nil {
			return err
		}
	}
	for _, p := range pubs {
		k, err := readPublicKey(p)
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	raw, err := readInput(fs.Arg(0), stdin)
	if err != nil {
		return err
	}
	l, err := license.Verify(raw, keys, now)
	if err != nil {
		return fmt.Errorf("%s: %w", license.ReasonOf(err), err)
	}
	fmt.Fprintf(stdout, "valid: license %q for %q\n  features:  %s\n  notBefore: %s\n  notAfter:  %s (%s left)\n",
		l.ID, l.Licensee, strings.Join(l.Features, ", "),
		l.NotBefore.UTC().Format(time.RFC3339), l.NotAfter.UTC().Format(time.RFC3339), remaining(l.NotAfter.Sub(now)))
	return nil
}

func remaining(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	return d.Truncate(time.Second).String()
}

func readInput(path string, stdin io.Reader) ([]byte, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	// Read one byte past the limit so an oversized file is reported as
	// such by Verify instead of being silently truncated.
	return io.ReadAll(io.LimitReader(r, license.MaxSize+1))
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

func readPublicKey(path string) (ed25519.PublicKey, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := license.ParsePublicKey(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// parseWhen accepts RFC 3339 or a bare date (midnight UTC), the two forms
// people type for license dates.
func parseWhen(flagName, s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, usageErr("%s %q is neither RFC 3339 (2026-01-02T15:04:05Z) nor a date (2026-01-02)", flagName, s)
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
