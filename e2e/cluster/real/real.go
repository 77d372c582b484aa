// Package real is the "real" cluster provider: the local provider's control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, all on
// 127.0.0.1) plus one real node: containerd with runc, a kubelet of the control
// plane's own release, CNI bridge networking, kube-proxy (iptables) for
// Services, kube-router's firewall for NetworkPolicy and CoreDNS for cluster
// DNS. Pods run as real containers from images imported without a registry.
//
// The node lives in a network and mount namespace of its own, held by one
// `unshare` process: its links, routes, iptables rules, ipsets and the fixed
// host paths kubelet and containerd write (/var/lib, /var/log, /run are
// bind-mounted from the work dir there) never reach the host. The host sees a
// veth pair (host side 198.18.0.1/30, node side 198.18.0.2/30) through which
// the node reaches the API server (a proxy in this process listens on the
// host side and forwards to 127.0.0.1), and through which the API server
// reaches the kubelet; the host does not forward (ip_forward stays as it is),
// so nothing from the node reaches any other network. What cannot be
// namespaced is restored on Down: the kubelet's global sysctls (kernel.panic,
// kernel.panic_on_oops, vm.overcommit_memory, vm.panic_on_oom,
// kernel.keys.root_max*) and its cgroups (under one cgroup root of the
// provider's own, removed). HostState/Diff compare the host before and after.
//
// Linux only, as root, with iptables, ipset and runc installed
// (hack/node-packages.sh) and the node binaries built
// (hack/build-tools.sh --node, `make tools-realnode`).
package real

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
	"github.com/ericdev/fleetmesh/e2e/cluster/proc"
)

// Addresses and names of the node. Fixed: one real node per machine at a time
// (the cgroup root and the kubelet's port are the machine's).
const (
	NodeName = "real-node-0"
	// HostAddr is the host side of the veth (the API server proxy listens
	// here), NodeAddr the node's InternalIP. They come from 198.18.0.0/15,
	// the range reserved for network benchmark tests (RFC 2544): in the
	// host's namespace it cannot clash with a private network the machine
	// is on, and the tests send nothing to a 10/8, 172.16/12 or 192.168/16
	// address outside the node's own namespace. (Loopback and link-local
	// addresses cannot serve: an EndpointSlice refuses them.)
	HostAddr = "198.18.0.1"
	NodeAddr = "198.18.0.2"
	vethCIDR = 30
	// APIPort is the proxy's port on HostAddr; the "kubernetes" Service's
	// endpoint.
	APIPort = 6443
	// PodCIDR is the node's Pod range (CNI bridge cni0, host-local IPAM).
	PodCIDR     = "10.244.0.0/24"
	ClusterCIDR = "10.244.0.0/16"
	ServiceCIDR = "10.96.0.0/16"
	// DNSServiceIP is the kube-dns Service (CoreDNS).
	DNSServiceIP = "10.96.0.10"
	// PauseImage and CoreDNSImage are built by BuildImages and must be in
	// Options.ImageArchive.
	PauseImage   = "fleetmesh.local/pause:realnode"
	CoreDNSImage = "fleetmesh.local/coredns:realnode"
	// CgroupRoot is the kubelet's cgroup root in every v1 hierarchy.
	CgroupRoot = "fleetmesh-realnode"
)

// Options configures a real-node cluster.
type Options struct {
	// Control configures the control plane (local provider). ExternalNodes,
	// ServiceCIDR and the kubelet address flag are set by this provider.
	Control local.Options
	// WorkDir holds the node's files (containerd, kubelet, logs); empty means
	// a new temporary directory, removed by Down unless KeepWorkDir.
	WorkDir     string
	KeepWorkDir bool
	// BinDir is the repository's bin/ (node binaries under bin/node); empty
	// means cluster.BinDir().
	BinDir string
	// ImageArchives are docker-archive tars imported into the node's
	// containerd (k8s.io namespace); they must hold PauseImage and
	// CoreDNSImage (BuildImages writes one).
	ImageArchives []string
	// Runc is the OCI runtime binary; empty means /usr/sbin/runc (Debian's).
	Runc string
	// StartTimeout bounds Up; 0 means five minutes.
	StartTimeout time.Duration
	// Log receives one line per start-up step.
	Log io.Writer
}

// Provider is the real-node provider; see the package documentation.
type Provider struct {
	opts Options

	mu       sync.Mutex
	control  *local.Provider
	binDir   string
	dir      string
	ownsDir  bool
	holder   *proc.Process
	nodeProc []*proc.Process
	hostLink string
	proxy    net.Listener
	sysctls  map[string]string
	cfg      *rest.Config
	// Timings are the wall times of Up's steps, for the test's report.
	Timings []Timing
}

// Timing is one step of Up and how long it took.
type Timing struct {
	Step string
	Took time.Duration
}

var _ cluster.Provider = (*Provider)(nil)

// New returns a provider; nothing starts before Up.
func New(opts Options) *Provider {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 5 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Runc == "" {
		opts.Runc = "/usr/sbin/runc"
	}
	return &Provider{opts: opts}
}

// Name implements cluster.Provider.
func (p *Provider) Name() string { return "real" }

// nodeBinaries are what bin/node must hold (hack/build-tools.sh --node).
var nodeBinaries = []string{"node/containerd", "node/containerd-shim-runc-v2", "node/ctr", "node/kubelet",
	"node/kube-proxy", "node/kube-router", "node/coredns", "node/cni/bridge", "node/cni/host-local", "node/cni/loopback"}

// hostTools are the Debian packages' binaries (hack/node-packages.sh) and
// util-linux/iproute2, which every Debian has.
var hostTools = []string{"iptables", "ip6tables", "ipset", "unshare", "nsenter", "ip"}

// Preflight reports what is missing to run a real node on this machine.
func Preflight(binDir, runc string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node needs namespaces, mounts and cgroups)")
	}
	if err := cluster.RequireBinaries(binDir, nodeBinaries...); err != nil {
		missing = append(missing, err.Error()+" (make tools-realnode)")
	}
	for _, t := range hostTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t+" (hack/node-packages.sh)")
		}
	}
	if _, err := os.Stat(runc); err != nil {
		missing = append(missing, runc+" (hack/node-packages.sh installs Debian's runc)")
	}
	// One real node per machine: its cgroup root, address and kubelet port
	// are fixed.
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", CgroupRoot)); err == nil {
		missing = append(missing, "no other real node: /sys/fs/cgroup/memory/"+CgroupRoot+" exists (one runs, or a killed run left it: remove its cgroups)")
	}
	if clash := addressClash(); clash != "" {
		missing = append(missing, clash)
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		missing = append(missing, "cgroup v1 hierarchies under /sys/fs/cgroup (this provider drives the kubelet with cgroupfs on v1)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("real node cannot run here: %s", strings.Join(missing, "; "))
	}
	return nil
}

// vethNet is the node's veth network (HostAddr and NodeAddr).
var vethNet = &net.IPNet{IP: net.ParseIP("198.18.0.0").To4(), Mask: net.CIDRMask(vethCIDR, 32)}

// addressClash names every host address whose network overlaps the veth's
// 198.18.0.0/30 (an address in it, or a wider prefix around it): the node's
// route and the API proxy's address would clash with it. Empty when none.
func addressClash() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "the host's addresses could not be read (" + err.Error() + ")"
	}
	var clashes []string
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil {
				continue
			}
			if ipn.Contains(vethNet.IP) || vethNet.Contains(ipn.IP) {
				clashes = append(clashes, fmt.Sprintf("%s on %s", ipn, ifc.Name))
			}
		}
	}
	if len(clashes) == 0 {
		return ""
	}
	return fmt.Sprintf("no host address in the node's veth network %s (host side %s, node side %s), but the host has %s "+
		"(another test network, or the veth of a running or killed real node: remove it first)",
		vethNet, HostAddr, NodeAddr, strings.Join(clashes, ", "))
}

// Up starts the control plane, the node and the cluster add-ons. On failure
// it tears down what it started (Down) before returning.
func (p *Provider) Up(ctx context.Context) (c *cluster.Cluster, err error) {
	start := time.Now()
	binDir := p.opts.BinDir
	if binDir == "" {
		if binDir, err = cluster.BinDir(); err != nil {
			return nil, err
		}
	}
	if binDir, err = filepath.EvalSymlinks(binDir); err != nil {
		return nil, err
	}
	p.binDir = binDir
	if err := Preflight(binDir, p.opts.Runc); err != nil {
		return nil, err
	}
	if err := p.prepareDir(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, p.logTails())
			_ = p.Down(context.Background())
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()

	// The global sysctls the kubelet sets, restored by Down.
	if p.sysctls, err = readSysctls(kubeletSysctls); err != nil {
		return nil, err
	}

	step := time.Now()
	copts := p.opts.Control
	copts.ExternalNodes = true
	copts.ServiceCIDR = ServiceCIDR
	copts.BinDir = binDir
	copts.APIServerExtraArgs = append(append([]string{}, copts.APIServerExtraArgs...),
		"--kubelet-preferred-address-types=InternalIP")
	if copts.Log == nil {
		copts.Log = p.opts.Log
	}
	p.control = local.New(copts)
	cc, err := p.control.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	p.cfg = cc.REST
	p.timing("control plane", step)

	step = time.Now()
	if err := p.startNamespace(ctx); err != nil {
		return nil, fmt.Errorf("node namespace: %w", err)
	}
	if err := p.startAPIProxy(cc.REST.Host); err != nil {
		return nil, err
	}
	p.timing("node namespace, veth, API proxy", step)

	step = time.Now()
	if err := p.writeConfigs(); err != nil {
		return nil, err
	}
	if err := p.makeCgroupRoot(); err != nil {
		return nil, err
	}
	if err := p.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := p.importImages(ctx); err != nil {
		return nil, err
	}
	p.timing("containerd and image import", step)

	client, err := kubernetes.NewForConfig(cc.REST)
	if err != nil {
		return nil, err
	}
	step = time.Now()
	if err := p.startKubelet(ctx, client); err != nil {
		return nil, err
	}
	p.timing("kubelet, node Ready", step)

	step = time.Now()
	if err := p.startAddons(ctx, client); err != nil {
		return nil, err
	}
	p.timing("kube-proxy, kube-router, CoreDNS Ready", step)
	p.logf("real node %s ready (%s)", NodeName, time.Since(start).Round(10*time.Millisecond))
	p.timing("Up in all", start)
	return &cluster.Cluster{Name: "real", Kubeconfig: cc.Kubeconfig, REST: cc.REST, WorkDir: p.dir}, nil
}

func (p *Provider) timing(stepName string, since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Timings = append(p.Timings, Timing{Step: stepName, Took: time.Since(since).Round(10 * time.Millisecond)})
}

func (p *Provider) logf(format string, args ...any) {
	fmt.Fprintf(p.opts.Log, "real: "+format+"\n", args...)
}

func (p *Provider) prepareDir() error {
	if p.opts.WorkDir == "" {
		// Short: containerd's socket path must fit a sockaddr_un (108 bytes).
		dir, err := os.MkdirTemp("", "fmreal-")
		if err != nil {
			return err
		}
		p.dir, p.ownsDir = dir, !p.opts.KeepWorkDir
	} else {
		abs, err := filepath.Abs(p.opts.WorkDir)
		if err != nil {
			return err
		}
		if err := os.RemoveAll(filepath.Join(abs, "node")); err != nil {
			return err
		}
		p.dir = abs
	}
	for _, d := range []string{"node/varlib", "node/varlog", "node/run", "node/logs", "node/config", "node/cni/net.d",
		"node/cni/ipam", "node/containerd/root", "node/containerd/state", "node/kubelet", "node/pod-logs", "control"} {
		if err := os.MkdirAll(p.path(d), 0o755); err != nil {
			return err
		}
	}
	if p.opts.Control.WorkDir == "" {
		p.opts.Control.WorkDir = p.path("control")
	}
	return nil
}

func (p *Provider) path(elem ...string) string {
	return filepath.Join(append([]string{p.dir}, elem...)...)
}

// Control is the control plane's provider (for RestartAPIServer, Healthy).
func (p *Provider) Control() *local.Provider { return p.control }

// Kubeconfig returns the admin kubeconfig path (set once Up ran).
func (p *Provider) Kubeconfig() string { return filepath.Join(p.opts.Control.WorkDir, "kubeconfig") }

// Healthy reports an error if a node component or the control plane exited.
func (p *Provider) Healthy() error {
	p.mu.Lock()
	procs := append([]*proc.Process{}, p.nodeProc...)
	p.mu.Unlock()
	for _, pr := range procs {
		if pr.Exited() {
			return pr.Failure("exited unexpectedly")
		}
	}
	if p.control != nil {
		return p.control.Healthy()
	}
	return nil
}

// logTails is the end of every node component's log, for a failed Up.
func (p *Provider) logTails() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, pr := range p.nodeProc {
		fmt.Fprintf(&b, "\n--- last lines of %s:\n%s", pr.LogPath, proc.Tail(pr.LogPath, 15))
	}
	return b.String()
}

// Down stops the node (its processes, every container, the namespaces), the
// control plane, restores the kubelet's sysctls and removes the cgroup root
// and a temporary work dir. Safe to call more than once and after a failed Up;
// it returns every problem it met, and goes on after each.
func (p *Provider) Down(ctx context.Context) error {
	var errs []error
	p.mu.Lock()
	procs, holder, proxy := p.nodeProc, p.holder, p.proxy
	p.nodeProc, p.holder, p.proxy = nil, nil, nil
	p.mu.Unlock()

	// Node agents first (newest first: kube-router, kube-proxy, kubelet),
	// so nothing restarts containers while they are being killed.
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i].Name != "containerd" {
			procs[i].Stop(5 * time.Second)
		}
	}
	// Every container: all processes in the kubelet's cgroups.
	if err := killCgroupTree(CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	for _, pr := range procs {
		if pr.Name == "containerd" {
			pr.Stop(5 * time.Second)
		}
	}
	// Whatever else lives in the node's mount namespace (the runc shims
	// reparent away from containerd), then the holder itself.
	if holder != nil {
		if err := killNamespace(holder); err != nil {
			errs = append(errs, err)
		}
		holder.Stop(time.Second)
	}
	if proxy != nil {
		_ = proxy.Close()
	}
	if p.hostLink != "" {
		if err := waitLinkGone(p.hostLink, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
		p.hostLink = ""
	}
	if err := removeCgroupTree(CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	if p.sysctls != nil {
		if err := writeSysctls(p.sysctls); err != nil {
			errs = append(errs, err)
		}
	}
	if p.control != nil {
		if err := p.control.Down(ctx); err != nil {
			errs = append(errs, err)
		}
		p.control = nil
	}
	if p.ownsDir && p.dir != "" {
		if err := os.RemoveAll(p.dir); err != nil {
			errs = append(errs, err)
		}
		p.dir = ""
	}
	return errors.Join(errs...)
}

// apiHostPort is the control plane's host:port from its URL.
func apiHostPort(host string) (string, error) {
	u, err := url.Parse(host)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
