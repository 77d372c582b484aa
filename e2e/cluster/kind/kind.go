// Package kind is the "kind" cluster provider: a real multi-node cluster in
// Docker containers, built with the sigs.k8s.io/kind library. It is what the
// e2e-kind GitHub Actions workflow runs (real CNI with NetworkPolicy, real
// Istio through Sail, real Gateway); it cannot run on machines without a
// Docker engine, where DockerAvailable reports why.
package kind

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	kindcmd "sigs.k8s.io/kind/pkg/cmd"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// Options configures a kind cluster.
type Options struct {
	// Name of the kind cluster; empty means DefaultName.
	Name string
	// NodeImage overrides kind's default node image (kindest/node:<k8s>).
	NodeImage string
	// Workers is the number of worker nodes besides the control plane.
	Workers int
	// DisableDefaultCNI leaves the cluster without kindnet, for installing
	// another CNI (kindnet enforces NetworkPolicy already).
	DisableDefaultCNI bool
	// PodSubnet and ServiceSubnet override kind's defaults when set.
	PodSubnet     string
	ServiceSubnet string
	// WorkDir receives the kubeconfig; empty means a temporary directory.
	WorkDir string
	// WaitForReady bounds the wait for the control plane; 0 means 5 minutes.
	WaitForReady time.Duration
	// Images are loaded from the local Docker engine into every node after
	// the cluster is created (`kind load docker-image`).
	Images []string
	// CRDPaths are manifest files or directories installed after the images.
	CRDPaths []string
	// Charts are installed with the helm binary after the CRDs, in order.
	Charts []cluster.HelmRelease
	// HelmBin is the helm binary; empty means bin/helm of the repository.
	HelmBin string
	// KeepCluster makes Down leave the cluster running (for debugging a CI
	// run); Up still reuses nothing.
	KeepCluster bool
	// LogsDir receives the cluster's logs (kind export logs) when Down
	// deletes it, in LogsDir/<Name>; empty means $FLEETMESH_KIND_LOGS, and
	// no logs when that is empty too. CI uploads it when a run fails.
	LogsDir string
}

// LogsDirEnv names the default of Options.LogsDir.
const LogsDirEnv = "FLEETMESH_KIND_LOGS"

// DefaultName is the kind cluster name when Options.Name is empty.
const DefaultName = "fleetmesh"

// Provider is the kind cluster provider.
type Provider struct {
	opts       Options
	kind       *kindcluster.Provider
	kubeconfig string
	ownsDir    bool
	created    bool
}

var _ cluster.Provider = (*Provider)(nil)

// New returns a provider for opts; nothing happens before Up.
func New(opts Options) *Provider {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.WaitForReady == 0 {
		opts.WaitForReady = 5 * time.Minute
	}
	if opts.LogsDir == "" {
		opts.LogsDir = os.Getenv(LogsDirEnv)
	}
	return &Provider{opts: opts}
}

// Name implements cluster.Provider.
func (p *Provider) Name() string { return "kind" }

// Up creates the cluster, exports its kubeconfig, loads images, installs
// CRDs and charts. A failure after creation deletes the cluster again.
func (p *Provider) Up(ctx context.Context) (c *cluster.Cluster, err error) {
	if err := DockerAvailable(ctx); err != nil {
		return nil, err
	}
	if err := p.prepareDir(); err != nil {
		return nil, err
	}
	cfg, err := RenderConfig(p.opts)
	if err != nil {
		return nil, err
	}
	p.kind = kindcluster.NewProvider(kindcluster.ProviderWithDocker(), kindcluster.ProviderWithLogger(kindcmd.NewLogger()))
	createOpts := []kindcluster.CreateOption{
		kindcluster.CreateWithRawConfig(cfg),
		kindcluster.CreateWithKubeconfigPath(p.kubeconfig),
		kindcluster.CreateWithWaitForReady(p.opts.WaitForReady),
		kindcluster.CreateWithDisplayUsage(false),
		kindcluster.CreateWithDisplaySalutation(false),
	}
	if p.opts.NodeImage != "" {
		createOpts = append(createOpts, kindcluster.CreateWithNodeImage(p.opts.NodeImage))
	}
	if err := p.kind.Create(p.opts.Name, createOpts...); err != nil {
		return nil, fmt.Errorf("kind create cluster %s: %w", p.opts.Name, err)
	}
	p.created = true
	defer func() {
		if err != nil && !p.opts.KeepCluster {
			_ = p.Down(context.Background())
		}
	}()
	return p.finishUp(ctx)
}

func (p *Provider) finishUp(ctx context.Context) (*cluster.Cluster, error) {
	restCfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig)
	if err != nil {
		return nil, err
	}
	restCfg.QPS, restCfg.Burst = 100, 200
	if err := cluster.WaitAPIReady(ctx, restCfg); err != nil {
		return nil, err
	}
	// kind's own wait covers the control plane only; specs expect workers.
	if err := waitNodesReady(ctx, restCfg, p.opts.WaitForReady); err != nil {
		return nil, err
	}
	if err := p.LoadImages(ctx, p.opts.Images...); err != nil {
		return nil, err
	}
	if len(p.opts.CRDPaths) > 0 {
		if err := cluster.InstallManifests(ctx, restCfg, p.opts.CRDPaths...); err != nil {
			return nil, err
		}
	}
	for _, chart := range p.opts.Charts {
		if err := cluster.HelmInstall(ctx, p.opts.HelmBin, p.kubeconfig, chart); err != nil {
			return nil, err
		}
	}
	return &cluster.Cluster{Name: p.opts.Name, Kubeconfig: p.kubeconfig, REST: restCfg, WorkDir: filepath.Dir(p.kubeconfig)}, nil
}

// Down deletes the cluster (unless KeepCluster) and a temporary work dir.
func (p *Provider) Down(context.Context) error {
	var err error
	if p.created && p.opts.LogsDir != "" {
		// Before the cluster goes: nodes' journals, kubelet, containerd and
		// every Pod's logs, for a failed CI run to be read afterwards.
		if logErr := p.kind.CollectLogs(p.opts.Name, filepath.Join(p.opts.LogsDir, p.opts.Name)); logErr != nil {
			fmt.Fprintf(os.Stderr, "kind: collecting the logs of %s: %v\n", p.opts.Name, logErr)
		}
	}
	if p.created && !p.opts.KeepCluster {
		if err = p.kind.Delete(p.opts.Name, p.kubeconfig); err == nil {
			p.created = false
		}
	}
	if p.ownsDir && !p.opts.KeepCluster {
		if rmErr := os.RemoveAll(filepath.Dir(p.kubeconfig)); err == nil {
			err = rmErr
		}
	}
	return err
}

func (p *Provider) prepareDir() error {
	dir := p.opts.WorkDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "fleetmesh-kind-")
		if err != nil {
			return err
		}
		dir, p.ownsDir = tmp, true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	p.kubeconfig = filepath.Join(abs, "kubeconfig")
	return nil
}

// DockerAvailable reports why kind cannot run here, or nil. Tests that need
// a cluster skip on its error.
func DockerAvailable(ctx context.Context) error {
	if _, err := exec.LookPath("docker"); err != nil {
		return fmt.Errorf("kind needs docker: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", "info")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kind needs a running Docker engine: docker info: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

func waitNodesReady(ctx context.Context, cfg *rest.Config, timeout time.Duration) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var notReady []string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		notReady = notReady[:0]
		for _, n := range nodes.Items {
			if !nodeReady(&n) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(nodes.Items) > 0 && len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("kind nodes not ready %v: %w", notReady, err)
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
