// kubectl-celld is the fleet operator's kubectl plugin. Its one command,
// `kubectl celld access -n NAMESPACE FLEET`, reads the live objects that
// decide who reaches the fleet (with the user's kubeconfig, get and list
// only) and prints, for every member port, which callers are allowed and
// denied and the rule that decided. See docs/access.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/access"
	"github.com/ericdev/fleetmesh/shared/served"
)

// Exit statuses, for scripts.
const (
	exitOK = 0
	// exitDenied: --from/--to named a connection that is denied, or --only
	// found a caller class it does not list allowed on its port.
	exitDenied = 1
	// exitError: bad usage, the fleet could not be read, or a verdict
	// asked about is unknown (something it depends on was unreadable).
	exitError = 2
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage: kubectl celld access [-n NAMESPACE] FLEET [flags]

Who can reach each port of a CelldFleet's members, and why: every caller
class and every live caller, allowed or denied, with the deciding
NetworkPolicy rule, PeerAuthentication mode and AuthorizationPolicy rule;
and the members' egress.

Exit status: 0; 1 when --from/--to name a denied connection or --only is
violated; 2 on errors or when a verdict asked about is unknown.

Flags:
`

type onlyFlag map[int][]string

func (o onlyFlag) String() string { return fmt.Sprint(map[int][]string(o)) }

func (o onlyFlag) Set(v string) error {
	port, classes, ok := strings.Cut(v, "=")
	n, err := strconv.Atoi(port)
	if !ok || err != nil {
		return fmt.Errorf("want PORT=CLASS[,CLASS...], got %q", v)
	}
	for _, c := range strings.Split(classes, ",") {
		if c != "" && !slices.Contains(access.Classes(), c) {
			return fmt.Errorf("unknown caller class %q (classes: %s)", c, strings.Join(access.Classes(), ", "))
		}
	}
	o[n] = append(o[n], strings.Split(classes, ",")...)
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "access" {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	fs := flag.NewFlagSet("kubectl celld access", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var (
		namespace  = fs.String("n", "", "namespace of the fleet (default: the kubeconfig context's)")
		output     = fs.String("o", "table", "output: table or json")
		from       = fs.String("from", "", "only this caller: NAMESPACE/POD (read from the cluster) or a caller class")
		to         = fs.String("to", "", "only this member and port: POD, POD:PORT or :PORT")
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
		kubectx    = fs.String("context", "", "kubeconfig context")
		save       = fs.String("save", "", "also write the objects read to this file (a snapshot, for --snapshot)")
		snapshot   = fs.String("snapshot", "", "judge a saved snapshot instead of reading the cluster")
		opNS       = fs.String("operator-namespace", "", "the fleet operator's namespace, if the fleet's NetworkPolicy does not tell (default fleet-system)")
		opSA       = fs.String("operator-service-account", "", "the fleet operator's ServiceAccount, if no fleet AuthorizationPolicy tells (default fleet-operator)")
		trust      = fs.String("trust-domain", access.DefaultTrustDomain, "the mesh's trust domain")
		timeout    = fs.Duration("timeout", 30*time.Second, "how long reading may take")
	)
	only := onlyFlag{}
	fs.Var(only, "only", "PORT=CLASS[,CLASS]: exit 1 if a caller of any other class is allowed on PORT (repeatable), e.g. --only 8081=member,operator")
	fs.StringVar(namespace, "namespace", "", "same as -n")

	// Flags may come before or after the fleet's name, as with kubectl.
	var positional []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitError
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fmt.Fprintln(stderr, "error: name exactly one CelldFleet")
		fs.Usage()
		return exitError
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "error: -o %q: want table or json\n", *output)
		return exitError
	}
	opts := access.Options{OperatorNamespace: *opNS, OperatorServiceAccount: *opSA, TrustDomain: *trust}

	var snap *access.Snapshot
	if *snapshot != "" {
		raw, err := os.ReadFile(*snapshot)
		if err == nil {
			snap, err = access.ParseSnapshot(raw)
		}
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitError
		}
		if snap.Fleet.Name != positional[0] || (*namespace != "" && snap.Fleet.Namespace != *namespace) {
			fmt.Fprintf(stderr, "error: the snapshot holds fleet %s/%s\n", snap.Fleet.Namespace, snap.Fleet.Name)
			return exitError
		}
	} else {
		loading := clientcmd.NewDefaultClientConfigLoadingRules()
		loading.ExplicitPath = *kubeconfig
		cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, &clientcmd.ConfigOverrides{CurrentContext: *kubectx})
		cfg, err := cc.ClientConfig()
		if err != nil {
			fmt.Fprintf(stderr, "error: kubeconfig: %v\n", err)
			return exitError
		}
		if *namespace == "" {
			if *namespace, _, err = cc.Namespace(); err != nil {
				fmt.Fprintf(stderr, "error: kubeconfig: %v\n", err)
				return exitError
			}
		}
		c, err := client.New(cfg, client.Options{Scheme: access.Scheme()})
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitError
		}
		readFrom := ""
		if strings.Contains(*from, "/") {
			readFrom = *from
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitError
		}
		snap, err = access.Read(ctx, c, &served.Catalog{Discovery: dc, MaxAge: served.Fresh}, *namespace, positional[0], access.ReadOptions{Options: opts, From: readFrom})
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return exitError
		}
	}
	if *save != "" {
		raw, err := snap.YAML()
		if err == nil {
			err = os.WriteFile(*save, raw, 0o600)
		}
		if err != nil {
			fmt.Fprintf(stderr, "error: --save: %v\n", err)
			return exitError
		}
	}

	report, err := access.Compute(snap, opts)
	if err == nil {
		report, err = report.Filter(*from, *to)
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitError
	}
	if *output == "json" {
		err = report.JSON(stdout)
	} else {
		err = report.Table(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return exitError
	}
	return status(report, *from != "" && strings.Contains(*to, ":"), only, stderr)
}

// status is the exit status: a pair asked about (--from and --to with a
// port) exits 1 unless every row of it is allowed; --only exits 1 on any
// caller of an unlisted class allowed on its port.
func status(r *access.Report, pair bool, only onlyFlag, stderr io.Writer) int {
	code := exitOK
	if pair {
		for _, e := range r.Ingress {
			switch {
			case e.Unknown:
				return exitError
			case !e.Allowed:
				code = exitDenied
			}
		}
	}
	for _, port := range slices.Sorted(func(yield func(int) bool) {
		for p := range only {
			if !yield(p) {
				return
			}
		}
	}) {
		for _, e := range r.Violations(port, only[port]...) {
			fmt.Fprintf(stderr, "--only %d=%s: %s %s (%s) reaches %s:%d\n", port, strings.Join(only[port], ","),
				map[bool]string{true: "maybe (unknown)", false: "allowed:"}[e.Unknown], e.Caller.Name, e.Caller.Class, e.Member, port)
			code = exitDenied
		}
	}
	return code
}
