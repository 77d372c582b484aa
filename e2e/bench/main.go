// Command bench measures both operators on the local control plane (kwok
// nodes, the celld stand-in on every member Pod IP, both operators as
// processes under their charts' RBAC) and writes one result per run to
// bench/results/<UTC timestamp>.{json,md}; with -readme it rewrites the
// summary block of README.md from the newest result. See docs/benchmark.md.
//
//	cd e2e && go run ./bench                         # N = 30,100,300; mesh 10,100,300 namespaces
//	cd e2e && go run ./bench -n 30 -mesh 10          # a short run
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	pkgruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

const (
	membersPerFleet = 3
	rollMembers     = 5
	stateInterval   = 10 * time.Second // the bed's --state-interval
	imageV1         = "registry.example/celld:1.0.0"
	imageV2         = "registry.example/celld:1.1.0"
)

var (
	flagN       = flag.String("n", envOr("BENCH_N", "30,100,300"), "comma-separated fleet counts (>= 10); empty for none")
	flagMesh    = flag.String("mesh", envOr("BENCH_MESH", "10,100,300"), "comma-separated namespace counts the mesh operator enrolls (>= 1); empty for none")
	flagOut     = flag.String("out", "", "results directory (default <repo>/bench/results)")
	flagReadme  = flag.String("readme", "", "rewrite the bench block of this README from the newest result in -out")
	flagNoRun   = flag.Bool("readme-only", false, "only rewrite -readme from the newest result in -out; run nothing")
	flagSteady  = flag.Duration("steady", 3*stateInterval+5*time.Second, "steady-state window after poking every fleet")
	flagMetrics = flag.String("metrics-addr", os.Getenv("BENCH_METRICS_ADDR"), "loopback address for the fleet operator's metrics (default: a free port)")
	flagSkip    = flag.Int("skip-nodes", 0, "cordon the first kwok nodes of each bed (beds lease disjoint Pod ranges, so this is no longer needed)")
	flagKeep    = flag.Bool("keep", os.Getenv("BENCH_KEEP") != "", "keep each bed's files (operator logs) after a successful N")
	flagTimeout = flag.Duration("timeout", 15*time.Minute, "per-phase wait limit")
)

// options are one run's settings (the flags, or the smoke test's).
type options struct {
	n, mesh []int
	steady  time.Duration
	// meshInFleetBed runs mesh count i in the bed of fleet count i instead of
	// a fresh bed (the smoke test saves a bed start this way).
	meshInFleetBed bool
	keep           bool
	log            io.Writer
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// Requests is rest_client_requests_total of the fleet operator summed by method.
type Requests map[string]float64

// Phase is the operator's cost over one phase.
type Phase struct {
	Seconds    float64  `json:"seconds"`
	CPUSeconds float64  `json:"cpuSeconds"`
	Requests   Requests `json:"requests"`
	Writes     float64  `json:"writes"`
	// ReconcileErrors counts "Reconciler error" lines in the operator's log
	// (each one means a rate-limited requeue).
	ReconcileErrors int `json:"reconcileErrors"`
}

// Roll is the roll-overhead measurement of one 5-member fleet.
type Roll struct {
	Members          int                `json:"members"`
	RollSeconds      float64            `json:"rollSeconds"`
	MemberSeconds    map[string]float64 `json:"memberRestartToReadySeconds"`
	SumMemberSeconds float64            `json:"sumMemberSeconds"`
	OverheadSeconds  float64            `json:"overheadSeconds"`
	// OverheadPerMember = OverheadSeconds / Members (target: under 1 s).
	OverheadPerMember float64 `json:"overheadPerMemberSeconds"`
	// Steps is each member's timeline in seconds after the image patch, in
	// the order the operator replaced them; Breakdown splits the overhead.
	Steps     []RollStep    `json:"steps"`
	Breakdown RollBreakdown `json:"breakdown"`
}

// RollStep is one member's replacement as the bench's 100 ms poll saw it.
type RollStep struct {
	Member string `json:"member"`
	// Deleted: the old Pod is first seen terminating (or gone).
	Deleted float64 `json:"deleted"`
	// Created: the replacement Pod exists (see docs/benchmark.md).
	Created float64 `json:"created"`
	// Serving: the replacement is Ready and healthy on /state on the new version.
	Serving float64 `json:"serving"`
}

// RollBreakdown adds up to the overhead (within the poll's resolution).
type RollBreakdown struct {
	// FirstDelete: image patch until the first member is deleted.
	FirstDelete float64 `json:"firstDeleteSeconds"`
	// Recreate: sum over members of deleted until the replacement exists
	// (graceful deletion, then the StatefulSet controller's create).
	Recreate float64 `json:"recreateSeconds"`
	// NextDelete: sum over steps of one replacement serving until the
	// operator deletes the next member: the operator's own reaction.
	NextDelete float64 `json:"nextDeleteSeconds"`
	// FinalReady: the last replacement serving until the fleet reports
	// Ready on the new version.
	FinalReady float64 `json:"finalReadySeconds"`
}

// Result is one N.
type Result struct {
	N                  int     `json:"n"`
	Namespaces         int     `json:"namespaces"`
	Pods               int     `json:"pods"`
	Nodes              int     `json:"nodes"`
	CordonedNodes      int     `json:"cordonedNodes"`
	OtherAPIServers    int     `json:"otherKubeAPIServersOnHost"`
	LoadAvgStart       string  `json:"loadAvgStart"`
	LoadAvgEnd         string  `json:"loadAvgEnd"`
	ConvergenceSeconds float64 `json:"convergenceSeconds"`
	FloorSeconds       float64 `json:"floorSeconds"`
	FloorObjects       int     `json:"floorObjects"`
	Ratio              float64 `json:"ratio"`
	Create             Phase   `json:"create"`
	Steady             Phase   `json:"steady"`
	TemplateRoll       Phase   `json:"templateRoll"`
	PeakRSSMiB         float64 `json:"peakRSSMiB"`
	CPUSecondsTotal    float64 `json:"cpuSecondsTotal"`
	Roll               Roll    `json:"roll"`
	Error              string  `json:"error,omitempty"`
}

// Target is one of issue #10's targets and what this run measured.
type Target struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
	// Note says by how much and why when the target is missed.
	Note string `json:"note,omitempty"`
}

// Run is one `make bench`.
type Run struct {
	Started  string       `json:"started"`
	Finished string       `json:"finished"`
	Commit   string       `json:"commit"`
	Host     Host         `json:"host"`
	Method   string       `json:"method"`
	Results  []Result     `json:"results"`
	Mesh     []MeshResult `json:"mesh,omitempty"`
	// MeshLinearity fits each mesh write count to a·M + b over the
	// namespace counts M measured.
	MeshLinearity []string `json:"meshLinearity,omitempty"`
	Targets       []Target `json:"targets,omitempty"`
	Anomalies     []string `json:"anomalies,omitempty"`
}

type Host struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	OS        string `json:"os"`
	// Uptime is `uptime` at the start and end of the run: other engineers'
	// test beds share this machine's cores, and the load average shows it.
	UptimeStart string `json:"uptimeStart"`
	UptimeEnd   string `json:"uptimeEnd,omitempty"`
}

func main() {
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	stopOnSignal()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

var logOut io.Writer = os.Stderr

func logf(format string, a ...any) {
	fmt.Fprintf(logOut, "%s bench: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func run() error {
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	out := *flagOut
	if out == "" {
		out = filepath.Join(root, "bench", "results")
	}
	if *flagNoRun {
		if *flagReadme == "" {
			return fmt.Errorf("-readme-only needs -readme")
		}
		return updateReadme(*flagReadme, out)
	}
	o := options{steady: *flagSteady, keep: *flagKeep, log: os.Stderr}
	if o.n, err = parseCounts(*flagN, 10); err != nil {
		return err
	}
	if o.mesh, err = parseCounts(*flagMesh, 1); err != nil {
		return err
	}
	started := time.Now().UTC()
	r, err := execute(root, o, func(r *Run) error { return write(out, started, r) })
	if r != nil {
		fmt.Print(markdown(r))
	}
	if err != nil {
		return err
	}
	if *flagReadme != "" {
		if err := updateReadme(*flagReadme, out); err != nil {
			return err
		}
		logf("rewrote the bench block of %s", *flagReadme)
	}
	return failed(r)
}

func parseCounts(s string, minimum int) ([]int, error) {
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

// failed reports the first N or M that failed.
func failed(r *Run) error {
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

// execute runs every N and M; emit (may be nil) gets the run after each
// one, so partial results survive a failure later on.
func execute(root string, o options, emit func(*Run) error) (*Run, error) {
	if o.log != nil {
		logOut = o.log
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
	for i, n := range o.n {
		var meshIn *int
		if o.meshInFleetBed && i < len(o.mesh) {
			meshIn = &o.mesh[i]
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
	if !o.meshInFleetBed {
		for _, m := range o.mesh {
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
	http            *http.Client
	n               int
	steady          time.Duration
	res             *Result
	anom            []string
	fleetMetrics    string
	meshMetricsAddr string
}

// startBed starts a bed with nodes kwok nodes (plus the cordoned ones) and
// both operators on known metrics addresses, leader election off.
func startBed(root string, nodes int) (*bench, string, error) {
	work, err := os.MkdirTemp("", "bench-bed-")
	if err != nil {
		return nil, "", err
	}
	fleetAddr, meshAddr := *flagMetrics, ""
	if fleetAddr == "" {
		if fleetAddr, err = freeAddr(); err != nil {
			return nil, work, err
		}
	}
	if meshAddr, err = freeAddr(); err != nil {
		return nil, work, err
	}
	bed, err := harness.StartBed(context.Background(), harness.BedOptions{
		Root: root, WorkDir: work, Nodes: nodes + *flagSkip, Operators: true, NetworkPolicyEnforced: true,
		Cluster: local.Options{MaxPodsPerNode: 200},
		// Leader election off: its lease renewals (a PUT every few seconds)
		// would hide the reconcilers' own writes in rest_client_requests_total.
		FleetExtraArgs: []string{"--metrics-bind-address", fleetAddr, "--leader-elect=false"},
		MeshExtraArgs:  []string{"--metrics-bind-address", meshAddr, "--leader-elect=false"},
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
	b := &bench{bed: bed, fleetMetrics: fleetAddr, meshMetricsAddr: meshAddr,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}}
	if b.k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err == nil {
		b.dyn, err = dynamic.NewForConfig(cfg)
	}
	if err == nil {
		err = b.cordon(context.Background(), *flagSkip)
	}
	if err == nil {
		err = b.waitMetrics(fleetAddr)
	}
	if err == nil {
		err = b.waitMetrics(meshAddr)
	}
	if err != nil {
		stopBed(bed, work, err, false)
		return nil, work, err
	}
	return b, work, nil
}

func stopBed(bed *harness.Bed, work string, err error, keep bool) {
	setActive(nil)
	bed.Stop()
	if err == nil && !keep {
		_ = os.RemoveAll(work)
	} else {
		logf("bed files kept in %s", work)
	}
}

func benchN(root string, n int, o options, meshIn *int) (res Result, mres *MeshResult, anomalies []string, err error) {
	res = Result{N: n, Namespaces: n / 10, Pods: n * membersPerFleet}
	// Room for the fleets, the floor copies, the roll fleet and mesh Pods.
	res.Nodes = (2*n*membersPerFleet+rollMembers)/200 + 2
	if meshIn != nil {
		res.Nodes += *meshIn/200 + 1
	}
	res.CordonedNodes = *flagSkip
	logf("N=%d: starting the bed (%d kwok nodes)", n, res.Nodes)
	res.LoadAvgStart = loadAvg()
	b, work, err := startBed(root, res.Nodes)
	if err != nil {
		return res, nil, nil, err
	}
	defer func() {
		res.LoadAvgEnd = loadAvg()
		stopBed(b.bed, work, err, o.keep)
	}()
	b.n, b.res, b.steady = n, &res, o.steady
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
func benchMesh(root string, m int, o options) (res MeshResult, anomalies []string, err error) {
	res = MeshResult{Namespaces: m, Nodes: m/200 + 1}
	logf("mesh M=%d: starting the bed (%d kwok nodes)", m, res.Nodes)
	res.LoadAvgStart = loadAvg()
	b, work, err := startBed(root, res.Nodes)
	if err != nil {
		return res, nil, err
	}
	defer func() {
		res.LoadAvgEnd = loadAvg()
		stopBed(b.bed, work, err, o.keep)
	}()
	if n := otherAPIServers(b.bed); n > 0 {
		b.anom = append(b.anom, fmt.Sprintf("mesh M=%d: %d other kube-apiserver process(es) on this host during the run: CPU shared, times inflated", m, n))
	}
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
func stopOnSignal() {
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

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// otherAPIServers counts kube-apiserver processes on the host not started by this bed.
func otherAPIServers(bed *harness.Bed) int {
	mine := bed.Opts.WorkDir
	n := 0
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		c := string(cmd)
		if strings.Contains(c, "kube-apiserver") && strings.Contains(c, "--etcd-servers") && (mine == "" || !strings.Contains(c, mine)) {
			n++
		}
	}
	return n
}

func (b *bench) all(ctx context.Context) error {
	pid := b.bed.Fleet.Pid()
	cpu0, _ := cpuSeconds(pid)

	// 1+2: create N fleets and wait for all Ready.
	fleets, err := b.createFleets(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	var created Phase
	if err := b.phase(&created, func() error {
		if err := b.applyFleets(ctx, fleets); err != nil {
			return err
		}
		return b.waitFleetsReady(ctx, fleets, "1.0.0")
	}); err != nil {
		return err
	}
	b.res.ConvergenceSeconds = round(time.Since(start).Seconds(), 2)
	b.res.Create = created
	logf("N=%d: %d fleets Ready in %.1fs; %v", b.n, len(fleets), b.res.ConvergenceSeconds, created.Requests)

	// Steady state: poke every fleet (annotation → reconcile) and wait three
	// state intervals, so every fleet re-reads /state several times.
	if err := b.phase(&b.res.Steady, func() error {
		for _, f := range fleets {
			p := fmt.Sprintf(`{"metadata":{"annotations":{"bench.fleetmesh.dev/poke":%q}}}`, time.Now().Format(time.RFC3339Nano))
			if err := b.k8s.Patch(ctx, &fleetv1.CelldFleet{ObjectMeta: f.ObjectMeta}, client.RawPatch(types.MergePatchType, []byte(p))); err != nil {
				return err
			}
		}
		time.Sleep(b.steady)
		return nil
	}); err != nil {
		return err
	}
	logf("N=%d: steady %.0fs: %v", b.n, b.res.Steady.Seconds, b.res.Steady.Requests)
	if b.res.Steady.Writes != 0 {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: %v writes in steady state: %v", b.n, b.res.Steady.Writes, b.res.Steady.Requests))
	}

	// Template roll of one fleet.
	if err := b.phase(&b.res.TemplateRoll, func() error {
		f := fleets[0]
		if err := b.patchImage(ctx, f, imageV2); err != nil {
			return err
		}
		return b.waitFleetsReady(ctx, []*fleetv1.CelldFleet{f}, "1.1.0")
	}); err != nil {
		return err
	}
	logf("N=%d: roll of one fleet in %.1fs: %v", b.n, b.res.TemplateRoll.Seconds, b.res.TemplateRoll.Requests)

	// 1: the control plane's floor.
	if err := b.floor(ctx, fleets); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	b.res.Ratio = round(b.res.ConvergenceSeconds/b.res.FloorSeconds, 2)
	logf("N=%d: floor %.1fs (%d objects), ratio %.2f", b.n, b.res.FloorSeconds, b.res.FloorObjects, b.res.Ratio)

	// 4: roll overhead of a 5-member fleet.
	if err := b.rollOverhead(ctx); err != nil {
		return fmt.Errorf("roll overhead: %w", err)
	}
	logf("N=%d: 5-member roll %.1fs, members %.1fs, overhead %.1fs (%+v)", b.n, b.res.Roll.RollSeconds, b.res.Roll.SumMemberSeconds, b.res.Roll.OverheadSeconds, b.res.Roll.Breakdown)

	// 3: memory and CPU over the whole N.
	hwm, err := peakRSS(pid)
	if err != nil {
		return err
	}
	b.res.PeakRSSMiB = round(hwm/1024, 1)
	cpu1, _ := cpuSeconds(pid)
	b.res.CPUSecondsTotal = round(cpu1-cpu0, 2)
	if b.bed.Fleet.Pid() != pid {
		return fmt.Errorf("fleet operator restarted during the run")
	}
	return b.bed.Healthy()
}

// phase runs fn and records the fleet operator's requests and CPU over it.
func (b *bench) phase(p *Phase, fn func() error) error {
	return b.phaseOf(b.fleetMetrics, b.bed.Fleet, p, fn)
}

// reconcileErrors counts controller-runtime's "Reconciler error" log lines.
func reconcileErrors(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), `"Reconciler error"`)
}

func round(v float64, places int) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', places, 64), 64)
	return f
}

func (b *bench) waitMetrics(addr string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := scrapeAddr(b.http, addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("operator metrics on %s: %w", addr, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func parseRequests(r io.Reader) (Requests, error) {
	out := Requests{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		end := strings.LastIndex(line, "}")
		labels, value := line[len("rest_client_requests_total{"):end], strings.TrimSpace(line[end+1:])
		method := ""
		for _, kv := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(kv, `method="`); ok {
				method = strings.TrimSuffix(v, `"`)
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[method] += v
	}
	return out, sc.Err()
}

// cpuSeconds is utime+stime of pid from /proc/pid/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	// Fields after the command: state is [0], utime [11], stime [12].
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// peakRSS is VmHWM in KiB.
func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

func (b *bench) createFleets(ctx context.Context) ([]*fleetv1.CelldFleet, error) {
	var out []*fleetv1.CelldFleet
	for i := 0; i < b.res.Namespaces; i++ {
		ns := fmt.Sprintf("bench-%d", i)
		if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	for i := 0; i < b.n; i++ {
		out = append(out, newFleet(fmt.Sprintf("bench-%d", i%b.res.Namespaces), fmt.Sprintf("f%d", i), membersPerFleet))
	}
	return out, nil
}

func newFleet(ns, name string, replicas int32) *fleetv1.CelldFleet {
	return &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1.CelldFleetSpec{
			Replicas: ptr.To(replicas),
			Image:    imageV1,
			Storage:  &fleetv1.Storage{Size: resource.MustParse("1Gi")},
		},
	}
}

func (b *bench) applyFleets(ctx context.Context, fleets []*fleetv1.CelldFleet) error {
	for _, f := range fleets {
		if err := b.k8s.Create(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) patchImage(ctx context.Context, f *fleetv1.CelldFleet, image string) error {
	p := fmt.Sprintf(`{"spec":{"image":%q}}`, image)
	return b.k8s.Patch(ctx, &fleetv1.CelldFleet{ObjectMeta: f.ObjectMeta}, client.RawPatch(types.MergePatchType, []byte(p)))
}

// readyOn is the specs' readiness: Ready for the current generation, every
// member reporting version on /state.
func readyOn(f *fleetv1.CelldFleet, version string) bool {
	ready := meta.FindStatusCondition(f.Status.Conditions, "Ready")
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != f.Generation {
		return false
	}
	for _, m := range f.Status.Members {
		if m.State == nil || m.State.Version != version || !m.State.Healthy {
			return false
		}
	}
	return f.Spec.Replicas != nil && len(f.Status.Members) == int(*f.Spec.Replicas)
}

func (b *bench) waitFleetsReady(ctx context.Context, fleets []*fleetv1.CelldFleet, version string) error {
	want := map[types.NamespacedName]bool{}
	for _, f := range fleets {
		want[client.ObjectKeyFromObject(f)] = true
	}
	deadline := time.Now().Add(*flagTimeout)
	for {
		list := &fleetv1.CelldFleetList{}
		if err := b.k8s.List(ctx, list); err != nil {
			return err
		}
		pending := 0
		for i := range list.Items {
			f := &list.Items[i]
			if want[client.ObjectKeyFromObject(f)] && !readyOn(f, version) {
				pending++
			}
		}
		seen := 0
		for i := range list.Items {
			if want[client.ObjectKeyFromObject(&list.Items[i])] {
				seen++
			}
		}
		pending += len(want) - seen
		if pending == 0 {
			return nil
		}
		if err := b.bed.Healthy(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d fleets not Ready on %s after %s", pending, len(want), version, *flagTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

var floorKinds = []schema.GroupVersionResource{
	{Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "services"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
}

// floor copies every converged fleet's objects (stripped of status and
// server-set metadata) into fresh namespaces, applies them server-side with
// one client, and waits until every Pod is Ready with a healthy /state.
func (b *bench) floor(ctx context.Context, fleets []*fleetv1.CelldFleet) error {
	var objs []*unstructured.Unstructured
	var gvrs []schema.GroupVersionResource
	for i := 0; i < b.res.Namespaces; i++ {
		src, dst := fmt.Sprintf("bench-%d", i), fmt.Sprintf("floor-%d", i)
		if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dst}}); err != nil {
			return err
		}
		for _, gvr := range floorKinds {
			list, err := b.dyn.Resource(gvr).Namespace(src).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for i := range list.Items {
				u := &list.Items[i]
				if !ownedByFleet(u) {
					continue
				}
				objs = append(objs, strip(u, dst))
				gvrs = append(gvrs, gvr)
			}
		}
	}
	b.res.FloorObjects = len(objs)
	if want := b.n * 5; len(objs) != want {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: floor copied %d objects, expected %d (SA, 2 Services, NetworkPolicy, StatefulSet per fleet)", b.n, len(objs), want))
	}
	start := time.Now()
	for i, u := range objs {
		if _, err := b.dyn.Resource(gvrs[i]).Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), u,
			metav1.ApplyOptions{FieldManager: "bench-floor", Force: true}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", gvrs[i].Resource, u.GetNamespace(), u.GetName(), err)
		}
	}
	var namespaces []string
	for i := 0; i < b.res.Namespaces; i++ {
		namespaces = append(namespaces, fmt.Sprintf("floor-%d", i))
	}
	// Any version: the fleet rolled earlier was copied on its new image.
	if err := b.waitPodsServing(ctx, namespaces, b.n*membersPerFleet, ""); err != nil {
		return err
	}
	b.res.FloorSeconds = round(time.Since(start).Seconds(), 2)
	return nil
}

func ownedByFleet(u *unstructured.Unstructured) bool {
	for _, o := range u.GetOwnerReferences() {
		if o.Kind == "CelldFleet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// strip keeps what a client would apply: apiVersion, kind, name, labels,
// annotations and spec (minus what the API server allocates).
func strip(in *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": in.GetAPIVersion(),
		"kind":       in.GetKind(),
	}}
	u.SetNamespace(ns)
	u.SetName(in.GetName())
	u.SetLabels(in.GetLabels())
	ann := in.GetAnnotations()
	delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
	if len(ann) > 0 {
		u.SetAnnotations(ann)
	}
	for k, v := range in.Object {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			u.Object[k] = v
		}
	}
	if in.GetKind() == "Service" {
		unstructured.RemoveNestedField(u.Object, "spec", "clusterIP")
		unstructured.RemoveNestedField(u.Object, "spec", "clusterIPs")
	}
	if in.GetKind() == "StatefulSet" {
		// Claim templates carry status and server-set metadata too.
		if tmpls, ok, _ := unstructured.NestedSlice(u.Object, "spec", "volumeClaimTemplates"); ok {
			for i, t := range tmpls {
				if m, ok := t.(map[string]any); ok {
					delete(m, "status")
					if md, ok := m["metadata"].(map[string]any); ok {
						delete(md, "creationTimestamp")
					}
					tmpls[i] = m
				}
			}
			_ = unstructured.SetNestedSlice(u.Object, tmpls, "spec", "volumeClaimTemplates")
		}
		unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	}
	return u
}

// waitPodsServing waits for want celld Pods in namespaces that are Ready
// and whose /state reports healthy on version ("" for any).
func (b *bench) waitPodsServing(ctx context.Context, namespaces []string, want int, version string) error {
	deadline := time.Now().Add(*flagTimeout)
	served := map[types.UID]bool{}
	for {
		var pods []corev1.Pod
		for _, ns := range namespaces {
			list := &corev1.PodList{}
			if err := b.k8s.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "celld"}); err != nil {
				return err
			}
			pods = append(pods, list.Items...)
		}
		ok := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range pods {
			p := &pods[i]
			mu.Lock()
			done := served[p.UID]
			if done {
				ok++
			}
			mu.Unlock()
			if done {
				continue
			}
			if !podReady(p) {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if b.serving(p.Status.PodIP, version) {
					mu.Lock()
					served[p.UID] = true
					ok++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if ok >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Pods serving after %s", ok, want, *flagTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serving reads the member's /state as the operator does.
func (b *bench) serving(ip, version string) bool {
	resp, err := b.http.Get("http://" + ip + ":8081/state")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Healthy bool   `json:"healthy"`
		Version string `json:"version"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false
	}
	return st.Healthy && (version == "" || st.Version == version)
}

// rollOverhead rolls a 5-member fleet and subtracts, from the roll's
// duration, the time each new member took from Pod creation to Ready with a
// healthy /state on the new version. It also records each step's timeline,
// so the overhead splits into where it goes.
func (b *bench) rollOverhead(ctx context.Context) error {
	const ns = "bench-roll"
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	f := newFleet(ns, "roll", rollMembers)
	if err := b.k8s.Create(ctx, f); err != nil {
		return err
	}
	if err := b.waitFleetsReady(ctx, []*fleetv1.CelldFleet{f}, "1.0.0"); err != nil {
		return err
	}
	old := map[types.UID]string{}
	list := &corev1.PodList{}
	if err := b.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, p := range list.Items {
		old[p.UID] = p.Name
	}
	type member struct {
		created time.Time
		ready   time.Time
	}
	members := map[types.UID]*member{}
	names := map[types.UID]string{}
	deleted := map[string]time.Time{} // old Pod name → first seen terminating or gone
	start := time.Now()
	if err := b.patchImage(ctx, f, imageV2); err != nil {
		return err
	}
	deadline := start.Add(*flagTimeout)
	for {
		list := &corev1.PodList{}
		if err := b.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		now := time.Now()
		present := map[types.UID]bool{}
		for i := range list.Items {
			p := &list.Items[i]
			present[p.UID] = true
			if name, isOld := old[p.UID]; isOld {
				if _, seen := deleted[name]; !seen && p.DeletionTimestamp != nil {
					deleted[name] = now
				}
				continue
			}
			m := members[p.UID]
			if m == nil {
				// creationTimestamp has one-second resolution and the Pod
				// was created before this poll saw it: the earlier of the
				// two upper bounds is within one poll of the truth.
				created := p.CreationTimestamp.Add(time.Second)
				if now.Before(created) {
					created = now
				}
				m = &member{created: created}
				members[p.UID], names[p.UID] = m, p.Name
			}
			if m.ready.IsZero() && podReady(p) && b.serving(p.Status.PodIP, "1.1.0") {
				m.ready = now
			}
		}
		for uid, name := range old {
			if _, seen := deleted[name]; !seen && !present[uid] {
				deleted[name] = now
			}
		}
		got := &fleetv1.CelldFleet{}
		if err := b.k8s.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			return err
		}
		if readyOn(got, "1.1.0") {
			break
		}
		if now.After(deadline) {
			return fmt.Errorf("roll not done after %s", *flagTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	end := time.Now()
	r := Roll{Members: rollMembers, RollSeconds: round(end.Sub(start).Seconds(), 2), MemberSeconds: map[string]float64{}}
	since := func(t time.Time) float64 { return round(t.Sub(start).Seconds(), 2) }
	for uid, m := range members {
		if m.ready.IsZero() {
			return fmt.Errorf("member %s never seen serving", names[uid])
		}
		// Both ends are seen by the same 100 ms poll, so their errors
		// roughly cancel.
		d := m.ready.Sub(m.created).Seconds()
		r.MemberSeconds[names[uid]] = round(d, 2)
		r.SumMemberSeconds += d
		r.Steps = append(r.Steps, RollStep{Member: names[uid], Deleted: since(deleted[names[uid]]), Created: since(m.created), Serving: since(m.ready)})
	}
	if len(members) != rollMembers {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: roll replaced %d Pods, expected %d", b.n, len(members), rollMembers))
	}
	sort.Slice(r.Steps, func(i, j int) bool { return r.Steps[i].Deleted < r.Steps[j].Deleted })
	for i, st := range r.Steps {
		if i == 0 {
			r.Breakdown.FirstDelete = st.Deleted
		} else {
			r.Breakdown.NextDelete += st.Deleted - r.Steps[i-1].Serving
		}
		r.Breakdown.Recreate += st.Created - st.Deleted
		if i == len(r.Steps)-1 {
			r.Breakdown.FinalReady = r.RollSeconds - st.Serving
		}
	}
	r.Breakdown = RollBreakdown{FirstDelete: round(r.Breakdown.FirstDelete, 2), Recreate: round(r.Breakdown.Recreate, 2),
		NextDelete: round(r.Breakdown.NextDelete, 2), FinalReady: round(r.Breakdown.FinalReady, 2)}
	r.SumMemberSeconds = round(r.SumMemberSeconds, 2)
	r.OverheadSeconds = round(r.RollSeconds-r.SumMemberSeconds, 2)
	r.OverheadPerMember = round(r.OverheadSeconds/float64(rollMembers), 2)
	b.res.Roll = r
	return nil
}

// uptime is the `uptime` line (load averages over 1, 5 and 15 minutes).
func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "load average: " + loadAvg()
	}
	return strings.TrimSpace(string(out))
}

func write(dir string, started time.Time, r *Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, started.Format("20060102T150405Z"))
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".md", []byte(markdown(r)), 0o644)
}

func fmtReq(r Requests) string {
	var ks []string
	for k := range r {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s %g", k, r[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func markdown(r *Run) string {
	var s strings.Builder
	fmt.Fprintf(&s, "# Benchmark %s\n\ncommit `%s`, %d CPUs, %s; method: docs/benchmark.md\n\n", r.Started, r.Commit, r.Host.CPUs, r.Host.GoVersion)
	fmt.Fprintf(&s, "Machine load (`uptime`): at the start `%s`; at the end `%s`. Other engineers' test beds share these cores: times are inflated by their load, request counts are not.\n\n", r.Host.UptimeStart, r.Host.UptimeEnd)
	if len(r.Results) > 0 {
		s.WriteString("## Fleet operator\n\n")
		s.WriteString("| N | pods | converge s | floor s | ratio | create: requests (writes) | steady: requests (writes) | roll 1 fleet: requests (writes) | reconcile errors (create/steady/roll) | peak RSS MiB | CPU s | 5-member roll s | members s | overhead s | overhead s/member | load avg start → end |\n")
		s.WriteString("| ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
		for _, x := range r.Results {
			if x.Error != "" {
				fmt.Fprintf(&s, "| %d | %d | failed: %s |\n", x.N, x.Pods, x.Error)
				continue
			}
			fmt.Fprintf(&s, "| %d | %d | %.1f | %.1f | %.2f | %s (%g) | %s (%g) | %s (%g) | %d/%d/%d | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %s → %s |\n",
				x.N, x.Pods, x.ConvergenceSeconds, x.FloorSeconds, x.Ratio,
				fmtReq(x.Create.Requests), x.Create.Writes, fmtReq(x.Steady.Requests), x.Steady.Writes,
				fmtReq(x.TemplateRoll.Requests), x.TemplateRoll.Writes,
				x.Create.ReconcileErrors, x.Steady.ReconcileErrors, x.TemplateRoll.ReconcileErrors,
				x.PeakRSSMiB, x.CPUSecondsTotal, x.Roll.RollSeconds, x.Roll.SumMemberSeconds, x.Roll.OverheadSeconds, x.Roll.OverheadPerMember,
				x.LoadAvgStart, x.LoadAvgEnd)
		}
		s.WriteString("\nRoll overhead, where it goes (s): until the first delete / deleted→recreated (graceful deletion + StatefulSet controller) / replacement serving→next delete (operator) / last serving→fleet Ready\n\n")
		for _, x := range r.Results {
			if x.Error == "" {
				bd := x.Roll.Breakdown
				fmt.Fprintf(&s, "- N=%d: %.2f / %.2f / %.2f / %.2f\n", x.N, bd.FirstDelete, bd.Recreate, bd.NextDelete, bd.FinalReady)
			}
		}
	}
	if len(r.Mesh) > 0 {
		s.WriteString("\n## Mesh operator: enrolling M namespaces (one running, ztunnel-captured Pod each)\n\n")
		s.WriteString("| M | control plane Ready s | ServiceMesh Ready s | all STRICT s | Ready → all STRICT s | mesh operator requests (writes) | API server writes by resource | per namespace | after all STRICT: requests (writes) | peak RSS MiB | load avg start → end |\n")
		s.WriteString("| ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | ---: | --- |\n")
		for _, m := range r.Mesh {
			if m.Error != "" {
				fmt.Fprintf(&s, "| %d | failed: %s |\n", m.Namespaces, m.Error)
				continue
			}
			fmt.Fprintf(&s, "| %d | %.1f | %.1f | %.1f | %.1f | %s (%g) | %s | %s | %s (%g) | %.1f | %s → %s |\n",
				m.Namespaces, m.ControlPlaneReadySeconds, m.MeshReadySeconds, m.AllStrictSeconds, m.ReadyToStrictSeconds,
				fmtReq(m.Enroll.Requests), m.Enroll.Writes, fmtReq(m.WritesByResource), fmtReq(m.PerNamespace),
				fmtReq(m.Settle.Requests), m.Settle.Writes, m.PeakRSSMiB, m.LoadAvgStart, m.LoadAvgEnd)
		}
		if len(r.MeshLinearity) > 0 {
			s.WriteString("\nWrites as a per namespace + a fixed part, over the namespace counts (see docs/benchmark.md):\n\n")
			for _, l := range r.MeshLinearity {
				fmt.Fprintf(&s, "- %s\n", l)
			}
		}
	}
	if len(r.Targets) > 0 {
		s.WriteString("\n## Targets\n\n| target | wanted | measured | met | by how much, why |\n| --- | --- | --- | --- | --- |\n")
		for _, t := range r.Targets {
			met := "yes"
			if !t.Met {
				met = "**no**"
			}
			fmt.Fprintf(&s, "| %s | %s | %s | %s | %s |\n", t.Name, t.Target, t.Measured, met, t.Note)
		}
	}
	if len(r.Anomalies) > 0 {
		s.WriteString("\nAnomalies:\n\n")
		for _, a := range r.Anomalies {
			fmt.Fprintf(&s, "- %s\n", a)
		}
	}
	return s.String()
}

// targets checks issue #10's targets against the run.
func targets(r *Run) []Target {
	var out []Target
	var ok []Result
	for _, res := range r.Results {
		if res.Error == "" {
			ok = append(ok, res)
		}
	}
	if len(ok) > 0 {
		largest := ok[len(ok)-1]
		for _, res := range ok {
			if res.N > largest.N {
				largest = res
			}
		}
		load := fmt.Sprintf("load average %s at the start of that N, %s at its end, %d other kube-apiserver(s) on the host", largest.LoadAvgStart, largest.LoadAvgEnd, largest.OtherAPIServers)
		t := Target{Name: fmt.Sprintf("convergence ratio at N=%d", largest.N), Target: "at most 2.0 × the direct-apply floor at N=300",
			Measured: fmt.Sprintf("%.2f (%.1f s vs %.1f s)", largest.Ratio, largest.ConvergenceSeconds, largest.FloorSeconds), Met: largest.Ratio <= 2}
		if !t.Met {
			t.Note = fmt.Sprintf("over by %.2f (%.0f %%); %s", largest.Ratio-2, (largest.Ratio/2-1)*100, load)
		}
		if largest.N < 300 {
			t.Note = strings.TrimPrefix(t.Note+"; N=300 was not run", "; ")
		}
		out = append(out, t)

		writes, worst := 0.0, ""
		for _, res := range ok {
			writes += res.Steady.Writes
			if res.Steady.Writes > 0 {
				worst += fmt.Sprintf(" N=%d: %v;", res.N, res.Steady.Requests)
			}
		}
		t = Target{Name: "steady-state writes", Target: "0 at every N", Measured: fmt.Sprintf("%g", writes), Met: writes == 0}
		if !t.Met {
			t.Note = "writes in steady state:" + worst
		}
		out = append(out, t)

		t = Target{Name: fmt.Sprintf("fleet-operator peak RSS at N=%d", largest.N), Target: "under 200 MiB at N=300",
			Measured: fmt.Sprintf("%.1f MiB", largest.PeakRSSMiB), Met: largest.PeakRSSMiB < 200}
		if !t.Met {
			t.Note = fmt.Sprintf("over by %.1f MiB", largest.PeakRSSMiB-200)
		}
		if largest.N < 300 {
			t.Note = strings.TrimPrefix(t.Note+"; N=300 was not run", "; ")
		}
		out = append(out, t)

		var per []string
		met, worstRoll := true, ok[0]
		for _, res := range ok {
			per = append(per, fmt.Sprintf("%.2f s (N=%d)", res.Roll.OverheadPerMember, res.N))
			if res.Roll.OverheadPerMember >= 1 {
				met = false
			}
			if res.Roll.OverheadPerMember > worstRoll.Roll.OverheadPerMember {
				worstRoll = res
			}
		}
		t = Target{Name: "roll overhead per member", Target: "under 1 s per member", Measured: strings.Join(per, ", "), Met: met}
		if !met {
			bd := worstRoll.Roll.Breakdown
			t.Note = fmt.Sprintf("over by %.2f s per member at N=%d; of its %.1f s overhead: %.1f s until the first delete, %.1f s deleted→recreated (graceful deletion and the StatefulSet controller), %.1f s replacement serving→next delete (the operator), %.1f s last serving→fleet Ready; load average %s",
				worstRoll.Roll.OverheadPerMember-1, worstRoll.N, worstRoll.Roll.OverheadSeconds, bd.FirstDelete, bd.Recreate, bd.NextDelete, bd.FinalReady, worstRoll.LoadAvgEnd)
		}
		out = append(out, t)
	}
	if len(r.Mesh) > 0 {
		linear, counts := len(r.MeshLinearity) > 0, []string{}
		for _, l := range r.MeshLinearity {
			if strings.Contains(l, notConstant) {
				linear = false
			}
		}
		settle, settleBy := 0.0, []string{}
		for _, m := range r.Mesh {
			if m.Error == "" {
				counts = append(counts, strconv.Itoa(m.Namespaces))
				settle += m.Settle.Writes
				if m.Settle.Writes != 0 {
					settleBy = append(settleBy, fmt.Sprintf("M=%d: %g (mesh operator: %s; API server: %s)", m.Namespaces, m.Settle.Writes, fmtReq(m.Settle.Requests), fmtReq(m.SettleWritesByResource)))
				}
			}
		}
		var perNS, fixed, growing []string
		for _, l := range r.MeshLinearity {
			key, verdict, _ := strings.Cut(l, ": ")
			switch {
			case strings.HasPrefix(verdict, notConstant):
				growing = append(growing, l)
			case strings.HasPrefix(verdict, "0 per namespace"):
				fixed = append(fixed, key)
			default:
				a, _, _ := strings.Cut(verdict, " per namespace")
				perNS = append(perNS, a+" "+key)
			}
		}
		measured := fmt.Sprintf("per namespace: %s; %d other write counts fixed", strings.Join(perNS, ", "), len(fixed))
		if len(growing) > 0 {
			measured += "; not constant: " + strings.Join(growing, "; ")
		}
		t := Target{Name: "mesh writes per namespace", Target: "constant in the number of namespaces",
			Measured: measured, Met: linear}
		switch {
		case len(r.MeshLinearity) == 0:
			t.Measured = "one namespace count (" + strings.Join(counts, ",") + ")"
			t.Note = "needs two or more namespace counts to judge"
		case !linear:
			t.Note = "some write count grows faster or slower than a whole number of writes per namespace over M = " + strings.Join(counts, ", ")
		}
		out = append(out, t)
		t = Target{Name: "mesh writes once all namespaces are STRICT", Target: "0 in the next 6 s (this benchmark's own check)",
			Measured: fmt.Sprintf("%g", settle), Met: settle == 0}
		if settle != 0 {
			t.Note = strings.Join(settleBy, "; ") + ": not a write per namespace; see docs/benchmark.md"
		}
		out = append(out, t)
	}
	return out
}
