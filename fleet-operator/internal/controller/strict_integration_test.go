//go:build integration

package controller

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// enrollStrict plays the mesh operator for a namespace under isolation:
// strict with STRICT mTLS in force.
func enrollStrict(t *testing.T, c client.Client, ns, dataPlane, mtls string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"enrolled",%q:%q,%q:%q,%q:"strict",%q:"istio-system"}}}`,
		labels.MeshState, labels.MeshDataPlane, dataPlane, labels.MeshMTLS, mtls, labels.MeshIsolation, labels.MeshControlPlane)
	require.NoError(t, c.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("mesh-operator")))
}

// podAs creates a Pod running as a ServiceAccount, with labels.
func podAs(t *testing.T, c client.Client, ns, name, sa string, l map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	require.NoError(t, c.Create(context.Background(), p))
	return p
}

// verdictOf judges a meshed caller (namespace, ServiceAccount) on a port of
// the fleet's members against the fleet's live AuthorizationPolicy alone,
// under STRICT.
func verdictOf(t *testing.T, h *harness, f *v1alpha1.CelldFleet, ns, sa string, port int) bool {
	t.Helper()
	ap := policy(mesh.AuthorizationPolicyKind)
	require.NoError(t, h.get(ap, f.Namespace, mesh.PolicyName(f.Name)))
	p := authzeval.FromUnstructured(ap, map[string]string{labels.Fleet: f.Name})
	return authzeval.Evaluate("STRICT", []authzeval.Policy{p}, authzeval.Request{
		MTLS: true, Principal: fmt.Sprintf("cluster.local/ns/%s/sa/%s", ns, sa), Namespace: ns, Port: port,
	}).Allowed
}

// TestStrictIsolation: under isolation strict (STRICT in force), the fleet's
// 8080 admits only the identities of its wired clients and its routing
// source, resolved from live Pods and kept current; 8081 only peers and the
// operator.
func TestStrictIsolation(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	ctx := context.Background()
	for _, ns := range []string{"strict", "strict-edge"} {
		createNamespace(t, env.Client, ns)
	}
	h := newHarness(t, env, true)
	h.r.Config.IstioTrustDomain = "cluster.local"
	vault := fleet("strict", "vault")
	vault.Spec.Routing = &v1alpha1.Routing{Hostnames: []string{"vault.example.com"},
		Ingress: &v1alpha1.IngressRouting{ClassName: "nginx"},
		Source:  v1alpha1.RoutingSource{Namespace: "strict-edge", PodLabels: map[string]v1alpha1.LabelValue{"app": "edge-proxy"}}}
	other := fleet("strict", "other")
	require.NoError(t, env.Client.Create(ctx, vault))
	require.NoError(t, env.Client.Create(ctx, other))
	podAs(t, env.Client, "strict", "web-1", "web", map[string]string{labels.ClientOf: "vault"})
	podAs(t, env.Client, "strict", "batch-1", "batch", map[string]string{"app": "batch"})
	podAs(t, env.Client, "strict", "shop-1", "shop", map[string]string{labels.ClientOf: "other"})
	podAs(t, env.Client, "strict-edge", "edge-proxy-1", "edge-proxy", map[string]string{"app": "edge-proxy"})
	podAs(t, env.Client, "strict-edge", "edge-batch-1", "edge-batch", map[string]string{"app": "batch"})

	enrollStrict(t, env.Client, "strict", "ambient", "strict")
	for i := 0; i < 2; i++ {
		h.reconcile(vault)
		h.reconcile(other)
	}
	rows := []struct {
		ns, sa string
		port   int
		want   bool
		why    string
	}{
		{"strict", "web", 8080, true, "a wired client (celld.eric.dev/client-of: vault)"},
		{"strict", "batch", 8080, false, "an unlabelled Pod of the same namespace"},
		{"strict", "shop", 8080, false, "a client of another fleet"},
		{"strict-edge", "edge-proxy", 8080, true, "the routing source"},
		{"strict-edge", "edge-batch", 8080, false, "another Pod of the routing source's namespace"},
		{"strict", "other", 8080, false, "a peer of another fleet"},
		{"strict", "other", 8081, false, "a peer of another fleet, on the peer port"},
		{"strict", "vault", 8081, true, "a peer"},
		{"fleet-system", "fleet-operator", 8081, true, "the operator"},
		{"strict", "web", 8081, false, "a client on the peer port"},
	}
	for _, r := range rows {
		assert.Equal(t, r.want, verdictOf(t, h, vault, r.ns, r.sa, r.port), "%s/%s :%d — %s", r.ns, r.sa, r.port, r.why)
	}

	t.Run("clients come and go; nothing is written while nothing changes", func(t *testing.T) {
		h.writes.n.Store(0)
		h.reconcile(vault)
		assert.Equal(t, int64(0), h.writes.n.Load(), "an unchanged graph writes nothing")

		podAs(t, env.Client, "strict", "report-1", "report", map[string]string{labels.ClientOf: "vault"})
		h.reconcile(vault)
		assert.True(t, verdictOf(t, h, vault, "strict", "report", 8080), "a new client is admitted")
		require.NoError(t, env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "strict", Name: "web-1"}}, client.GracePeriodSeconds(0)))
		h.reconcile(vault)
		assert.False(t, verdictOf(t, h, vault, "strict", "web", 8080), "a client that is gone is no longer admitted")
		assert.True(t, verdictOf(t, h, vault, "strict", "report", 8080))
	})

	t.Run("the running operator: a new client wakes its fleet, without waiting for the next look", func(t *testing.T) {
		// Unconfirmed NetworkPolicy enforcement blocks the fleet after its
		// policies are applied, so its next look is StateInterval (a
		// minute) away: only the client Pod watch can wake it sooner.
		cfg := h.r.Config
		cfg.NetworkPolicyEnforced = false
		opts := ctrl.Options{
			Scheme: env.Client.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		}
		RestrictCache(cfg, &opts.Cache)
		ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
		mgr, err := ctrl.NewManager(env.Config, opts)
		require.NoError(t, err)
		require.NoError(t, SetupWithManager(mgr, cfg))
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		defer func() {
			cancel()
			<-done
		}()
		require.Eventually(t, func() bool {
			return meta.IsStatusConditionTrue(getFleetT(t, env, vault).Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
		}, 20*time.Second, 200*time.Millisecond, "the running operator reconciled the fleet")
		time.Sleep(time.Second) // past the reconcile that reported it
		podAs(t, env.Client, "strict", "late-1", "late", map[string]string{labels.ClientOf: "vault"})
		assert.Eventually(t, func() bool { return verdictOf(t, h, vault, "strict", "late", 8080) }, 15*time.Second, 200*time.Millisecond,
			"a client created while the fleet waits a minute for its next look is admitted within seconds")
	})

	t.Run("isolation namespace: back to the namespace-wide rule", func(t *testing.T) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"namespace"}}}`, labels.MeshIsolation)
		require.NoError(t, env.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "strict"}},
			client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("mesh-operator")))
		h.reconcile(vault)
		assert.True(t, verdictOf(t, h, vault, "strict", "batch", 8080), "under namespace isolation any meshed caller the NetworkPolicy admits")
	})
}

func getFleetT(t *testing.T, env *testenv.Env, f *v1alpha1.CelldFleet) *v1alpha1.CelldFleet {
	t.Helper()
	got := &v1alpha1.CelldFleet{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f), got))
	return got
}
