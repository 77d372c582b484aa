//go:build e2e

package local_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/e2e/cluster/local"
)

// TestRestartAPIServer: the API server stops and starts again on the same
// address with the same etcd: a client made before the restart reads what
// was written before it, and the component is a new process.
func TestRestartAPIServer(t *testing.T) {
	requireTools(t, "etcd", "kube-apiserver")
	p, c := up(t, local.Options{NoDefaultCRDs: true})
	ctx := context.Background()
	cs, err := c.Clientset()
	require.NoError(t, err)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "before-restart"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	pid := func() int {
		for _, r := range p.Processes() {
			if r.Name == "kube-apiserver" {
				return r.PGID
			}
		}
		return 0
	}
	old := pid()
	start := time.Now()
	require.NoError(t, p.RestartAPIServer(ctx))
	t.Logf("restart took %s", time.Since(start).Round(time.Millisecond))
	require.NotEqual(t, old, pid(), "a new kube-apiserver process")
	require.NotZero(t, pid())
	_, err = cs.CoreV1().Namespaces().Get(ctx, "before-restart", metav1.GetOptions{})
	require.NoError(t, err, "the same client, the same address, the same etcd")
	require.NoError(t, p.Healthy())
}
