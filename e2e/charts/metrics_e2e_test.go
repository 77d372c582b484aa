//go:build e2e

package charts

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// metricsPort returns a free TCP port on 127.0.0.1 below the kernel's
// ephemeral range (ip_local_port_range). The test releases the port before
// the operator binds it; a port from the ephemeral range could meanwhile be
// handed to any listener on ":0" (the operator's own health probe took one
// once) or to an outgoing connection of a test running beside this one. The
// kernel never hands out a port below that range on its own, so only a
// process naming the same port could take it.
func metricsPort(t *testing.T) int {
	t.Helper()
	low := 32768 // Linux's default start of the range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	require.Greater(t, low, 2048, "the ephemeral port range leaves no room below it")
	for range 100 {
		port := 1024 + rand.IntN(low-1024)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		require.NoError(t, l.Close())
		return port
	}
	t.Fatalf("no free port on 127.0.0.1 below %d in 100 tries", low)
	return 0
}

// saToken returns a token of ServiceAccount ns/name, creating it.
func saToken(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}

// TestMetricsAuthenticated runs each operator with metrics.secure=true under
// its chart's RBAC: the metrics endpoint serves TLS and answers only a
// caller the API server authenticates and authorizes for GET /metrics,
// which the chart's RELEASE-metrics-reader ClusterRole grants. The operator
// checks callers with TokenReviews and SubjectAccessReviews, which its chart
// grants with metrics.secure only.
func TestMetricsAuthenticated(t *testing.T) {
	for _, tc := range []struct {
		release release
		set     []string
		metric  string
	}{
		{release{chart: meshChart, name: meshChart, namespace: "mesh-system"}, nil, "mesh_operator_license_expiry_timestamp_seconds"},
		{release{chart: fleetChart, name: fleetChart, namespace: "fleet-system"}, []string{"networkPolicyEnforced=true"}, "controller_runtime_reconcile_total"},
	} {
		t.Run(tc.release.chart, func(t *testing.T) {
			c := upAPIServer(t, operatorCRDPaths(t)...)
			cs := clientset(t, c)
			createNamespaces(t, cs, tc.release.namespace, "monitoring")
			port := metricsPort(t)
			p := runOperator(t, c, tc.release, append(tc.set, "metrics.secure=true", fmt.Sprintf("metrics.port=%d", port)))

			// The certificate is the operator's self-signed one; what is
			// tested here is who may read, not the certificate.
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			get := func(token string) (int, string) {
				t.Helper()
				req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
				require.NoError(t, err)
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := hc.Do(req)
				if err != nil {
					return 0, err.Error()
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			var code int
			err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				if !p.Running() {
					return false, os.ErrProcessDone
				}
				code, _ = get("")
				return code != 0, nil
			})
			require.NoError(t, err, "the metrics endpoint never answered over TLS")
			assert.Equal(t, http.StatusUnauthorized, code, "no token")

			code, _ = get(saToken(t, cs, "monitoring", "stranger"))
			assert.Equal(t, http.StatusForbidden, code, "a ServiceAccount without the metrics-reader role")

			reader := tc.release.name + "-metrics-reader"
			_, err = cs.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "prometheus-" + reader},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: "monitoring"}},
			}, metav1.CreateOptions{})
			require.NoError(t, err, "the chart renders ClusterRole %s", reader)
			token := saToken(t, cs, "monitoring", "prometheus")
			var body string
			err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				code, body = get(token)
				return code == http.StatusOK, nil
			})
			require.NoError(t, err, "prometheus bound to %s: %d %s", reader, code, body)
			assert.Contains(t, body, tc.metric)

			require.True(t, p.Running(), "the operator exited")
			assertNothingForbidden(t, p)
		})
	}
}
