// Command mesh-license checks mesh-operator license files and, in the
// vendor build, creates them.
//
//	mesh-license verify [--pub PUB] [--at TIME] license.json
//	mesh-license inspect [--pub PUB] [--at TIME] license.json
//	mesh-license pubkey --pub PUB                    print a public key as base64
//
// The vendor build (go build -tags licensevendor) adds:
//
//	mesh-license keygen --out DIR                    write a signing key pair
//	mesh-license pubkey --key PRIV
//	mesh-license sign --key PRIV --licensee NAME --features service-mesh \
//	    --not-after 2027-01-01 [--not-before ...] > license.json
//
// Releases publish the customer build only (the default: no licensevendor
// tag), whose binary does not contain the signing code at all
// (TestCustomerBuildCannotSign). Tests, the local e2e and demos build the
// vendor build to mint licenses with their own key pair; an operator built
// with -tags licensetestkey then trusts that key via
// --license-test-public-key or $MESH_LICENSE_TEST_PUBLIC_KEY. Release
// licenses are signed the same way with the release key, which never enters
// the repository.
package main

import (
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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

// usage lists this build's commands; vendorUsage (vendor.go or
// customer.go) adds or explains the signing ones.
var usage = `mesh-license checks mesh-operator license files.

Commands:
  verify [--pub PUB]... [--at TIME] FILE
        check a license file (FILE "-" reads stdin); without --pub, against the
        keys this build trusts
  inspect [--pub PUB]... [--at TIME] FILE
        show what a license file says, even if it does not verify, and whether
        it does (exit 1 when not)
  pubkey --pub PUB
        print a public key as base64, the form $MESH_LICENSE_TEST_PUBLIC_KEY takes
` + vendorUsage + `
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
	cmds := map[string]command{
		"pubkey":  pubkey,
		"verify":  verify,
		"inspect": inspect,
	}
	for name, cmd := range vendorCommands() {
		cmds[name] = cmd
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
	case errors.Is(err, errReported):
		return exitFailed
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "mesh-license %s: %v\n", args[0], err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "mesh-license %s: %v\n", args[0], err)
		return exitFailed
	}
}

// command runs one subcommand with its arguments at time now.
type command func(args []string, stdin io.Reader, stdout, stderr io.Writer, now time.Time) error

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
		if publicOfPrivateKey == nil {
			return usageErr("--key reads a private key, which only the vendor build does; give --pub")
		}
		var err error
		if pub, err = publicOfPrivateKey(*privPath); err != nil {
			return err
		}
	} else {
		var err error
		if pub, err = readPublicKey(*pubPath); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, license.EncodePublicKey(pub))
	return nil
}

// pubFlags collects repeated --pub values.
type pubFlags []string

func (p *pubFlags) String() string     { return strings.Join(*p, ",") }
func (p *pubFlags) Set(s string) error { *p = append(*p, s); return nil }

func verify(args []string, stdin io.Reader, stdout, stderr io.Writer, now time.Time) error {
	raw, keys, now, err := licenseArgs("verify", args, stdin, stderr, now)
	if err != nil {
		return err
	}
	l, err := license.Verify(raw, keys, now)
	if err != nil {
		return fmt.Errorf("%s: %w", license.ReasonOf(err), err)
	}
	fmt.Fprint(stdout, "valid: ")
	describe(stdout, l, now)
	return nil
}

// inspect prints what a license says before judging it, so a customer can
// tell a wrong file (another licensee, an old one) from a damaged one. The
// content is printed as decoded, untrusted; the verdict is Verify's.
func inspect(args []string, stdin io.Reader, stdout, stderr io.Writer, now time.Time) error {
	raw, keys, now, err := licenseArgs("inspect", args, stdin, stderr, now)
	if err != nil {
		return err
	}
	l, err := license.Inspect(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", license.ReasonOf(err), err)
	}
	describe(stdout, l, now)
	fmt.Fprintf(stdout, "  issuedAt:  %s\n", l.IssuedAt.UTC().Format(time.RFC3339))
	if _, err := license.Verify(raw, keys, now); err != nil {
		fmt.Fprintf(stdout, "signature: %s: %v\n", license.ReasonOf(err), err)
		return errReported
	}
	fmt.Fprintln(stdout, "signature: valid; the operator accepts it")
	return nil
}

// errReported fails a command whose output already said why.
var errReported = errors.New("not accepted")

func describe(w io.Writer, l *license.License, now time.Time) {
	fmt.Fprintf(w, "license %q for %q\n  features:  %s\n  notBefore: %s\n  notAfter:  %s (%s left)\n",
		l.ID, l.Licensee, strings.Join(l.Features, ", "),
		l.NotBefore.UTC().Format(time.RFC3339), l.NotAfter.UTC().Format(time.RFC3339), remaining(l.NotAfter.Sub(now)))
}

// licenseArgs parses [--pub PUB]... [--at TIME] FILE and reads the file and
// the keys to trust (without --pub: this build's).
func licenseArgs(name string, args []string, stdin io.Reader, stderr io.Writer, now time.Time) ([]byte, []ed25519.PublicKey, time.Time, error) {
	fs := newFlags(name, stderr)
	var pubs pubFlags
	fs.Var(&pubs, "pub", "public key file to trust (repeatable; default: the keys this build trusts)")
	at := fs.String("at", "", "judge as of this time instead of now")
	if err := parseFlags(fs, args); err != nil {
		return nil, nil, now, err
	}
	if fs.NArg() != 1 {
		return nil, nil, now, usageErr("%s needs exactly one license file (or - for stdin)", name)
	}
	if *at != "" {
		var err error
		if now, err = parseWhen("--at", *at); err != nil {
			return nil, nil, now, err
		}
	}
	var keys []ed25519.PublicKey
	if len(pubs) == 0 {
		var err error
		keys, err = license.TrustedKeys()
		if errors.Is(err, license.ErrTestKeysDisabled) {
			fmt.Fprintf(stderr, "mesh-license %s: warning: %v\n", name, err)
		} else if err != nil {
			return nil, nil, now, err
		}
	}
	for _, p := range pubs {
		k, err := readPublicKey(p)
		if err != nil {
			return nil, nil, now, err
		}
		keys = append(keys, k)
	}
	raw, err := readInput(fs.Arg(0), stdin)
	return raw, keys, now, err
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
