//go:build integration

package manager

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestNewManagerPacesAndAsksForNoCompression: the manager both operators
// build (from the kubeconfig, as in a cluster) paces every request from
// one bucket and asks for uncompressed responses. The helpers have tests
// of their own (pace_test.go); this one fails when NewManager stops using
// them.
func TestNewManagerPacesAndAsksForNoCompression(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	env := testenv.Start(t, s)
	t.Setenv("KUBECONFIG", writeKubeconfig(t, env.Config))

	o := &Options{Namespace: "default", MetricsAddr: "0", ProbeAddr: "0", GracefulPeriod: time.Second, APIPace: Pace{QPS: 10, Burst: 2}}
	mgr, err := o.NewManager(s, nil)
	require.NoError(t, err)
	assert.True(t, mgr.GetConfig().DisableCompression, "the manager's clients ask for no gzip")

	// Past the burst, six reads at 10 per second take at least 0.4 s: the
	// uncached reader draws from the same bucket as every other client.
	ctx := context.Background()
	reader := mgr.GetAPIReader()
	for range 2 {
		_ = reader.Get(ctx, client.ObjectKey{Namespace: "default", Name: "warm-up"}, &corev1.ConfigMap{})
	}
	start := time.Now()
	for range 6 {
		_ = reader.Get(ctx, client.ObjectKey{Namespace: "default", Name: "absent"}, &corev1.ConfigMap{})
	}
	assert.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "six requests past the burst at 10 per second")
}

// writeKubeconfig writes cfg (the test API server, client-certificate
// authentication) as a kubeconfig file.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}
