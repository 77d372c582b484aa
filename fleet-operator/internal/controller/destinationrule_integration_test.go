//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestMutualTLSDestinationRuleHoldsMeshRoll: a DestinationRule that forces
// ISTIO_MUTUAL toward the fleet's Services holds a roll into or out of the
// mesh before the first member is replaced (seed 000: meshed members'
// calls to unmeshed ones would fail). The StatefulSet keeps its template,
// no member is deleted, and the fleet names the rule; once the rule is
// gone or no longer forces ISTIO_MUTUAL, the roll goes on. The test walks
// the roll pass by pass.
func TestMutualTLSDestinationRuleHoldsMeshRoll(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	ctx := context.Background()

	t.Run("joining, a rule of the fleet's namespace, deleted", func(t *testing.T) {
		const ns = "drjoin"
		createNamespace(t, env.Client, ns)
		f := fleet(ns, "dj")
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.reconcile(f)
		playStatefulSet(t, env.Client, ns, "dj", "rev1")
		for i := range 3 {
			ip := fmt.Sprintf("127.14.110.%d", i+1)
			serveState(t, ip)
			runningMember(t, env.Client, ns, "dj", i, false, "rev1", ip)
		}
		h.reconcile(f)

		dr := destinationRule(ns, "mtls", "*.drjoin.svc.cluster.local", map[string]any{"tls": map[string]any{"mode": "ISTIO_MUTUAL"}})
		require.NoError(t, env.Client.Create(ctx, dr))
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"istio":{}}}}`))))
		for range 2 { // held pass after pass
			h.reconcile(f)
			assertMutualTLSHold(t, h, f, "drjoin/mtls", "joining")
			assertTemplateInject(t, h, f, "", "held: the members' template does not change")
		}

		require.NoError(t, env.Client.Delete(ctx, dr))
		h.reconcile(f)
		assertTemplateInject(t, h, f, "true", "the rule is gone: the members roll into the mesh")
		assertNotHeld(t, h, f)
		playStatefulSet(t, env.Client, ns, "dj", "rev2")
		h.reconcile(f)
		assert.Equal(t, 1, deletedMembers(t, env.Client, ns, 3), "the roll replaces its first member")
	})

	t.Run("leaving, a root namespace rule on the peer port, changed to DISABLE", func(t *testing.T) {
		const ns = "drleave"
		createNamespace(t, env.Client, ns)
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mesh.DefaultControlPlaneNamespace}}); !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
		f := fleet(ns, "dl")
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.startMembers(f, "127.14.110.%d", 11, func(i int, ip string) { runningMember(t, env.Client, ns, "dl", i, true, "rev1", ip) })
		require.NoError(t, h.get(f, ns, "dl"))
		require.Equal(t, "Meshed", f.Status.Mesh)

		dr := destinationRule(mesh.DefaultControlPlaneNamespace, "default", "*", map[string]any{
			"portLevelSettings": []any{map[string]any{"port": map[string]any{"number": int64(8081)}, "tls": map[string]any{"mode": "ISTIO_MUTUAL"}}},
		})
		require.NoError(t, env.Client.Create(ctx, dr))
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":null}}`))))
		for range 2 {
			h.reconcile(f)
			assertMutualTLSHold(t, h, f, "istio-system/default", "leaving")
			assertTemplateInject(t, h, f, "true", "held: the members' template does not change")
		}

		require.NoError(t, unstructured.SetNestedSlice(dr.Object, []any{map[string]any{
			"port": map[string]any{"number": int64(8081)}, "tls": map[string]any{"mode": "DISABLE"},
		}}, "spec", "trafficPolicy", "portLevelSettings"))
		require.NoError(t, env.Client.Update(ctx, dr))
		h.reconcile(f)
		assertTemplateInject(t, h, f, "false", "the rule no longer forces ISTIO_MUTUAL: the members roll out of the mesh")
		assertNotHeld(t, h, f)
	})
}

// TestUnreadDestinationRulesHoldMeshRoll: unknown is not absent. When the
// DestinationRules cannot be listed, a roll into the mesh waits (the
// template is not changed) and the failed step is reported; once they can
// be read and none forces ISTIO_MUTUAL, the roll goes on.
func TestUnreadDestinationRulesHoldMeshRoll(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	ctx := context.Background()
	const ns = "drunread"
	createNamespace(t, env.Client, ns)
	f := fleet(ns, "du")
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	h.reconcile(f)
	playStatefulSet(t, env.Client, ns, "du", "rev1")
	for i := range 3 {
		ip := fmt.Sprintf("127.14.110.%d", i+21)
		serveState(t, ip)
		runningMember(t, env.Client, ns, "du", i, false, "rev1", ip)
	}
	h.reconcile(f)

	var refuse atomic.Bool
	refuse.Store(true)
	h.r.Client = interceptor.NewClient(h.r.Client.(client.WithWatch), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if u, ok := list.(*unstructured.UnstructuredList); ok && u.GetKind() == "DestinationRuleList" && refuse.Load() {
				return apierrors.NewForbidden(mesh.DestinationRuleKind.GroupVersion().WithResource("destinationrules").GroupResource(), "", errors.New("RBAC: not granted"))
			}
			return c.List(ctx, list, opts...)
		},
	})
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"istio":{}}}}`))))
	for range 2 {
		// A failed step is reported and looked at again soon (issue 42 item
		// 2), not returned to the work queue's backoff.
		res, err := h.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f)})
		require.NoError(t, err)
		require.Positive(t, res.RequeueAfter, "the failed pass is looked at again")
		assertTemplateInject(t, h, f, "", "DestinationRules unread: the members' template does not change")
		c := condition(t, h, f, v1alpha1.ConditionReconciled)
		if assert.NotNil(t, c) {
			assert.Equal(t, string(v1alpha1.ReasonStepFailed), c.Reason)
			assert.Contains(t, c.Message, "reading DestinationRules")
			assert.Contains(t, c.Message, "RBAC: not granted")
		}
		assert.Equal(t, 0, deletedMembers(t, env.Client, ns, 3))
	}

	refuse.Store(false)
	h.reconcile(f)
	assertTemplateInject(t, h, f, "true", "DestinationRules read, none forces ISTIO_MUTUAL: the members roll into the mesh")
	c := condition(t, h, f, v1alpha1.ConditionReconciled)
	if assert.NotNil(t, c) {
		assert.Equal(t, string(v1alpha1.ReasonAllStepsRan), c.Reason, c.Message)
	}
}

// TestDestinationRuleDeletionWakesTheHeldFleet: under a running operator
// the rules come from a cache of theirs, so the passes of a held fleet send
// no request for them, and the deletion of the rule that holds the fleet
// wakes it: the roll resumes at once, though its next periodic look is an
// hour away.
func TestDestinationRuleDeletionWakesTheHeldFleet(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	const ns = "drwake"
	createNamespace(t, env.Client, ns)
	cfg := newHarness(t, env, true).r.Config
	cfg.StateInterval = time.Hour // what wakes the fleet below are events only
	f := fleet(ns, "w")
	f.Spec.Replicas = ptr.To[int32](1)
	require.NoError(t, env.Client.Create(ctx, f))
	var n requestCounter
	// On a loaded machine the status patch that ends a pass comes a while
	// after the pass applied the members' StatefulSet (the /state reads
	// and the roll step are in between): lag makes that while 500 ms once
	// the rule is deleted, so the test does not depend on the machine.
	lag := &statusLag{lag: 500 * time.Millisecond}
	startOperator(t, env, lag.wrap(n.wrap(env.Config)), cfg)
	require.Eventually(t, func() bool { return playStatefulSetErr(env.Client, ns, "w", "rev1") == nil }, 30*time.Second, 100*time.Millisecond)
	ip := "127.14.110.31"
	serveState(t, ip)
	runningMember(t, env.Client, ns, "w", 0, false, "rev1", ip)
	require.Eventually(t, func() bool {
		c := condition(t, &harness{t: t, env: env}, f, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue
	}, 30*time.Second, 100*time.Millisecond, "the fleet is ready")

	dr := destinationRule(ns, "mtls", "w", map[string]any{"tls": map[string]any{"mode": "ISTIO_MUTUAL"}})
	require.NoError(t, env.Client.Create(ctx, dr))
	require.Eventually(t, func() bool { return n.get("WATCH destinationrules") > 0 }, 30*time.Second, 100*time.Millisecond, "the operator watches DestinationRules")
	time.Sleep(time.Second) // the cache holds the rule
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"istio":{}}}}`))))
	h := &harness{t: t, env: env}
	require.Eventually(t, func() bool {
		c := condition(t, h, f, v1alpha1.ConditionInfrastructureBlocked)
		return c != nil && c.Reason == string(v1alpha1.ReasonMutualTLSDestinationRule) && c.ObservedGeneration == f.Generation
	}, 30*time.Second, 100*time.Millisecond, "the rule holds the roll")
	assertTemplateInject(t, h, f, "", "held: the members' template does not change")

	before := reconciles(t)
	n.reset()
	for i := range 3 {
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{"test/poke":"%d"}}}`, i)))))
		time.Sleep(300 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return reconciles(t)-before >= 3 }, 10*time.Second, 100*time.Millisecond)
	counts := n.reset()
	t.Logf("%v passes of the held fleet sent: %v", reconciles(t)-before, counts)
	assert.Zero(t, counts["LIST destinationrules"], "the held fleet's passes read the rules from the cache")
	assertTemplateInject(t, h, f, "", "still held")

	lag.armed.Store(true)
	require.NoError(t, env.Client.Delete(ctx, dr))
	require.Eventually(t, func() bool {
		sts := &appsv1.StatefulSet{}
		return h.get(sts, ns, "w") == nil && sts.Spec.Template.Labels[labels.IstioInject] == "true"
	}, 5*time.Second, 50*time.Millisecond, "the rule's deletion wakes the held fleet: the members roll into the mesh")
	// The pass that applied the template writes the status last: the test
	// saw the template first and waits for the status (it failed once
	// reading it at once, under load, still MutualTLSDestinationRule).
	require.Eventually(t, func() bool {
		c := condition(t, h, f, v1alpha1.ConditionInfrastructureBlocked)
		return c != nil && c.Status == metav1.ConditionFalse
	}, 5*time.Second, 50*time.Millisecond, "the status says the hold is over")
	assertNotHeld(t, h, f)
}

// statusLag delays the status patches sent through it by lag once armed.
type statusLag struct {
	armed atomic.Bool
	lag   time.Duration
}

func (l *statusLag) wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if l.armed.Load() && req.Method == http.MethodPatch && strings.HasSuffix(req.URL.Path, "/status") {
				time.Sleep(l.lag)
			}
			return rt.RoundTrip(req)
		})
	})
	return out
}

func destinationRule(ns, name, host string, trafficPolicy map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"host": host, "trafficPolicy": trafficPolicy},
	}}
	u.SetGroupVersionKind(mesh.DestinationRuleKind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// assertMutualTLSHold: the fleet reports the hold, naming the rule, and no
// member was deleted.
func assertMutualTLSHold(t *testing.T, h *harness, f *v1alpha1.CelldFleet, rule, change string) {
	t.Helper()
	for _, typ := range []v1alpha1.ConditionType{v1alpha1.ConditionInfrastructureBlocked, v1alpha1.ConditionMeshReady} {
		c := condition(t, h, f, typ)
		if assert.NotNil(t, c, typ) {
			assert.Equal(t, string(v1alpha1.ReasonMutualTLSDestinationRule), c.Reason, "%s: %s", typ, c.Message)
			assert.Contains(t, c.Message, "DestinationRule "+rule)
			assert.Contains(t, c.Message, change+" the mesh")
			assert.Equal(t, f.Generation, c.ObservedGeneration, typ)
		}
	}
	assert.Equal(t, 0, deletedMembers(t, h.env.Client, f.Namespace, 3), "a held roll replaces no member")
}

func assertNotHeld(t *testing.T, h *harness, f *v1alpha1.CelldFleet) {
	t.Helper()
	c := condition(t, h, f, v1alpha1.ConditionInfrastructureBlocked)
	if assert.NotNil(t, c) {
		assert.Equal(t, metav1.ConditionFalse, c.Status, c.Message)
	}
	if c := condition(t, h, f, v1alpha1.ConditionMeshReady); assert.NotNil(t, c) {
		assert.NotEqual(t, string(v1alpha1.ReasonMutualTLSDestinationRule), c.Reason, c.Message)
	}
}

func assertTemplateInject(t *testing.T, h *harness, f *v1alpha1.CelldFleet, want, msg string) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, f.Namespace, f.Name))
	assert.Equal(t, want, sts.Spec.Template.Labels[labels.IstioInject], msg)
}

// deletedMembers counts the members of the namespace that are gone or
// terminating, of the want it had.
func deletedMembers(t *testing.T, c client.Client, ns string, want int) int {
	t.Helper()
	pods := &corev1.PodList{}
	require.NoError(t, c.List(context.Background(), pods, client.InNamespace(ns)))
	n := want - len(pods.Items)
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			n++
		}
	}
	return n
}
