// kubectl-celld is the fleet operator's kubectl plugin. Its command
// `kubectl celld access -n NAMESPACE FLEET` reads the live objects that
// decide who reaches the fleet (with the user's kubeconfig, get and list
// only) and prints, for every member port, which callers are allowed and
// denied and the rule that decided. See docs/access.md.
//
// It is built like kubectl's own commands: cobra, and k8s.io/cli-runtime's
// ConfigFlags (--kubeconfig, --context, -n, --as, --token,
// --request-timeout, ...) and PrintFlags (-o json|yaml|jsonpath|...; -o
// wide is the table with every rule in full).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/access"
	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/version"
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

// exitStatus is an error that only sets the exit status: what there was to
// say has been said.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// usageError is a command line the plugin cannot run; the hint names the
// command's help.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e usageError) Error() string { return e.err.Error() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: stdout, ErrOut: stderr})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var status exitStatus
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "error: %v\nSee '%s --help' for usage.\n", usage.err, usage.cmd.CommandPath())
		return exitError
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	return exitError
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-celld",
		Short: "The fleet operator's kubectl plugin",
		Long: `kubectl celld: the fleet operator's kubectl plugin.

It reads with your kubeconfig (and kubectl's flags: --context, -n, --as,
--token, --request-timeout, ...) and writes nothing.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl celld"},
		Version:       version.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
		// No subcommand: the help, as kubectl does.
		Run: func(cmd *cobra.Command, _ []string) { _ = cmd.Help() },
		// "kubectl celld nonsense" is an unknown command, not an argument.
		Args: cobra.NoArgs,
	}
	root.SetVersionTemplate("kubectl-celld {{.Version}}\n")
	// --version without cobra's -v shorthand: kubectl's -v is log verbosity.
	root.Flags().Bool("version", false, "print the plugin's version")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{cmd, err} })
	configFlags := genericclioptions.NewConfigFlags(true)
	configFlags.AddFlags(root.PersistentFlags())
	root.AddCommand(newAccessCommand(configFlags, streams), newVersionCommand(streams))
	return root
}

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(streams.Out, "kubectl-celld %s (%s, %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

type onlyFlag map[int][]string

func (o onlyFlag) String() string {
	if len(o) == 0 {
		return ""
	}
	return fmt.Sprint(map[int][]string(o))
}

func (o onlyFlag) Type() string { return "PORT=CLASS[,CLASS]" }

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

type accessOptions struct {
	configFlags *genericclioptions.ConfigFlags
	printFlags  *genericclioptions.PrintFlags
	streams     genericiooptions.IOStreams

	from, to       string
	save, snapshot string
	opNS, opSA     string
	trust          string
	timeout        time.Duration
	only           onlyFlag
}

const accessLong = `Who can reach each port of a CelldFleet's members, and why: every caller
class and every live caller, allowed or denied, with the deciding
NetworkPolicy rule, PeerAuthentication mode and AuthorizationPolicy rule;
and the members' egress.

The default table fits a 120-column terminal and names the rule that
decided in short; -o wide gives every layer's rule in words; -o json|yaml
give the report (kind AccessReport, apiVersion access.celld.eric.dev/v1).

Exit status: 0; 1 when --from/--to name a denied connection or --only is
violated; 2 on errors or when a verdict asked about is unknown.`

const accessExample = `  # Who reaches the fleet demo-fleet, and why
  kubectl celld access -n demo demo-fleet

  # Can demo/web-1 reach member 0's port 8081? (exit 1 if not)
  kubectl celld access -n demo demo-fleet --from demo/web-1 --to demo-fleet-0:8081

  # Fail if anything outside the fleet reaches 8081
  kubectl celld access -n demo demo-fleet --only 8081=member,operator,kubelet-probe >/dev/null

  # As a team member would see it
  kubectl celld access -n demo demo-fleet --as jane@example.com -o wide`

func newAccessCommand(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &accessOptions{
		configFlags: configFlags,
		streams:     streams,
		only:        onlyFlag{},
		printFlags: &genericclioptions.PrintFlags{
			OutputFormat:         new(string),
			JSONYamlPrintFlags:   genericclioptions.NewJSONYamlPrintFlags(),
			TemplatePrinterFlags: genericclioptions.NewKubeTemplatePrintFlags(),
		},
	}
	cmd := &cobra.Command{
		Use:     "access FLEET",
		Short:   "Who can reach a CelldFleet's ports, and which rule decided",
		Long:    accessLong,
		Example: accessExample,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{cmd, errors.New("name exactly one CelldFleet")}
			}
			return nil
		},
		ValidArgsFunction: o.completeFleets,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	o.printFlags.AddFlags(cmd)
	formats := append([]string{"wide"}, o.printFlags.AllowedFormats()...)
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format. One of: (%s). Default: a table for 120 columns.", strings.Join(formats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))

	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "only this caller: NAMESPACE/POD (read from the cluster) or a caller class")
	f.StringVar(&o.to, "to", "", "only this member and port: POD, POD:PORT or :PORT")
	f.Var(o.only, "only", "exit 1 if a caller of any other class is allowed on PORT (repeatable), e.g. --only 8081=member,operator")
	f.StringVar(&o.save, "save", "", "also write the objects read to this file (a snapshot, for --snapshot)")
	f.StringVar(&o.snapshot, "snapshot", "", "judge a saved snapshot instead of reading the cluster")
	f.StringVar(&o.opNS, "operator-namespace", "", "the fleet operator's namespace, if the fleet's NetworkPolicy does not tell (default fleet-system)")
	f.StringVar(&o.opSA, "operator-service-account", "", "the fleet operator's ServiceAccount, if no fleet AuthorizationPolicy tells (default fleet-operator)")
	f.StringVar(&o.trust, "trust-domain", access.DefaultTrustDomain, "the mesh's trust domain")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long the whole read may take (--request-timeout bounds each request)")
	_ = cmd.RegisterFlagCompletionFunc("from", cobra.FixedCompletions(access.Classes(), cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagFilename("snapshot", "yaml")
	_ = cmd.MarkFlagFilename("save", "yaml")
	return cmd
}

// completeFleets offers the CelldFleets of the namespace (kubectl's flags
// apply: --context, -n, --as...).
func (o *accessOptions) completeFleets(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, _, ns, err := o.clients()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	list := &v1alpha1.CelldFleetList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, f := range list.Items {
		if strings.HasPrefix(f.Name, toComplete) {
			out = append(out, f.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// clients are the API clients kubectl's flags describe, and the namespace
// (-n, or the kubeconfig context's).
func (o *accessOptions) clients() (client.Client, *rest.Config, string, error) {
	cfg, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := o.configFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: access.Scheme()})
	if err != nil {
		return nil, nil, "", err
	}
	return c, cfg, ns, nil
}

func (o *accessOptions) run(cmd *cobra.Command, fleet string) error {
	// The output format is checked before anything is read.
	format := *o.printFlags.OutputFormat
	var print func(*access.Report) error
	switch format {
	case "", "table":
		print = func(r *access.Report) error { return r.Table(o.streams.Out) }
	case "wide":
		print = func(r *access.Report) error { return r.WideTable(o.streams.Out) }
	default:
		p, err := o.printFlags.ToPrinter()
		if err != nil {
			return usageError{cmd, fmt.Errorf("-o %q: want wide or one of %s", format, strings.Join(o.printFlags.AllowedFormats(), ", "))}
		}
		print = func(r *access.Report) error { return p.PrintObj(r, o.streams.Out) }
	}
	opts := access.Options{OperatorNamespace: o.opNS, OperatorServiceAccount: o.opSA, TrustDomain: o.trust}

	var snap *access.Snapshot
	if o.snapshot != "" {
		raw, err := os.ReadFile(o.snapshot)
		if err == nil {
			snap, err = access.ParseSnapshot(raw)
		}
		if err != nil {
			return err
		}
		ns := *o.configFlags.Namespace
		if snap.Fleet.Name != fleet || (ns != "" && snap.Fleet.Namespace != ns) {
			return fmt.Errorf("the snapshot holds fleet %s/%s", snap.Fleet.Namespace, snap.Fleet.Name)
		}
	} else {
		c, cfg, ns, err := o.clients()
		if err != nil {
			return err
		}
		readFrom := ""
		if strings.Contains(o.from, "/") {
			readFrom = o.from
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
		defer cancel()
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return err
		}
		snap, err = access.Read(ctx, c, &served.Catalog{Discovery: dc, MaxAge: served.Fresh}, ns, fleet, access.ReadOptions{Options: opts, From: readFrom})
		if err != nil {
			return err
		}
	}
	if o.save != "" {
		raw, err := snap.YAML()
		if err == nil {
			err = os.WriteFile(o.save, raw, 0o600)
		}
		if err != nil {
			return fmt.Errorf("--save: %w", err)
		}
	}

	report, err := access.Compute(snap, opts)
	if err == nil {
		report, err = report.Filter(o.from, o.to)
	}
	if err != nil {
		return err
	}
	if err := print(report); err != nil {
		return err
	}
	if code := status(report, o.from != "" && strings.Contains(o.to, ":"), o.only, o.streams.ErrOut); code != exitOK {
		return exitStatus(code)
	}
	return nil
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
