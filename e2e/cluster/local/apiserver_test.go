//go:build e2e

package local_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
)

// TestIntegrationTier checks what operator integration specs rely on in the
// API-server-only tier: third-party CRDs Established, ServiceAccount tokens
// from TokenRequest (`kubectl create token`), and RBAC actually enforced.
func TestIntegrationTier(t *testing.T) {
	requireTools(t, "etcd", "kube-apiserver", "kubectl")
	_, c := up(t, local.Options{})
	ctx := context.Background()

	require.NoError(t, cluster.WaitCRDsEstablished(ctx, c.REST,
		"gateways.gateway.networking.k8s.io", "httproutes.gateway.networking.k8s.io",
		"virtualservices.networking.istio.io", "peerauthentications.security.istio.io"))

	client, err := c.Clientset()
	require.NoError(t, err)
	_, err = client.CoreV1().ServiceAccounts("default").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	token := kubectlCreateToken(t, c.Kubeconfig, "default", "probe")
	asProbe := rest.AnonymousClientConfig(c.REST)
	asProbe.BearerToken = token
	probe, err := kubernetes.NewForConfig(asProbe)
	require.NoError(t, err)

	_, err = probe.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "a ServiceAccount without bindings must be forbidden, got %v", err)

	// A Role of its own: the aggregated ClusterRoles (view, edit, admin) are
	// empty in this tier, their rules are filled in by a controller-manager
	// controller.
	_, err = client.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-pod-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "probe", Namespace: "default"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// RBAC is served from an informer cache, so the grant lands shortly.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := probe.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	require.NoError(t, err, "the binding should allow listing pods")
	_, err = probe.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "the binding must not allow reading secrets, got %v", err)
}

// TestHelmInstallIntoLocalCluster installs a minimal chart with bin/helm
// through the provider's kubeconfig, as the demo installs the operators.
func TestHelmInstallIntoLocalCluster(t *testing.T) {
	requireTools(t, "etcd", "kube-apiserver", "helm")
	_, c := up(t, local.Options{NoDefaultCRDs: true})
	chart := t.TempDir()
	files := map[string]string{
		"Chart.yaml":               "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
		"values.yaml":              "greeting: hello\n",
		"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
	}
	for name, content := range files {
		path := filepath.Join(chart, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	ctx := context.Background()
	err := cluster.HelmInstall(ctx, "", c.Kubeconfig, cluster.HelmRelease{
		Name: "probe", Namespace: "probe-system", Chart: chart, Set: []string{"greeting=hi"}, Wait: true, Timeout: time.Minute,
	})
	require.NoError(t, err)
	client, err := c.Clientset()
	require.NoError(t, err)
	cm, err := client.CoreV1().ConfigMaps("probe-system").Get(ctx, "probe", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "hi", cm.Data["greeting"])
	require.NoError(t, cluster.HelmUninstall(ctx, "", c.Kubeconfig, "probe", "probe-system"))
}

func kubectlCreateToken(t *testing.T, kubeconfig, namespace, name string) string {
	t.Helper()
	bin, err := cluster.BinDir()
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(bin, "kubectl"), "--kubeconfig", kubeconfig,
		"create", "token", name, "-n", namespace, "--duration", "10m")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "kubectl create token: %s", stderr.String())
	token := strings.TrimSpace(stdout.String())
	require.NotEmpty(t, token)
	return token
}

// TestDownLeavesNoProcess checks that Down stops every component it started
// and removes the temporary work dir.
func TestDownLeavesNoProcess(t *testing.T) {
	requireTools(t, "etcd", "kube-apiserver")
	p := local.New(local.Options{NoDefaultCRDs: true, Log: logWriter{t}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.Up(ctx)
	require.NoError(t, err)
	recs := p.Processes()
	require.Len(t, recs, 2, "etcd and kube-apiserver")
	dir := p.WorkDir()

	require.NoError(t, p.Down(ctx))
	for _, r := range recs {
		require.False(t, processAlive(r.PGID), "%s (pid %d) survived Down", r.Name, r.PGID)
	}
	require.Empty(t, childPIDs(t), "child processes survived Down")
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "temporary work dir %s should be removed", dir)
	require.NoError(t, p.Down(ctx), "a second Down is a no-op")
}

// TestFailedUpCleansUp makes Up fail after etcd and kube-apiserver started
// (a CRD path that does not exist) and checks nothing is left running, and
// that the error says what went wrong.
func TestFailedUpCleansUp(t *testing.T) {
	requireTools(t, "etcd", "kube-apiserver")
	dir := t.TempDir()
	p := local.New(local.Options{
		WorkDir:       dir,
		NoDefaultCRDs: true,
		CRDPaths:      []string{filepath.Join(dir, "no-such-crds")},
		Log:           logWriter{t},
	})
	_, err := p.Up(context.Background())
	require.ErrorContains(t, err, "no-such-crds")
	require.Empty(t, childPIDs(t), "child processes survived a failed Up")
	recs, err := local.ReadProcessRecords(dir)
	require.NoError(t, err)
	require.Empty(t, recs, "the process record is removed with the processes")
	// A given work dir is kept, with the logs of the failed run.
	_, err = os.Stat(filepath.Join(dir, "logs", "kube-apiserver.log"))
	require.NoError(t, err)
}
