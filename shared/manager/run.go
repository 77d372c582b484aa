package manager

import (
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ericdev/fleetmesh/shared/version"
)

// Operator is what differs between the operators' processes; Main does the rest.
type Operator struct {
	// Name prefixes errors and the start-up log line.
	Name string
	// LeaderElectionID names the leader Lease; unique per operator.
	LeaderElectionID string
	// BindFlags registers the operator's own flags.
	BindFlags func(*flag.FlagSet)
	// Configure checks the operator's flags once the common ones are parsed.
	Configure func(common *Options) error
	// AddToScheme registers the operator's API types (client-go's are added).
	AddToScheme []func(*runtime.Scheme) error
	// Cache narrows what the manager caches; may be nil.
	Cache func(*cache.Options)
	// Setup registers the controllers.
	Setup func(ctrl.Manager) error
	// StartupValues are logged with the start-up line; may be nil.
	StartupValues func() []any
	// APIPace is the default of --kube-api-qps and --kube-api-burst; the
	// zero Pace leaves the operator unpaced.
	APIPace Pace
}

// Main runs op until SIGTERM and exits the process with its result.
func Main(op Operator) {
	if err := run(op, flag.CommandLine, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, op.Name+":", err)
		os.Exit(1)
	}
}

func run(op Operator, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	common := Options{APIPace: op.APIPace}
	common.Bind(fs, op.LeaderElectionID)
	op.BindFlags(fs)
	printVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *printVersion {
		_, err := fmt.Fprintf(stdout, "%s %s\n", op.Name, version.Version)
		return err
	}
	if err := common.Validate(); err != nil {
		return err
	}
	if err := op.Configure(&common); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme}, op.AddToScheme...) {
		if err := add(scheme); err != nil {
			return err
		}
	}
	mgr, err := common.NewManager(scheme, func(o *ctrl.Options) {
		if op.Cache != nil {
			op.Cache(&o.Cache)
		}
	})
	if err != nil {
		return err
	}
	if err := op.Setup(mgr); err != nil {
		return fmt.Errorf("setting up controllers: %w", err)
	}
	values := []any{"version", version.Version, "namespace", common.Namespace, "kubeAPIQPS", common.APIPace.QPS, "kubeAPIBurst", common.APIPace.Burst}
	if op.StartupValues != nil {
		values = append(values, op.StartupValues()...)
	}
	ctrl.Log.WithName("setup").Info("starting "+op.Name, values...)
	return mgr.Start(ctrl.SetupSignalHandler())
}
