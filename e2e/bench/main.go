// Command bench measures the fleet operator on the local control plane (kwok
// nodes, the celld stand-in on every member Pod IP, both operators as
// processes under their charts' RBAC) and writes one result per run to
// bench/results/<UTC timestamp>.{json,md}. See docs/benchmark.md.
//
//	cd e2e && go run ./bench                 # N = 30 and 100
//	cd e2e && go run ./bench -n 30,100,300   # add the long N=300 run
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
)

const (
	membersPerFleet = 3
	rollMembers     = 5
	stateInterval   = 10 * time.Second // the bed's --state-interval
	imageV1         = "registry.example/celld:1.0.0"
	imageV2         = "registry.example/celld:1.1.0"
)

var (
	flagN       = flag.String("n", envOr("BENCH_N", "30,100"), "comma-separated fleet counts (N=300 takes long on 2 cores)")
	flagOut     = flag.String("out", "", "results directory (default <repo>/bench/results)")
	flagMetrics = flag.String("metrics-addr", envOr("BENCH_METRICS_ADDR", "127.0.0.1:18480"), "fixed loopback address for the fleet operator's metrics")
	flagSkip    = flag.Int("skip-nodes", 10, "cordon the first kwok nodes (Pod ranges 127.1–127.<n>) so Pod IPs stay clear of other test beds on this machine")
	flagKeep    = flag.Bool("keep", os.Getenv("BENCH_KEEP") != "", "keep each bed's files (operator logs) after a successful N")
	flagTimeout = flag.Duration("timeout", 15*time.Minute, "per-phase wait limit")
)

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

// Run is one `make bench`.
type Run struct {
	Started   string   `json:"started"`
	Finished  string   `json:"finished"`
	Commit    string   `json:"commit"`
	Host      Host     `json:"host"`
	Method    string   `json:"method"`
	Results   []Result `json:"results"`
	Anomalies []string `json:"anomalies,omitempty"`
}

type Host struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	OS        string `json:"os"`
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

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
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
	var ns []int
	for _, s := range strings.Split(*flagN, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 {
			return fmt.Errorf("bad N %q (need integers >= 10)", s)
		}
		ns = append(ns, n)
	}
	started := time.Now().UTC()
	r := Run{
		Started: started.Format(time.RFC3339),
		Commit:  gitCommit(root),
		Host:    Host{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH},
		Method:  "docs/benchmark.md",
	}
	for _, n := range ns {
		res, anomalies, err := benchN(root, n)
		if err != nil {
			res.Error = err.Error()
			logf("N=%d failed: %v", n, err)
		}
		r.Results = append(r.Results, res)
		r.Anomalies = append(r.Anomalies, anomalies...)
		if err := write(out, started, &r); err != nil { // keep partial results
			return err
		}
	}
	r.Finished = time.Now().UTC().Format(time.RFC3339)
	if err := write(out, started, &r); err != nil {
		return err
	}
	fmt.Print(markdown(&r))
	for _, res := range r.Results {
		if res.Error != "" {
			return fmt.Errorf("run with N=%d failed: %s", res.N, res.Error)
		}
	}
	return nil
}

func gitCommit(root string) string {
	b, err := os.ReadFile(filepath.Join(root, ".git", "HEAD"))
	if err != nil {
		return ""
	}
	h := strings.TrimSpace(string(b))
	if ref, ok := strings.CutPrefix(h, "ref: "); ok {
		if c, err := os.ReadFile(filepath.Join(root, ".git", ref)); err == nil {
			return strings.TrimSpace(string(c))
		}
	}
	return h
}

// bench is the state of one N.
type bench struct {
	bed  *harness.Bed
	k8s  client.Client
	dyn  dynamic.Interface
	http *http.Client
	n    int
	res  *Result
	anom []string
}

func benchN(root string, n int) (res Result, anomalies []string, err error) {
	res = Result{N: n, Namespaces: n / 10, Pods: n * membersPerFleet}
	// Room for the fleets, the floor copies and the roll fleet.
	res.Nodes = (2*n*membersPerFleet+rollMembers)/200 + 2
	res.CordonedNodes = *flagSkip
	work, err := os.MkdirTemp("", "bench-bed-")
	if err != nil {
		return res, nil, err
	}
	ctx := context.Background()
	logf("N=%d: starting the bed (%d kwok nodes)", n, res.Nodes)
	res.LoadAvgStart = loadAvg()
	bed, err := harness.StartBed(ctx, harness.BedOptions{
		Root: root, WorkDir: work, Nodes: res.Nodes + res.CordonedNodes, Operators: true, NetworkPolicyEnforced: true,
		Cluster: local.Options{MaxPodsPerNode: 200},
		// Leader election off: its lease renewals (a PUT every few seconds)
		// would hide the reconcilers' own writes in rest_client_requests_total.
		FleetExtraArgs: []string{"--metrics-bind-address", *flagMetrics, "--leader-elect=false"},
	})
	if err != nil {
		return res, nil, err
	}
	setActive(bed)
	defer func() {
		res.LoadAvgEnd = loadAvg()
		setActive(nil)
		bed.Stop()
		if err == nil && !*flagKeep {
			_ = os.RemoveAll(work)
		} else {
			logf("bed files kept in %s", work)
		}
	}()
	scheme := pkgruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = fleetv1.AddToScheme(scheme)
	cfg := rest.CopyConfig(bed.Cluster.REST)
	cfg.QPS = -1 // like the operator (controller-runtime's default): no client-side limit
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return res, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return res, nil, err
	}
	b := &bench{bed: bed, k8s: k8s, dyn: dyn, n: n, res: &res,
		http: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}}
	if err = b.cordon(ctx); err != nil {
		return res, nil, err
	}
	res.OtherAPIServers = otherAPIServers(bed)
	if res.OtherAPIServers > 0 {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: %d other kube-apiserver process(es) on this host during the run: CPU shared, times inflated", n, res.OtherAPIServers))
	}
	err = b.all(ctx)
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
func (b *bench) cordon(ctx context.Context) error {
	for i := 0; i < b.res.CordonedNodes; i++ {
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
	if err := b.waitMetrics(); err != nil {
		return err
	}
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
		time.Sleep(3*stateInterval + 5*time.Second)
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
	logf("N=%d: 5-member roll %.1fs, members %.1fs, overhead %.1fs", b.n, b.res.Roll.RollSeconds, b.res.Roll.SumMemberSeconds, b.res.Roll.OverheadSeconds)

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

// phase runs fn and records the operator's requests and CPU over it.
func (b *bench) phase(p *Phase, fn func() error) error {
	pid := b.bed.Fleet.Pid()
	before, err := b.scrape()
	if err != nil {
		return err
	}
	cpu0, _ := cpuSeconds(pid)
	errs0 := reconcileErrors(b.bed.Fleet.LogPath)
	start := time.Now()
	if err := fn(); err != nil {
		return err
	}
	// Let in-flight status writes land before the second scrape.
	time.Sleep(time.Second)
	p.Seconds = round(time.Since(start).Seconds(), 2)
	after, err := b.scrape()
	if err != nil {
		return err
	}
	cpu1, _ := cpuSeconds(pid)
	p.CPUSeconds = round(cpu1-cpu0, 2)
	p.ReconcileErrors = reconcileErrors(b.bed.Fleet.LogPath) - errs0
	p.Requests = Requests{}
	for m, v := range after {
		if d := v - before[m]; d != 0 {
			p.Requests[m] = d
			switch m {
			case "POST", "PUT", "PATCH", "DELETE":
				p.Writes += d
			}
		}
	}
	return nil
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

func (b *bench) waitMetrics() error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := b.scrape()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleet operator metrics on %s: %w", *flagMetrics, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// scrape sums rest_client_requests_total by method.
func (b *bench) scrape() (Requests, error) {
	resp, err := b.http.Get("http://" + *flagMetrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseRequests(resp.Body)
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
// healthy /state on the new version.
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
	old := map[types.UID]bool{}
	list := &corev1.PodList{}
	if err := b.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, p := range list.Items {
		old[p.UID] = true
	}
	type member struct {
		created time.Time
		ready   time.Time
	}
	members := map[types.UID]*member{}
	names := map[types.UID]string{}
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
		for i := range list.Items {
			p := &list.Items[i]
			if old[p.UID] {
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
	r := Roll{Members: rollMembers, RollSeconds: round(time.Since(start).Seconds(), 2), MemberSeconds: map[string]float64{}}
	for uid, m := range members {
		if m.ready.IsZero() {
			return fmt.Errorf("member %s never seen serving", names[uid])
		}
		// Both ends are seen by the same 100 ms poll, so their errors
		// roughly cancel.
		d := m.ready.Sub(m.created).Seconds()
		r.MemberSeconds[names[uid]] = round(d, 2)
		r.SumMemberSeconds += d
	}
	if len(members) != rollMembers {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: roll replaced %d Pods, expected %d", b.n, len(members), rollMembers))
	}
	r.SumMemberSeconds = round(r.SumMemberSeconds, 2)
	r.OverheadSeconds = round(r.RollSeconds-r.SumMemberSeconds, 2)
	b.res.Roll = r
	return nil
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
	s.WriteString("| N | pods | converge s | floor s | ratio | create: requests (writes) | steady: requests (writes) | roll 1 fleet: requests (writes) | reconcile errors (create/steady/roll) | peak RSS MiB | CPU s | 5-member roll s | members s | overhead s |\n")
	s.WriteString("| ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range r.Results {
		if x.Error != "" {
			fmt.Fprintf(&s, "| %d | %d | failed: %s |\n", x.N, x.Pods, x.Error)
			continue
		}
		fmt.Fprintf(&s, "| %d | %d | %.1f | %.1f | %.2f | %s (%g) | %s (%g) | %s (%g) | %d/%d/%d | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
			x.N, x.Pods, x.ConvergenceSeconds, x.FloorSeconds, x.Ratio,
			fmtReq(x.Create.Requests), x.Create.Writes, fmtReq(x.Steady.Requests), x.Steady.Writes,
			fmtReq(x.TemplateRoll.Requests), x.TemplateRoll.Writes,
			x.Create.ReconcileErrors, x.Steady.ReconcileErrors, x.TemplateRoll.ReconcileErrors,
			x.PeakRSSMiB, x.CPUSecondsTotal, x.Roll.RollSeconds, x.Roll.SumMemberSeconds, x.Roll.OverheadSeconds)
	}
	if len(r.Anomalies) > 0 {
		s.WriteString("\nAnomalies:\n\n")
		for _, a := range r.Anomalies {
			fmt.Fprintf(&s, "- %s\n", a)
		}
	}
	return s.String()
}
