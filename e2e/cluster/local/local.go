// Package local is the "local" cluster provider: a real control plane (etcd,
// kube-apiserver and, in the full tier, kube-controller-manager,
// kube-scheduler and the kwok controller as fake kubelet) started as child
// processes from the binaries `make tools` builds into bin/. It needs no
// container runtime and starts in seconds.
//
// Two tiers:
//   - Nodes == 0, "integration": etcd + kube-apiserver only. CRD schemas, CEL
//     rules, server-side apply, RBAC and TokenRequest are real.
//   - Nodes > 0, "full": controllers, scheduler and Nodes fake nodes. Pods run
//     (as far as the API can tell) with IPs from each node's loopback
//     spec.podCIDR (127.<node+1>.0.0/16), and claims of the default
//     StorageClass are bound to hostPath volumes under the work dir.
//
// Every address the cluster hands out or listens on is in 127.0.0.0/8;
// Service ClusterIPs come from ServiceCIDR but nothing ever connects to them.
package local

import (
	"context"
	_ "embed" // kwok-stages.yaml
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/proc"
)

//go:embed kwok-stages.yaml
var kwokStages []byte

// Options configures a local cluster. The zero value is an API-server-only
// cluster in a temporary directory with the Gateway API and Istio CRDs.
type Options struct {
	// WorkDir holds etcd data, certificates, logs, volumes and the
	// kubeconfig. Empty means a new temporary directory, removed by Down. A
	// given directory is kept; the provider's own files from an earlier run
	// in it are replaced.
	WorkDir string
	// BinDir holds the binaries; empty means cluster.BinDir() (repo bin/).
	BinDir string
	// Nodes is the number of kwok nodes; 0 selects the API-server-only tier.
	Nodes int
	// ExternalNodes starts the full tier's controllers, scheduler,
	// StorageClass and volume provisioner with no kwok and no Nodes: the
	// caller brings its own nodes (the real-node provider, e2e/cluster/real,
	// runs a kubelet). Requires Nodes == 0.
	ExternalNodes bool
	// MaxPodsPerNode is each node's Pod capacity; 0 means DefaultMaxPods.
	MaxPodsPerNode int
	// NoDefaultCRDs skips the Gateway API (standard channel) and Istio CRDs.
	NoDefaultCRDs bool
	// CRDPaths are further manifest files or directories (CRDs first, then
	// other objects) to install; each must exist.
	CRDPaths []string
	// OptionalCRDPaths are installed when they exist and skipped otherwise,
	// for directories that are generated later in a build (operator CRDs).
	OptionalCRDPaths []string
	// ServiceCIDR is the Service ClusterIP range; empty means
	// DefaultServiceCIDR. It is large because a /24 fills after ~250 Services.
	ServiceCIDR string
	// APIServerExtraArgs are appended to kube-apiserver's arguments (the
	// benchmark turns on an audit log of the operators' requests this way).
	APIServerExtraArgs []string
	// StartTimeout bounds Up; 0 means two minutes.
	StartTimeout time.Duration
	// Log receives one line per start-up step; nil discards them.
	Log io.Writer
	// PodIPs, when set, is called for every Pod IP assigned and released in
	// the cluster from Up until Down: the hook for starting a loopback
	// stand-in of a Pod's runtime on its IP.
	PodIPs *cluster.PodIPHandler
}

// DefaultServiceCIDR is only ever allocated from, never connected to.
const DefaultServiceCIDR = "10.96.0.0/12"

// stopGrace is how long components get to exit after SIGTERM before SIGKILL;
// the cluster's state is thrown away, so there is nothing worth waiting for.
const stopGrace = 3 * time.Second

// Provider is the local cluster provider; see the package documentation.
type Provider struct {
	opts Options

	mu      sync.Mutex
	procs   []*proc.Process
	layout  layout
	ownsDir bool
	binDir  string
	// ranges are the node address slots this bed holds until Down.
	ranges *rangeLease
	// Helpers that run in this process until Down (provisioner, Pod IP
	// hook) share bgCtx; stopBG cancels it and waitBG waits for them.
	bgCtx  context.Context
	stopBG context.CancelFunc
	waitBG []func()
	// apiArgs and apiCfg are how kube-apiserver was started and is
	// reached (RestartAPIServer starts it again the same way).
	apiArgs []string
	apiCfg  *rest.Config
	// certs are the cluster's credentials (IssueClientCert signs with its CA).
	certs *pki
}

var _ cluster.Provider = (*Provider)(nil)

// New returns a provider; nothing starts before Up.
func New(opts Options) *Provider {
	if opts.MaxPodsPerNode == 0 {
		opts.MaxPodsPerNode = DefaultMaxPods
	}
	if opts.ServiceCIDR == "" {
		opts.ServiceCIDR = DefaultServiceCIDR
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	return &Provider{opts: opts}
}

// Name implements cluster.Provider.
func (p *Provider) Name() string { return "local" }

// Up starts the cluster. On any failure, including ctx being cancelled, it
// stops whatever it had started before returning the error, which carries the
// tail of the failing component's log.
func (p *Provider) Up(ctx context.Context) (c *cluster.Cluster, err error) {
	started := time.Now()
	if err := p.validate(); err != nil {
		return nil, err
	}
	if err := p.prepareWorkDir(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = p.Down(context.Background())
		}
	}()
	if p.ranges, err = leaseRanges(p.opts.Nodes); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()

	certs, err := newPKI(p.layout.pkiDir(), firstServiceIP(p.opts.ServiceCIDR))
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	etcdPort, err := p.startEtcd(ctx)
	if err != nil {
		return nil, err
	}
	p.logf("etcd ready on 127.0.0.1:%d (%s)", etcdPort, since(started))
	cfg, err := p.startAPIServer(ctx, certs, etcdPort)
	if err != nil {
		return nil, err
	}
	p.logf("kube-apiserver ready at %s (%s)", cfg.Host, since(started))

	// CRD installation only needs the API server, so it overlaps with the
	// node tier's start; the first failure cancels the other.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.installCRDs(gctx, cfg) })
	if p.opts.Nodes > 0 || p.opts.ExternalNodes {
		g.Go(func() error { return p.startNodeTier(gctx, certs, cfg) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := p.startPodIPHook(ctx, cfg); err != nil {
		return nil, err
	}
	if err := p.checkAllRunning(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.certs = certs
	p.mu.Unlock()
	p.logf("cluster ready with %d node(s) (%s)", p.opts.Nodes, since(started))
	return &cluster.Cluster{Name: "local", Kubeconfig: p.layout.kubeconfig(), REST: cfg, WorkDir: p.layout.root}, nil
}

// Down stops every component (SIGTERM to each process group, SIGKILL after a
// short grace) and the in-process helpers, and removes a temporary work dir.
// It is idempotent and also cleans up after a failed Up.
func (p *Provider) Down(context.Context) error {
	p.mu.Lock()
	procs, stopBG, waitBG := p.procs, p.stopBG, p.waitBG
	p.procs, p.stopBG, p.waitBG, p.bgCtx = nil, nil, nil, nil
	p.mu.Unlock()

	// Helpers first, so none of them logs errors about a vanished server.
	if stopBG != nil {
		stopBG()
	}
	for _, wait := range waitBG {
		wait()
	}
	stopInOrder(procs)
	p.ranges.release()

	if p.layout.root == "" {
		return nil
	}
	if p.ownsDir {
		return os.RemoveAll(p.layout.root)
	}
	err := os.Remove(p.layout.path(ProcessesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// stopInOrder stops clients of the API server first, then the API server,
// then etcd: a server whose clients are gone exits at once, while etcd with
// an API server still attached waits out the whole grace period.
func stopInOrder(procs []*proc.Process) {
	phase := func(p *proc.Process) int {
		switch p.Name {
		case "etcd":
			return 2
		case "kube-apiserver":
			return 1
		}
		return 0
	}
	for current := range 3 {
		var wg sync.WaitGroup
		for _, c := range procs {
			if phase(c) == current {
				wg.Go(func() { c.Stop(stopGrace) })
			}
		}
		wg.Wait()
	}
}

// Processes describes the running components (for tests and `testbed down`).
func (p *Provider) Processes() []ProcessRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	recs := make([]ProcessRecord, 0, len(p.procs))
	for _, c := range p.procs {
		recs = append(recs, ProcessRecord{Name: c.Name, PGID: c.PID(), Binary: c.Binary})
	}
	return recs
}

// WorkDir is the directory holding the cluster's files (set once Up ran).
func (p *Provider) WorkDir() string { return p.layout.root }

// AssetsDir returns a directory usable as KUBEBUILDER_ASSETS for
// controller-runtime's envtest, which wants kube-apiserver, etcd and kubectl
// side by side: the repository's bin/.
func AssetsDir() (string, error) {
	dir, err := cluster.BinDir()
	if err != nil {
		return "", err
	}
	return dir, cluster.RequireBinaries(dir, "kube-apiserver", "etcd", "kubectl")
}

func (p *Provider) validate() error {
	if p.opts.Nodes < 0 || p.opts.Nodes > MaxNodes {
		return fmt.Errorf("nodes must be between 0 and %d, got %d", MaxNodes, p.opts.Nodes)
	}
	if p.opts.MaxPodsPerNode < 1 || p.opts.MaxPodsPerNode > 10000 {
		return fmt.Errorf("max pods per node must be between 1 and 10000, got %d", p.opts.MaxPodsPerNode)
	}
	if _, _, err := net.ParseCIDR(p.opts.ServiceCIDR); err != nil {
		return fmt.Errorf("service CIDR: %w", err)
	}
	binDir := p.opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = cluster.BinDir(); err != nil {
			return err
		}
	}
	if p.opts.ExternalNodes && p.opts.Nodes > 0 {
		return fmt.Errorf("ExternalNodes and %d kwok nodes: choose one", p.opts.Nodes)
	}
	names := []string{"etcd", "kube-apiserver"}
	if p.opts.ExternalNodes {
		names = append(names, "kube-controller-manager", "kube-scheduler")
	}
	if p.opts.Nodes > 0 {
		names = append(names, "kube-controller-manager", "kube-scheduler", "kwok")
	}
	if err := cluster.RequireBinaries(binDir, names...); err != nil {
		return err
	}
	// The recorded binary must match /proc/<pid>/exe, which is resolved.
	resolved, err := filepath.EvalSymlinks(binDir)
	if err != nil {
		return err
	}
	p.binDir = resolved
	return nil
}

func (p *Provider) prepareWorkDir() error {
	dir := p.opts.WorkDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "fleetmesh-local-")
		if err != nil {
			return err
		}
		p.layout, p.ownsDir = layout{root: tmp}, true
		return p.layout.mkdirs()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	p.layout = layout{root: abs}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	if err := refuseLiveCluster(abs); err != nil {
		return err
	}
	for _, path := range p.layout.owned() {
		if err := os.RemoveAll(path); err != nil {
			return err
		}
	}
	return p.layout.mkdirs()
}

// refuseLiveCluster stops a second Up in a work dir whose cluster still runs:
// it would delete the running etcd's data under it.
func refuseLiveCluster(dir string) error {
	recs, err := ReadProcessRecords(dir)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Alive() {
			return fmt.Errorf("%s still runs a cluster (%s, pid %d); stop it first (testbed down --dir %s)", dir, r.Name, r.PGID, dir)
		}
	}
	return nil
}

// start launches a component and records it, so Down and `testbed down`
// can find it even if Up fails right after.
func (p *Provider) start(name string, args, env []string) (*proc.Process, error) {
	c, err := proc.Start(name, p.layout.logFile(name), env, append([]string{filepath.Join(p.binDir, name)}, args...)...)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.procs = append(p.procs, c)
	p.mu.Unlock()
	return c, appendRecord(p.layout.root, c)
}

// forget drops a component that already exited, before a retry.
func (p *Provider) forget(c *proc.Process) {
	c.Stop(0)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.procs {
		if q == c {
			p.procs = append(p.procs[:i], p.procs[i+1:]...)
			return
		}
	}
}

// waitUntil polls cond until it holds, failing fast with the component's
// log tail if any started component exits meanwhile.
func (p *Provider) waitUntil(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	err := proc.Poll(ctx, what, p.checkAllRunning, cond)
	if timeout := (*proc.TimeoutError)(nil); errors.As(err, &timeout) {
		return p.timeout(what, timeout.Err)
	}
	return err
}

func (p *Provider) checkAllRunning() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.procs {
		if c.Exited() {
			return c.Failure("exited unexpectedly")
		}
	}
	return nil
}

// timeout reports a wait that ran out, with the last log lines of every
// component since any of them may be the one stuck. A cancelled wait (a
// signal) is reported as such, without logs.
func (p *Provider) timeout(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted while waiting for %s: %w", what, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	msg := fmt.Sprintf("timed out waiting for %s: %v", what, err)
	for _, c := range p.procs {
		msg += fmt.Sprintf("\n--- last lines of %s:\n%s", c.LogPath, proc.Tail(c.LogPath, 10))
	}
	return errors.New(msg)
}

// startEtcd starts etcd and waits for /health, retrying with fresh ports if
// another process took one between choosing and binding it.
func (p *Provider) startEtcd(ctx context.Context) (int, error) {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return 0, err
		}
		c, err := p.start("etcd", etcdArgs(p.layout, ports[0], ports[1]), nil)
		if err != nil {
			return 0, err
		}
		err = p.waitUntil(ctx, "etcd", func(ctx context.Context) (bool, error) {
			return etcdHealthy(ctx, ports[0]), nil
		})
		if err == nil {
			return ports[0], nil
		}
		if attempt >= 3 || !c.Exited() || !portConflict(proc.Tail(c.LogPath, 40)) {
			return 0, err
		}
		p.forget(c)
		if err := os.RemoveAll(p.layout.etcdData()); err != nil {
			return 0, err
		}
	}
}

func etcdHealthy(ctx context.Context, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url(port)+"/health", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startAPIServer starts kube-apiserver, writes the admin kubeconfig and
// waits for /readyz, retrying with a fresh port on a bind race.
func (p *Provider) startAPIServer(ctx context.Context, certs *pki, etcdPort int) (*rest.Config, error) {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		args := append(apiServerArgs(p.layout, certs, etcdPort, ports[0], p.opts.ServiceCIDR), p.opts.APIServerExtraArgs...)
		c, err := p.start("kube-apiserver", args, nil)
		if err != nil {
			return nil, err
		}
		cfg := restConfig("https://127.0.0.1:"+strconv.Itoa(ports[0]), certs)
		p.mu.Lock()
		p.apiArgs, p.apiCfg = args, cfg
		p.mu.Unlock()
		if err := writeKubeconfig(p.layout.kubeconfig(), cfg.Host, certs); err != nil {
			return nil, err
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		err = p.waitUntil(ctx, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
			return apiReady(ctx, client), nil
		})
		if err == nil {
			return cfg, nil
		}
		if attempt >= 3 || !c.Exited() || !portConflict(proc.Tail(c.LogPath, 40)) {
			return nil, err
		}
		p.forget(c)
	}
}

// RestartAPIServer stops kube-apiserver (SIGTERM, as a rolling restart or
// an upgrade of the control plane does) and starts it again on the same
// port with the same etcd and arguments, so every client's address and
// credentials stay valid; it returns once /readyz answers ok. Clients see
// their connections end and requests fail while it is down; etcd keeps the
// state. It retries the start while the port is not free yet.
func (p *Provider) RestartAPIServer(ctx context.Context) error {
	p.mu.Lock()
	var old *proc.Process
	for i, c := range p.procs {
		if c.Name == "kube-apiserver" {
			old = c
			p.procs = append(p.procs[:i], p.procs[i+1:]...)
			break
		}
	}
	args, cfg := p.apiArgs, p.apiCfg
	p.mu.Unlock()
	if old == nil || cfg == nil {
		return errors.New("no kube-apiserver to restart")
	}
	old.Stop(stopGrace)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		c, err := p.start("kube-apiserver", args, nil)
		if err != nil {
			return err
		}
		err = p.waitUntil(ctx, "kube-apiserver /readyz after a restart", func(ctx context.Context) (bool, error) {
			return apiReady(ctx, client), nil
		})
		if err == nil {
			return nil
		}
		if attempt >= 5 || !c.Exited() || !portConflict(proc.Tail(c.LogPath, 40)) {
			return err
		}
		p.forget(c)
		time.Sleep(time.Second)
	}
}

func apiReady(ctx context.Context, client kubernetes.Interface) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok"
}

// startNodeTier starts the controllers, scheduler and kwok, creates the fake
// nodes and the storage supply, and waits until Pods can be scheduled.
func (p *Provider) startNodeTier(ctx context.Context, certs *pki, cfg *rest.Config) error {
	started := time.Now()
	schedConfig := p.layout.path("config", "kube-scheduler.yaml")
	if err := os.WriteFile(schedConfig, []byte(schedulerConfig(p.layout)), 0o644); err != nil {
		return err
	}
	stages := p.layout.path("config", "kwok-stages.yaml")
	if err := os.WriteFile(stages, kwokStages, 0o644); err != nil {
		return err
	}
	if _, err := p.start("kube-controller-manager", kcmArgs(p.layout, certs), nil); err != nil {
		return err
	}
	if _, err := p.start("kube-scheduler", schedulerArgs(schedConfig), nil); err != nil {
		return err
	}
	if !p.opts.ExternalNodes {
		if _, err := p.start("kwok", kwokArgs(p.layout, stages), kwokEnv(p.layout)); err != nil {
			return err
		}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := createStorageClass(ctx, client); err != nil {
		return err
	}
	if err := p.startProvisioner(ctx, client); err != nil {
		return err
	}
	if !p.opts.ExternalNodes {
		if err := createNodes(ctx, client, p.opts.Nodes, p.opts.MaxPodsPerNode, p.ranges); err != nil {
			return err
		}
		err = p.waitUntil(ctx, fmt.Sprintf("%d kwok node(s) Ready and untainted", p.opts.Nodes), func(ctx context.Context) (bool, error) {
			return nodesSchedulable(ctx, client, p.opts.Nodes)
		})
		if err != nil {
			return err
		}
	}
	err = p.waitUntil(ctx, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
		return defaultServiceAccountExists(ctx, client)
	})
	if err != nil {
		return err
	}
	p.logf("controllers, scheduler, kwok and %d node(s) ready (%s)", p.opts.Nodes, since(started))
	return nil
}

// background returns the context of helpers that live until Down, and
// registers wait to be called once it is cancelled.
func (p *Provider) background(wait func()) context.Context {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopBG == nil {
		p.bgCtx, p.stopBG = context.WithCancel(context.Background())
	}
	if wait != nil {
		p.waitBG = append(p.waitBG, wait)
	}
	return p.bgCtx
}

func (p *Provider) startProvisioner(ctx context.Context, client kubernetes.Interface) error {
	prov, err := newProvisioner(client, p.layout.volumesDir())
	if err != nil {
		return err
	}
	return prov.run(p.background(prov.wait), ctx)
}

// startPodIPHook runs Options.PodIPs for all namespaces until Down.
func (p *Provider) startPodIPHook(ctx context.Context, cfg *rest.Config) error {
	if p.opts.PodIPs == nil {
		return nil
	}
	bg := p.background(nil)
	synced := make(chan error, 1)
	go func() { synced <- cluster.WatchPodIPs(bg, cfg, "", nil, *p.opts.PodIPs) }()
	select {
	case err := <-synced:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// installCRDs installs the default third-party CRDs and the configured ones.
func (p *Provider) installCRDs(ctx context.Context, cfg *rest.Config) error {
	started := time.Now()
	var paths []string
	if !p.opts.NoDefaultCRDs {
		defaults, err := cluster.DefaultCRDPaths(ctx)
		if err != nil {
			return fmt.Errorf("locate default CRDs: %w", err)
		}
		paths = append(paths, defaults...)
	}
	for _, path := range p.opts.CRDPaths {
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("CRD path: %w", err)
		}
		paths = append(paths, path)
	}
	for _, path := range p.opts.OptionalCRDPaths {
		if _, err := os.Stat(path); err != nil {
			p.logf("skipping optional CRD path %s: %v", path, err)
			continue
		}
		paths = append(paths, path)
	}
	if len(paths) == 0 {
		return nil
	}
	if err := cluster.InstallManifests(ctx, cfg, paths...); err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	p.logf("CRDs established from %d path(s) (%s)", len(paths), since(started))
	return nil
}

func (p *Provider) logf(format string, args ...any) {
	fmt.Fprintf(p.opts.Log, "local: "+format+"\n", args...)
}

func since(t time.Time) string { return time.Since(t).Round(10 * time.Millisecond).String() }

// firstServiceIP is the ClusterIP of the "kubernetes" Service, which the
// serving certificate names too.
func firstServiceIP(cidr string) net.IP {
	_, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil
	}
	ip := ipnet.IP.To4()
	if ip == nil {
		return nil
	}
	next := make(net.IP, len(ip))
	copy(next, ip)
	next[3]++
	return next
}

// Healthy reports an error if a component exited since Up.
func (p *Provider) Healthy() error { return p.checkAllRunning() }
