// Package manager holds the process plumbing both operators share: the
// common flags, logging and the controller-runtime manager they build from
// them, so each main.go only wires its own reconcilers.
package manager

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options are the flags every operator process takes.
type Options struct {
	MetricsAddr string
	// MetricsSecure serves metrics over TLS to authenticated and authorized
	// callers only (TokenReview and SubjectAccessReview for GET /metrics).
	MetricsSecure  bool
	MetricsCertDir string
	ProbeAddr      string
	// PprofAddr serves net/http/pprof (CPU and heap profiles) when set;
	// off by default: profiles show what the process holds.
	PprofAddr               string
	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// Namespace the operator runs in: where its leader lease and (for the
	// mesh operator) its license Secret live.
	Namespace      string
	GracefulPeriod time.Duration
	// APIPace paces every request the process sends to the API server
	// (--kube-api-qps, --kube-api-burst); Bind takes the defaults from it.
	APIPace Pace
	zap     zap.Options
}

// Pace is a client-side rate limit: QPS requests per second on average,
// Burst at once. A QPS of zero or less leaves the requests unpaced.
type Pace struct {
	QPS   float64
	Burst int
}

// paced gives cfg one token bucket for every client built from it. A limit
// in QPS and Burst alone would be one bucket per client, and the manager
// builds a client per kind: a fleet's first pass writes eight kinds, so
// each bucket saw an eighth of the requests and never held any back.
func (p Pace) paced(cfg *rest.Config) *rest.Config {
	if p.QPS <= 0 {
		return cfg
	}
	cfg.QPS, cfg.Burst = float32(p.QPS), p.Burst
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	return cfg
}

// uncompressed turns off response compression for every client built from
// cfg, as Kubernetes' own controllers do. Go's HTTP client asks for gzip
// unless told not to, and an API server with WatchListCompression (the
// bed's Kubernetes 1.37) then compresses each informer's watch stream,
// every event, once per watcher: while 1,000 fleets started, compressing
// the streams of every client that asked took 2.4 % of the API server's
// CPU, and decompressing them 5 % of the fleet operator's (bench/results/history.md,
// fifteenth round). The operators talk to the API server in-cluster, where
// bandwidth is cheaper than that CPU.
func uncompressed(cfg *rest.Config) *rest.Config {
	cfg.DisableCompression = true
	return cfg
}

// Bind registers the common flags on fs. leaderElectionID must be unique per operator.
func (o *Options) Bind(fs *flag.FlagSet, leaderElectionID string) {
	o.LeaderElectionID = leaderElectionID
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "address the Prometheus metrics endpoint binds to; \"0\" disables it")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", false, "serve metrics over TLS (self-signed unless --metrics-cert-dir) and only to callers the API server authenticates and authorizes for GET /metrics (needs create on tokenreviews and subjectaccessreviews)")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for --metrics-secure; empty: a self-signed certificate")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address the /healthz and /readyz probes bind to")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "", "address net/http/pprof binds to, for CPU and heap profiles (docs/troubleshooting.md); empty or \"0\": off. Bind it to localhost and reach it with kubectl port-forward: it has no authentication")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles; required with more than one replica")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader Lease (default: --namespace)")
	fs.StringVar(&o.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace the operator runs in (default: $POD_NAMESPACE)")
	fs.DurationVar(&o.GracefulPeriod, "graceful-shutdown-timeout", 30*time.Second, "how long running reconciles get to finish on SIGTERM")
	fs.Float64Var(&o.APIPace.QPS, "kube-api-qps", o.APIPace.QPS, "requests per second the operator sends to the API server on average, over all its clients; 0 or less: unpaced")
	fs.IntVar(&o.APIPace.Burst, "kube-api-burst", o.APIPace.Burst, "requests the operator may send at once above --kube-api-qps")
	o.zap.Development = false
	o.zap.BindFlags(fs)
}

// Validate reports flag combinations that cannot work.
func (o *Options) Validate() error {
	if o.Namespace == "" {
		return fmt.Errorf("--namespace (or $POD_NAMESPACE) is required: the operator keeps its lease and reads its configuration there")
	}
	if o.APIPace.QPS > 0 && o.APIPace.Burst < 1 {
		return fmt.Errorf("--kube-api-burst must be at least 1 when --kube-api-qps is set (got %d): no request could be sent", o.APIPace.Burst)
	}
	return nil
}

// NewManager sets up logging and returns a manager with metrics, health and
// ready probes, leader election and graceful shutdown configured from o.
// customize may adjust the manager options (cache selectors, for example).
func (o *Options) NewManager(scheme *runtime.Scheme, customize func(*ctrl.Options)) (ctrl.Manager, error) {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	applySoftMemoryLimit(os.Getenv)
	leaseNamespace := o.LeaderElectionNamespace
	if leaseNamespace == "" {
		leaseNamespace = o.Namespace
	}
	graceful := o.GracefulPeriod
	opts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 o.metricsOptions(),
		HealthProbeBindAddress:  o.ProbeAddr,
		PprofBindAddress:        o.PprofAddr,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        o.LeaderElectionID,
		LeaderElectionNamespace: leaseNamespace,
		// Give the lease up on shutdown so a new replica takes over at once
		// instead of waiting out the lease duration.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &graceful,
	}
	if customize != nil {
		customize(&opts)
	}
	mgr, err := ctrl.NewManager(o.APIPace.paced(uncompressed(ctrl.GetConfigOrDie())), opts)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready once the informer caches have synced: before that a reconcile
	// would act on an empty view of the cluster.
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("caches not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// metricsOptions serves metrics in plain HTTP, or with --metrics-secure over
// TLS behind controller-runtime's authentication and authorization filter:
// each scrape's bearer token is checked with a TokenReview, and its user
// with a SubjectAccessReview for GET on the non-resource URL /metrics.
func (o *Options) metricsOptions() metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.CertDir = o.MetricsCertDir
	}
	return opts
}
