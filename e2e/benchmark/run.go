// Package benchmark measures both operators on the local control plane
// (kwok nodes, the celld stand-in on every member Pod IP, both operators as
// processes under their charts' RBAC): the scenarios (scenarios.go, mesh.go),
// the sampling of requests, CPU and memory (sample.go, watch.go,
// timeline.go), and the result files and README block (report.go,
// readme.go). The command is e2e/bench; the method is docs/benchmark.md.
package benchmark

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pkgruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster/local"
	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

const (
	membersPerFleet = 3
	rollMembers     = 5
	StateInterval   = 10 * time.Second // the bed's --state-interval
	imageV1         = "registry.example/celld:1.0.0"
	imageV2         = "registry.example/celld:1.1.0"
)

// DefaultTimeout limits each wait of a phase when Options.Timeout is unset.
const DefaultTimeout = 15 * time.Minute

// Options are one run's settings (the command's flags, or the smoke test's).
type Options struct {
	// N and Mesh: the fleet counts and the mesh namespace counts to run.
	N, Mesh []int
	// Steady is the steady-state window after poking every fleet.
	Steady time.Duration
	// probes runs the scenarios of make bench only: the reaction probe,
	// the cold restart and both parallel floors (the smoke test leaves them
	// out, so its duration stays as it was).
	Probes bool
	// meshInFleetBed runs mesh count i in the bed of fleet count i instead of
	// a fresh bed (the smoke test saves a bed start this way).
	MeshInFleetBed bool
	// noFloors skips the fleet floors (the convergence ratios are then
	// not measured).
	NoFloors bool
	// meshRepeat runs each mesh count this many times (at least once).
	MeshRepeat int
	// NRepeat runs each fleet count this many times (at least once), each
	// in a fresh bed: the largest N's timing targets are judged on the
	// median of its runs.
	NRepeat int
	// Keep keeps each bed's files (operator logs) after a successful N.
	Keep bool
	Log  io.Writer
	// Timeout limits every wait of a phase.
	Timeout time.Duration
	// Timeline logs every 10 s where a convergence waits (StatefulSets
	// observed, claims bound, Pods scheduled and Ready).
	Timeline bool
	// Pprof serves both operators' net/http/pprof on free loopback ports.
	Pprof bool
	// MetricsAddr is the fleet operator's metrics address (empty: a free
	// loopback port).
	MetricsAddr string
	// SkipNodes cordons the first kwok nodes of each bed.
	SkipNodes int
}

var logOut io.Writer = os.Stderr

func logf(format string, a ...any) {
	fmt.Fprintf(logOut, "%s bench: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// ParseCounts parses a comma-separated list of counts, each at least minimum.
func ParseCounts(s string, minimum int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < minimum {
			return nil, fmt.Errorf("bad count %q (need integers >= %d)", f, minimum)
		}
		out = append(out, n)
	}
	return out, nil
}

// Failed reports the first N or M that failed.
func Failed(r *Run) error {
	for _, res := range r.Results {
		if res.Error != "" {
			return fmt.Errorf("run with N=%d failed: %s", res.N, res.Error)
		}
	}
	for _, m := range r.Mesh {
		if m.Error != "" {
			return fmt.Errorf("mesh run with %d namespaces failed: %s", m.Namespaces, m.Error)
		}
	}
	return nil
}

// Execute runs every N and M; emit (may be nil) gets the run after each
// one, so partial results survive a failure later on.
func Execute(root string, o Options, emit func(*Run) error) (*Run, error) {
	if o.Log != nil {
		logOut = o.Log
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	r := &Run{
		Started: time.Now().UTC().Format(time.RFC3339),
		Commit:  gitCommit(root),
		Host:    Host{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, UptimeStart: uptime()},
		Method:  "docs/benchmark.md",
	}
	save := func() error {
		if emit == nil {
			return nil
		}
		return emit(r)
	}
	for i, n := range o.N {
		for run := range max(o.NRepeat, 1) {
			var meshIn *int
			if o.MeshInFleetBed && i < len(o.Mesh) && run == 0 {
				meshIn = &o.Mesh[i]
			}
			res, mres, anomalies, err := benchN(root, n, o, meshIn)
			if err != nil {
				res.Error = err.Error()
				logf("N=%d failed: %v", n, err)
			}
			r.Results = append(r.Results, res)
			if mres != nil {
				r.Mesh = append(r.Mesh, *mres)
			}
			r.Anomalies = append(r.Anomalies, anomalies...)
			if err := save(); err != nil {
				return r, err
			}
		}
	}
	if !o.MeshInFleetBed {
		for _, m := range o.Mesh {
			for range max(o.MeshRepeat, 1) {
				res, anomalies, err := benchMesh(root, m, o)
				if err != nil {
					res.Error = err.Error()
					logf("mesh M=%d failed: %v", m, err)
				}
				r.Mesh = append(r.Mesh, res)
				r.Anomalies = append(r.Anomalies, anomalies...)
				if err := save(); err != nil {
					return r, err
				}
			}
		}
	}
	r.MeshLinearity = meshLinearity(r.Mesh)
	r.Host.UptimeEnd = uptime()
	r.Finished = time.Now().UTC().Format(time.RFC3339)
	r.Targets = targets(r)
	return r, save()
}

func gitCommit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// bench is the state of one N.
type bench struct {
	bed             *harness.Bed
	k8s             client.Client
	dyn             dynamic.Interface
	http            *http.Client // the members' /state
	metrics         *http.Client // the operators' metrics endpoints
	n               int
	steady          time.Duration
	res             *Result
	anom            []string
	fleetMetrics    string
	meshMetricsAddr string
	// auditLog is the API server's audit log of the operators' requests.
	auditLog string
	cs       kubernetes.Interface
	probes   bool
	noFloors bool
	// cfg and scheme are the bench's own client's, for the watches of
	// observe.
	cfg    *rest.Config
	scheme *pkgruntime.Scheme
	// fleetsSeen follows every CelldFleet for the waits on fleets.
	fleetsSeen *observer
	// fleetPprof is the fleet operator's pprof address (-pprof only).
	fleetPprof string
	// timeout limits each wait of a phase; timelineOn logs where a
	// convergence waits (Options).
	timeout    time.Duration
	timelineOn bool
}

// startBed starts a bed with nodes kwok nodes (plus the cordoned ones) and
// both operators on known metrics addresses, leader election off.
func startBed(root string, nodes int, o Options) (*bench, string, error) {
	work, err := os.MkdirTemp("", "bench-bed-")
	if err != nil {
		return nil, "", err
	}
	fleetAddr, meshAddr := o.MetricsAddr, ""
	if fleetAddr == "" {
		if fleetAddr, err = freeAddr(); err != nil {
			return nil, work, err
		}
	}
	if meshAddr, err = freeAddr(); err != nil {
		return nil, work, err
	}
	audit, auditLog, err := auditArgs(work)
	if err != nil {
		return nil, work, err
	}
	// Log times to the nanosecond: the cold restart reads when the
	// informers synced from the log line itself.
	fleetArgs := []string{"--metrics-bind-address", fleetAddr, "--leader-elect=false", "--zap-time-encoding=rfc3339nano"}
	meshArgs := []string{"--metrics-bind-address", meshAddr, "--leader-elect=false"}
	var fleetPprof string
	if o.Pprof {
		var err1, err2 error
		var meshPprof string
		fleetPprof, err1 = freeAddr()
		meshPprof, err2 = freeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return nil, work, err
		}
		fleetArgs = append(fleetArgs, "--pprof-bind-address", fleetPprof)
		meshArgs = append(meshArgs, "--pprof-bind-address", meshPprof)
		logf("pprof: fleet operator http://%s/debug/pprof/, mesh operator http://%s/debug/pprof/", fleetPprof, meshPprof)
	}
	bed, err := harness.StartBed(context.Background(), harness.BedOptions{
		Root: root, WorkDir: work, Nodes: nodes + o.SkipNodes, Operators: true, NetworkPolicyEnforced: true,
		// 200 Pods per kwok node (the callers size the node count); the
		// Service range is a /12 (local.DefaultServiceCIDR): N=1,000 fleets
		// and their two floor copies hold 6,000 Services, where a /24 would
		// be full after ~250.
		Cluster: local.Options{MaxPodsPerNode: 200, ServiceCIDR: local.DefaultServiceCIDR, APIServerExtraArgs: audit},
		// Leader election off: its lease renewals (a PUT every few seconds)
		// would hide the reconcilers' own writes in rest_client_requests_total.
		FleetExtraArgs: fleetArgs,
		MeshExtraArgs:  meshArgs,
	})
	if err != nil {
		return nil, work, err
	}
	setActive(bed)
	scheme := pkgruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = fleetv1.AddToScheme(scheme)
	_ = meshv1.AddToScheme(scheme)
	cfg := rest.CopyConfig(bed.Cluster.REST)
	cfg.QPS = -1 // like the operator (controller-runtime's default): no client-side limit
	b := &bench{bed: bed, fleetMetrics: fleetAddr, meshMetricsAddr: meshAddr, auditLog: auditLog, cfg: cfg, scheme: scheme, fleetPprof: fleetPprof, timeout: o.Timeout, timelineOn: o.Timeline,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}},
		// An operator busy with a thousand fleets on 2 shared cores took
		// longer than 2 s to answer a scrape (the first N=1,000 run failed
		// on it); the scrape is a measurement, not a probe.
		metrics: &http.Client{Timeout: 30 * time.Second}}
	if b.k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err == nil {
		b.dyn, err = dynamic.NewForConfig(cfg)
	}
	if err == nil {
		b.cs, err = kubernetes.NewForConfig(cfg)
	}
	if err == nil {
		b.fleetsSeen, err = observe(context.Background(), cfg, scheme, &fleetv1.CelldFleet{})
	}
	if err == nil {
		err = b.cordon(context.Background(), o.SkipNodes)
	}
	if err == nil {
		err = b.waitMetrics(fleetAddr)
	}
	if err == nil {
		err = b.waitMetrics(meshAddr)
	}
	if err != nil {
		b.stop(work, err, false)
		return nil, work, err
	}
	return b, work, nil
}

func (b *bench) stop(work string, err error, keep bool) {
	if b.fleetsSeen != nil {
		b.fleetsSeen.stop()
	}
	setActive(nil)
	b.bed.Stop()
	if err == nil && !keep {
		_ = os.RemoveAll(work)
	} else {
		logf("bed files kept in %s", work)
	}
}

func benchN(root string, n int, o Options, meshIn *int) (res Result, mres *MeshResult, anomalies []string, err error) {
	res = Result{N: n, Namespaces: n / 10, Pods: n * membersPerFleet}
	// Room for the fleets, the two floor copies, the roll fleet and mesh
	// Pods, at 200 Pods per node.
	res.Nodes = (3*n*membersPerFleet+rollMembers)/200 + 2
	if meshIn != nil {
		res.Nodes += *meshIn/200 + 1
	}
	res.CordonedNodes = o.SkipNodes
	logf("N=%d: starting the bed (%d kwok nodes)", n, res.Nodes)
	res.LoadAvgStart = loadAvg()
	b, work, err := startBed(root, res.Nodes, o)
	if err != nil {
		return res, nil, nil, err
	}
	defer func() {
		res.LoadAvgEnd = loadAvg()
		b.stop(work, err, o.Keep)
	}()
	b.n, b.res, b.steady, b.probes, b.noFloors = n, &res, o.Steady, o.Probes, o.NoFloors
	res.OtherAPIServers = otherAPIServers(b.bed)
	if res.OtherAPIServers > 0 {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: %d other kube-apiserver process(es) on this host during the run: CPU shared, times inflated", n, res.OtherAPIServers))
	}
	ctx := context.Background()
	if err = b.all(ctx); err != nil {
		return res, nil, b.anom, err
	}
	if meshIn != nil {
		mres = &MeshResult{Nodes: res.Nodes, LoadAvgStart: loadAvg()}
		err = b.enrollMesh(ctx, root, *meshIn, mres)
		mres.LoadAvgEnd = loadAvg()
		if err != nil {
			mres.Error = err.Error()
			err = fmt.Errorf("mesh M=%d: %w", *meshIn, err)
		}
	}
	return res, mres, b.anom, err
}

// benchMesh measures one namespace count in a bed of its own.
func benchMesh(root string, m int, o Options) (res MeshResult, anomalies []string, err error) {
	res = MeshResult{Namespaces: m, Nodes: m/200 + 1}
	logf("mesh M=%d: starting the bed (%d kwok nodes)", m, res.Nodes)
	res.LoadAvgStart = loadAvg()
	b, work, err := startBed(root, res.Nodes, o)
	if err != nil {
		return res, nil, err
	}
	defer func() {
		res.LoadAvgEnd = loadAvg()
		b.stop(work, err, o.Keep)
	}()
	if n := otherAPIServers(b.bed); n > 0 {
		b.anom = append(b.anom, fmt.Sprintf("mesh M=%d: %d other kube-apiserver process(es) on this host during the run: CPU shared, times inflated", m, n))
	}
	b.probes = o.Probes
	err = b.enrollMesh(context.Background(), root, m, &res)
	if err == nil {
		logf("mesh M=%d: control plane Ready at %.1fs, all STRICT at %.1fs (%.1fs after Ready); writes %v; per namespace %v",
			m, res.ControlPlaneReadySeconds, res.AllStrictSeconds, res.ReadyToStrictSeconds, res.WritesByResource, res.PerNamespace)
	}
	return res, b.anom, err
}

var (
	activeMu sync.Mutex
	active   *harness.Bed
)

func setActive(b *harness.Bed) {
	activeMu.Lock()
	active = b
	activeMu.Unlock()
}

// stopOnSignal tears the running bed down on SIGINT/SIGTERM.
func StopOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ch
		activeMu.Lock()
		if active != nil {
			active.Stop()
		}
		os.Exit(130)
	}()
}

// cordon marks the first -skip-nodes nodes unschedulable. Every local bed
// gives node i the Pod range 127.<i+1>.0.0/16, so two beds on one machine
// (a CI run next to the benchmark) hand out the same Pod IPs and one bed's
// stand-in answers the other's operator. Using only higher nodes avoids it.
func (b *bench) cordon(ctx context.Context, n int) error {
	for i := 0; i < n; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: local.NodeName(i)}}
		if err := b.k8s.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`))); err != nil {
			return fmt.Errorf("cordon %s: %w", node.Name, err)
		}
	}
	return nil
}
