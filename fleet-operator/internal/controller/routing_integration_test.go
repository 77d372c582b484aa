//go:build integration

package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestRoutingChangesKeepTheWorkingRoute: on an API server without the
// Gateway API, a routing change never leaves the fleet without the route it
// had, and routing goes on whatever the fleet's Services hit.
func TestRoutingChangesKeepTheWorkingRoute(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	ctx := context.Background()
	createNamespace(t, env.Client, "reroute")
	h := newHarness(t, env, true)

	t.Run("switching Ingress to Gateway without the Gateway API keeps the Ingress", func(t *testing.T) {
		f := routingFleet("reroute", "sw", ingressRouting())
		require.NoError(t, env.Client.Create(ctx, f))
		assertRouting(t, routingCondition(t, h, f), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress)
		require.NoError(t, h.get(&networkingv1.Ingress{}, "reroute", "sw-routing"))

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"routing":{"ingress":null,"gateway":{"name":"public","namespace":"edge"}}}}`))))
		c := routingCondition(t, h, f)
		assertRouting(t, c, metav1.ConditionFalse, v1alpha1.ReasonGatewayAPIUnavailable)
		assert.Contains(t, c.Message, "Ingress sw-routing")
		require.NoError(t, h.get(&networkingv1.Ingress{}, "reroute", "sw-routing"), "the working route stays until the new one can be written")
		require.NoError(t, h.get(&networkingv1.NetworkPolicy{}, "reroute", "sw-routing"), "and so does the policy that admits its traffic")
	})

	t.Run("a foreign Service with the fleet's name does not stop a routing change", func(t *testing.T) {
		f := routingFleet("reroute", "svc", ingressRouting())
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		require.NoError(t, h.get(&networkingv1.Ingress{}, "reroute", "svc-routing"))

		// Someone replaces the fleet's Service with one of their own.
		require.NoError(t, env.Client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "reroute", Name: "svc"}}))
		require.NoError(t, env.Client.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "reroute", Name: "svc"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}))
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"routing":{"hostnames":["moved.example.com"]}}}`))))
		h.reconcile(f)

		require.NoError(t, h.get(f, "reroute", "svc"))
		blocked := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
		require.NotNil(t, blocked)
		assert.Equal(t, string(v1alpha1.ReasonOwnershipConflict), blocked.Reason, "the collision is still reported")
		ing := &networkingv1.Ingress{}
		require.NoError(t, h.get(ing, "reroute", "svc-routing"))
		require.Len(t, ing.Spec.Rules, 1)
		assert.Equal(t, "moved.example.com", ing.Spec.Rules[0].Host, "the routing change is applied")
		c := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionRoutingReady))
		require.NotNil(t, c)
		assert.Equal(t, f.Generation, c.ObservedGeneration, "RoutingReady judges the changed route: %s", c.Message)
	})
}

// TestIngressAnnotationsOutsideTheAllowedPatterns: the operator writes only
// the annotations --allowed-ingress-annotations allows, removes one it wrote
// once the patterns no longer allow it, and says which keys it left out.
func TestIngressAnnotationsOutsideTheAllowedPatterns(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	ctx := context.Background()
	createNamespace(t, env.Client, "annotated")
	h := newHarness(t, env, true)

	f := routingFleet("annotated", "shop", ingressRouting())
	require.NoError(t, env.Client.Create(ctx, f))
	assertRouting(t, routingCondition(t, h, f), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress)
	ing := &networkingv1.Ingress{}
	require.NoError(t, h.get(ing, "annotated", "shop-routing"))
	require.Equal(t, "8m", ing.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"], "the harness allows every key (the flag's default)")

	// The administrator narrows the patterns (the operator restarts with a
	// new chart value); an ingress controller has annotated the Ingress.
	ing.Annotations["ingress.example.com/last-sync"] = "now"
	require.NoError(t, env.Client.Update(ctx, ing, client.FieldOwner("ingress-controller")))
	h.r.Config.AllowedIngressAnnotations = []string{"cert-manager.io/*"}
	c := routingCondition(t, h, f)
	assertRouting(t, c, metav1.ConditionFalse, v1alpha1.ReasonIngressAnnotationRefused)
	assert.Contains(t, c.Message, "nginx.ingress.kubernetes.io/proxy-body-size")
	assert.NotContains(t, c.Message, "cert-manager.io/cluster-issuer")
	require.NoError(t, h.get(ing, "annotated", "shop-routing"))
	assert.NotContains(t, ing.Annotations, "nginx.ingress.kubernetes.io/proxy-body-size", "the operator wrote it, and no longer may: it is removed")
	assert.Equal(t, "letsencrypt", ing.Annotations["cert-manager.io/cluster-issuer"], "allowed keys are written")
	assert.Equal(t, "now", ing.Annotations["ingress.example.com/last-sync"], "what the operator did not write is not its to remove")
	require.NoError(t, h.get(&appsv1.StatefulSet{}, "annotated", "shop"), "the members are not affected")

	// The fleet author drops the refused key: routing is judged as usual.
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"routing":{"ingress":{"annotations":{"nginx.ingress.kubernetes.io/proxy-body-size":null}}}}}`))))
	assertRouting(t, routingCondition(t, h, f), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress)

	// An empty list allows no key at all.
	h.r.Config.AllowedIngressAnnotations = []string{}
	c = routingCondition(t, h, f)
	assertRouting(t, c, metav1.ConditionFalse, v1alpha1.ReasonIngressAnnotationRefused)
	assert.Contains(t, c.Message, "cert-manager.io/cluster-issuer")
	require.NoError(t, h.get(ing, "annotated", "shop-routing"))
	assert.NotContains(t, ing.Annotations, "cert-manager.io/cluster-issuer")
}

// TestRoutingSwitchRefusedByAdmissionKeepsTheIngress (issue 42 item 7): with
// the Gateway API served, a policy engine refuses the fleet operator's
// HTTPRoutes. Switching the fleet from Ingress to Gateway must keep the
// working Ingress (and the policy that admits its traffic) and report the
// refusal; once the policy is gone the switch completes.
func TestRoutingSwitchRefusedByAdmissionKeepsTheIngress(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, testenv.ModuleFile(t, "sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard"))
	ctx := context.Background()
	createNamespace(t, env.Client, "refroute")
	h := newHarness(t, env, true)
	h.actAsOperator()

	f := routingFleet("refroute", "sw", ingressRouting())
	require.NoError(t, env.Client.Create(ctx, f))
	assertRouting(t, routingCondition(t, h, f), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress)
	require.NoError(t, h.get(&networkingv1.Ingress{}, "refroute", "sw-routing"))

	msg, allow := denyOperatorWrites(t, env, "refroute", "no-httproutes", "gateway.networking.k8s.io", "httproutes", "true", func(c client.Client) error {
		probe := policy(routing.HTTPRouteGVK)
		probe.SetNamespace("refroute")
		probe.SetName("probe")
		// Valid, so that only the policy can refuse it (the schema is
		// checked before admission).
		probe.Object["spec"] = map[string]any{"parentRefs": []any{map[string]any{"name": "public", "namespace": "edge"}}}
		return c.Create(ctx, probe, client.DryRunAll)
	})
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
		[]byte(`{"spec":{"routing":{"ingress":null,"gateway":{"name":"public","namespace":"edge"}}}}`))))
	c := routingCondition(t, h, f)
	assertRouting(t, c, metav1.ConditionFalse, v1alpha1.ReasonRouteRejected)
	assert.Contains(t, c.Message, msg, "the API server's answer is quoted")
	require.NoError(t, h.get(&networkingv1.Ingress{}, "refroute", "sw-routing"), "the working route stays until the new one can be written")
	require.NoError(t, h.get(&networkingv1.NetworkPolicy{}, "refroute", "sw-routing"), "and so does the policy that admits its traffic")

	allow()
	require.Eventually(t, func() bool {
		c := routingCondition(t, h, f)
		return c != nil && c.Reason == string(v1alpha1.ReasonAwaitingGateway)
	}, 30*time.Second, time.Second, "the switch completes once the HTTPRoute is admitted")
	require.NoError(t, h.get(policy(routing.HTTPRouteGVK), "refroute", "sw-routing"))
	assert.True(t, apierrors.IsNotFound(h.get(&networkingv1.Ingress{}, "refroute", "sw-routing")), "the old route is gone")
}
