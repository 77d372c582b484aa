package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
	"github.com/ericdev/fleetmesh/e2e/cnifake"
	"github.com/ericdev/fleetmesh/e2e/sailfake"
	"github.com/ericdev/fleetmesh/e2e/standin"
)

// Namespaces the operators are installed into.
const (
	FleetNamespace = "fleet-system"
	MeshNamespace  = "mesh-system"
)

// BedOptions configures a local test bed.
type BedOptions struct {
	// Root is the repository root; WorkDir holds everything the bed writes.
	Root, WorkDir string
	// Source is the source tree the operators are built from, with their
	// CRDs and their charts' RBAC (default Root). The upgrade spec points it
	// at an earlier release's tree, then calls Upgrade.
	Source string
	// Nodes is the number of kwok nodes (at least 1: the bed runs Pods).
	Nodes int
	// Operators starts both operators under their charts' RBAC.
	Operators bool
	// NetworkPolicyEnforced is the fleet operator's gate (the chart value).
	NetworkPolicyEnforced bool
	// FleetExtraArgs are appended to the fleet operator's arguments; a later
	// flag wins, so they override the bed's defaults (the benchmark sets a
	// fixed --metrics-bind-address this way).
	FleetExtraArgs []string
	// MeshExtraArgs are appended to the mesh operator's arguments, likewise.
	MeshExtraArgs []string
	// FaultProxies puts a FaultProxy between each operator and the API
	// server (Bed.Proxies): the operators' kubeconfigs point at it.
	FaultProxies bool
	// SimulateMesh plays the two mesh components the bed cannot run (it has
	// no container runtime): the Sail Operator's controller (sailfake, with
	// the project's minimal Sail CRDs) and istio-cni (cnifake, every
	// namespace). `make demo` uses it so the ServiceMesh can become Ready;
	// specs that need them start their own instead.
	SimulateMesh bool
	// StandinStartupDelay is how long a fresh member reports Starting.
	StandinStartupDelay time.Duration
	Log                 io.Writer
	// Cluster are further local provider options; WorkDir defaults to
	// WorkDir/cluster, and the operators' CRDs are always added.
	Cluster local.Options
}

// Bed is a running local control plane with kwok nodes, the celld stand-in
// on every member Pod IP, and optionally both operators.
type Bed struct {
	Opts     BedOptions
	Provider *local.Provider
	Cluster  *cluster.Cluster
	Fleet    *Process
	Mesh     *Process
	// Standins serve the member Pods' ports (see package standin).
	Standins *standin.Pool
	// Proxies are the operators' fault proxies by operator name
	// (fleet-operator, mesh-operator) when BedOptions.FaultProxies is set.
	Proxies map[string]*FaultProxy

	stopStandin context.CancelFunc
	standinDone chan struct{}
	// stopSimulated ends SimulateMesh's players and waits for them.
	stopSimulated func()
	// licensePub is the public key the bed's mesh operator trusts.
	licensePub string
}

// StartBed brings the bed up; on error everything started is torn down.
func StartBed(ctx context.Context, o BedOptions) (_ *Bed, err error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.StandinStartupDelay == 0 {
		o.StandinStartupDelay = time.Second
	}
	if o.Source == "" {
		o.Source = o.Root
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return nil, err
	}
	b := &Bed{Opts: o}
	defer func() {
		if err != nil {
			b.Stop()
		}
	}()
	copts := o.Cluster
	if copts.WorkDir == "" {
		copts.WorkDir = filepath.Join(o.WorkDir, "cluster")
	}
	copts.Nodes, copts.Log = o.Nodes, o.Log
	copts.CRDPaths = append(copts.CRDPaths,
		operatorCRDs(o.Source)...)
	b.Provider = local.New(copts)
	start := time.Now()
	if b.Cluster, err = b.Provider.Up(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "bed: control plane up in %s\n", time.Since(start).Round(time.Millisecond))

	sctx, cancel := context.WithCancel(context.Background())
	b.stopStandin, b.standinDone = cancel, make(chan struct{})
	pool := &standin.Pool{StartupDelay: o.StandinStartupDelay}
	b.Standins = pool
	go func() {
		defer close(b.standinDone)
		_ = standin.Run(sctx, b.Cluster.REST, pool, func(err error) { fmt.Fprintf(o.Log, "standin: %v\n", err) })
	}()

	if o.Operators {
		if err := b.startOperators(ctx); err != nil {
			return nil, err
		}
	}
	if o.SimulateMesh {
		if err := b.simulateMesh(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// simulateMesh starts sailfake and cnifake as the bed's admin.
func (b *Bed) simulateMesh(ctx context.Context) error {
	c, err := client.New(b.Cluster.REST, client.Options{})
	if err != nil {
		return err
	}
	// Not ctx: the players outlive start-up (a caller's start-up timeout
	// must not stop them); Stop ends them.
	stopSail, err := sailfake.Serve(context.WithoutCancel(ctx), b.Cluster.REST, c, b.Opts.Root)
	if err != nil {
		return fmt.Errorf("simulated Sail Operator: %w", err)
	}
	cniCtx, stopCNI := context.WithCancel(context.Background())
	cniDone := make(chan struct{})
	go func() { defer close(cniDone); cnifake.Play(cniCtx, c) }()
	b.stopSimulated = func() { stopCNI(); <-cniDone; stopSail() }
	fmt.Fprintln(b.Opts.Log, "bed: SIMULATED Sail Operator controller (e2e/sailfake) and istio-cni (e2e/cnifake) running")
	return nil
}

func (b *Bed) binDir() string { return filepath.Join(b.Opts.WorkDir, "bin") }

// The operators' charts as the bed installs their RBAC.
var (
	fleetChart = Chart{Name: "fleet-operator", Namespace: FleetNamespace}
	// The bed runs the mesh operator with --sail-install=false (it never
	// installs a Sail Operator here), so it gets exactly that mode's rules.
	meshChart = Chart{Name: "mesh-operator", Namespace: MeshNamespace, Set: []string{"sail.install=false"}}
)

// operatorCRDs are the directories holding both operators' CRDs in a tree.
func operatorCRDs(tree string) []string {
	return []string{
		filepath.Join(tree, "fleet-operator/config/crd/bases"),
		filepath.Join(tree, "mesh-operator/config/crd/bases"),
	}
}

func (b *Bed) startOperators(ctx context.Context) error {
	if err := b.buildOperators(ctx, b.Opts.Source, b.binDir()); err != nil {
		return err
	}
	if b.Opts.FaultProxies {
		b.Proxies = map[string]*FaultProxy{}
		for _, c := range []Chart{fleetChart, meshChart} {
			user := "system:serviceaccount:" + c.Namespace + ":" + c.ServiceAccount()
			p, err := StartFaultProxy(user, b.Cluster.REST.Host, b.Cluster.REST.TLSClientConfig.CAData)
			if err != nil {
				return err
			}
			b.Proxies[c.Name] = p
			fmt.Fprintf(b.Opts.Log, "bed: %s talks to the API server through the fault proxy %s\n", c.Name, p.URL())
		}
	}
	if err := b.installRBAC(ctx, b.Opts.Source); err != nil {
		return err
	}
	pub, err := b.installTestLicense(ctx)
	if err != nil {
		return err
	}
	b.licensePub = pub
	return b.runOperators(b.binDir())
}

// Upgrade replaces both operators with the ones built from tree, the way a
// helm upgrade does: the old processes stop (SIGTERM), the CRDs and the
// charts' RBAC are applied from tree, and the new binaries start with the
// same flags and identities. beforeStart, when set, runs just before they
// start: nothing of either operator runs then, and the bed's own writes are
// done.
func (b *Bed) Upgrade(ctx context.Context, tree string, beforeStart func() error) error {
	bin := filepath.Join(b.Opts.WorkDir, "bin-upgrade")
	if err := b.buildOperators(ctx, tree, bin); err != nil {
		return err
	}
	for _, p := range []*Process{b.Fleet, b.Mesh} {
		if err := p.Stop(15 * time.Second); err != nil {
			return fmt.Errorf("stopping %s: %w", p.Name, err)
		}
	}
	if err := cluster.InstallManifests(ctx, b.Cluster.REST, operatorCRDs(tree)...); err != nil {
		return fmt.Errorf("upgrading the CRDs: %w", err)
	}
	if err := b.installRBAC(ctx, tree); err != nil {
		return err
	}
	b.Opts.Source = tree
	if beforeStart != nil {
		if err := beforeStart(); err != nil {
			return err
		}
	}
	return b.runOperators(bin)
}

// buildOperators compiles both operators and the license tool of tree into bin.
func (b *Bed) buildOperators(ctx context.Context, tree, bin string) error {
	builds := []struct {
		module, pkg, out string
		tags             []string
	}{
		{"fleet-operator", "./cmd/fleet-operator", "fleet-operator", nil},
		// The mesh operator is built with the test-key path so it trusts the
		// bed's own license key; release builds cannot do this.
		{"mesh-operator", "./cmd/mesh-operator", "mesh-operator", []string{"licensetestkey"}},
		// The vendor build: the bed mints its own licenses (keygen, sign).
		{"mesh-operator", "./cmd/mesh-license", "mesh-license", []string{"licensevendor"}},
	}
	for _, bl := range builds {
		if err := Build(ctx, filepath.Join(tree, bl.module), bl.pkg, filepath.Join(bin, bl.out), bl.tags...); err != nil {
			return err
		}
	}
	return nil
}

// installRBAC applies both charts' ServiceAccounts and RBAC from tree and
// writes kubeconfigs for the ServiceAccounts.
func (b *Bed) installRBAC(ctx context.Context, tree string) error {
	for _, c := range []Chart{fleetChart, meshChart} {
		c.Root = tree
		if err := InstallRBAC(ctx, b.Cluster, b.Opts.Root, c); err != nil {
			return fmt.Errorf("installing %s RBAC: %w", c.Name, err)
		}
		path := filepath.Join(b.Opts.WorkDir, c.Name+".kubeconfig")
		if err := ServiceAccountKubeconfig(ctx, b.Cluster, c.Namespace, c.ServiceAccount(), path); err != nil {
			return err
		}
		if p := b.Proxies[c.Name]; p != nil {
			if err := pointKubeconfigAt(path, p.URL(), p.CAPEM()); err != nil {
				return err
			}
		}
	}
	return nil
}

// runOperators starts both operators from bin.
func (b *Bed) runOperators(bin string) error {
	b.Fleet = &Process{
		Name: "fleet-operator", Binary: filepath.Join(bin, "fleet-operator"),
		Kubeconfig: filepath.Join(b.Opts.WorkDir, "fleet-operator.kubeconfig"),
		LogPath:    filepath.Join(b.Opts.WorkDir, "fleet-operator.log"),
		Args: []string{
			"--namespace", FleetNamespace,
			"--leader-elect",
			"--metrics-bind-address", "127.0.0.1:0",
			"--health-probe-bind-address", "127.0.0.1:0",
			fmt.Sprintf("--network-policy-enforced=%t", b.Opts.NetworkPolicyEnforced),
			"--operator-service-account", fleetChart.ServiceAccount(),
			"--state-timeout", "1s",
			"--state-interval", "10s",
		},
	}
	b.Fleet.Args = append(b.Fleet.Args, b.Opts.FleetExtraArgs...)
	b.Mesh = &Process{
		Name: "mesh-operator", Binary: filepath.Join(bin, "mesh-operator"),
		Kubeconfig: filepath.Join(b.Opts.WorkDir, "mesh-operator.kubeconfig"),
		LogPath:    filepath.Join(b.Opts.WorkDir, "mesh-operator.log"),
		Args: []string{
			"--namespace", MeshNamespace,
			"--leader-elect",
			"--metrics-bind-address", "127.0.0.1:0",
			"--health-probe-bind-address", "127.0.0.1:0",
			"--license-secret", "mesh-operator-license",
			// The test bed has no route to any chart repository and must
			// never try one: managed meshes report the missing Sail Operator.
			"--sail-install=false",
		},
		Env: []string{"MESH_LICENSE_TEST_PUBLIC_KEY=" + b.licensePub},
	}
	b.Mesh.Args = append(b.Mesh.Args, b.Opts.MeshExtraArgs...)
	for _, p := range []*Process{b.Fleet, b.Mesh} {
		if err := p.Start(); err != nil {
			return fmt.Errorf("starting %s: %w", p.Name, err)
		}
	}
	return nil
}

// installTestLicense mints a key pair and a license with the preview feature
// and stores it where the mesh chart points the operator; it returns the
// public key to trust.
func (b *Bed) installTestLicense(ctx context.Context) (string, error) {
	tool := filepath.Join(b.binDir(), "mesh-license")
	keys := filepath.Join(b.Opts.WorkDir, "license-keys")
	if out, err := exec.CommandContext(ctx, tool, "keygen", "--out", keys, "--name", "bed", "--force").CombinedOutput(); err != nil {
		return "", fmt.Errorf("mesh-license keygen: %v: %s", err, out)
	}
	lic, err := exec.CommandContext(ctx, tool, "sign", "--key", filepath.Join(keys, "bed.key"),
		"--licensee", "local test bed", "--features", "preview", "--valid-for", "720h").Output()
	if err != nil {
		return "", fmt.Errorf("mesh-license sign: %w", err)
	}
	pub, err := exec.CommandContext(ctx, tool, "pubkey", "--pub", filepath.Join(keys, "bed.pub")).Output()
	if err != nil {
		return "", fmt.Errorf("mesh-license pubkey: %w", err)
	}
	cs, err := b.Cluster.Clientset()
	if err != nil {
		return "", err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: MeshNamespace, Name: "mesh-operator-license"},
		Data:       map[string][]byte{"license": lic},
	}
	if _, err := cs.CoreV1().Secrets(MeshNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	return strings.TrimSpace(string(pub)), nil
}

// Healthy reports a dead component or operator.
func (b *Bed) Healthy() error {
	for _, p := range []*Process{b.Fleet, b.Mesh} {
		if p != nil && !p.Running() {
			return fmt.Errorf("%s exited; see %s", p.Name, p.LogPath)
		}
	}
	return b.Provider.Healthy()
}

// Stop stops the operators, the simulated mesh components, the stand-ins
// and the control plane.
func (b *Bed) Stop() {
	if b.stopSimulated != nil {
		b.stopSimulated()
	}
	for _, p := range []*Process{b.Fleet, b.Mesh} {
		if p != nil {
			_ = p.Stop(15 * time.Second)
		}
	}
	for _, p := range b.Proxies {
		_ = p.Close()
	}
	if b.stopStandin != nil {
		b.stopStandin()
		<-b.standinDone
	}
	if b.Provider != nil {
		_ = b.Provider.Down(context.Background())
	}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// address with the same etcd (local.Provider.RestartAPIServer).
func (b *Bed) RestartAPIServer(ctx context.Context) error {
	return b.Provider.RestartAPIServer(ctx)
}

// SignLicense mints a license signed with the bed's test key (the one the
// bed's mesh operator trusts), as `mesh-license sign` would for a user, and
// writes the file to path. Operators must be running.
func (b *Bed) SignLicense(ctx context.Context, path, licensee, features string, validFor time.Duration) error {
	tool := filepath.Join(b.binDir(), "mesh-license")
	key := filepath.Join(b.Opts.WorkDir, "license-keys", "bed.key")
	lic, err := exec.CommandContext(ctx, tool, "sign", "--key", key,
		"--licensee", licensee, "--features", features, "--valid-for", validFor.String()).Output()
	if err != nil {
		return fmt.Errorf("mesh-license sign: %w", err)
	}
	return os.WriteFile(path, lic, 0o600)
}
