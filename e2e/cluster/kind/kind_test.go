package kind

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

func TestRenderConfig(t *testing.T) {
	out, err := RenderConfig(Options{Name: "fm", Workers: 2, PodSubnet: "10.244.0.0/16"})
	require.NoError(t, err)
	require.YAMLEq(t, `
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: fm
nodes:
- role: control-plane
- role: worker
  labels: {fleetmesh.dev/role: worker}
- role: worker
  labels: {fleetmesh.dev/role: worker}
networking:
  podSubnet: 10.244.0.0/16
`, string(out))

	// It must read back as a kind configuration.
	var back v1alpha4.Cluster
	require.NoError(t, yaml.UnmarshalStrict(out, &back))
	require.Len(t, back.Nodes, 3)
}

func TestRenderConfigDefaultsAndErrors(t *testing.T) {
	cfg, err := ClusterConfig(Options{DisableDefaultCNI: true})
	require.NoError(t, err)
	require.Len(t, cfg.Nodes, 1)
	require.Equal(t, v1alpha4.ControlPlaneRole, cfg.Nodes[0].Role)
	require.True(t, cfg.Networking.DisableDefaultCNI)

	_, err = ClusterConfig(Options{Workers: -1})
	require.Error(t, err)

	require.Equal(t, DefaultName, New(Options{}).opts.Name)
}

// TestKindUpDown creates a real kind cluster. It needs a Docker engine and
// takes minutes, so it runs only when FLEETMESH_E2E_KIND=1 (the e2e-kind
// workflow) and skips when `docker info` fails.
func TestKindUpDown(t *testing.T) {
	if os.Getenv("FLEETMESH_E2E_KIND") != "1" {
		t.Skip("set FLEETMESH_E2E_KIND=1 to create a kind cluster")
	}
	if err := DockerAvailable(t.Context()); err != nil {
		t.Skipf("skipping kind test: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	p := New(Options{Name: "fleetmesh-test", Workers: 1, NodeImage: os.Getenv("KIND_NODE_IMAGE")})
	c, err := p.Up(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Down(context.Background())) })

	client, err := c.Clientset()
	require.NoError(t, err)
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 2)
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				require.Equal(t, corev1.ConditionTrue, cond.Status, "node %s", n.Name)
			}
		}
	}
}
