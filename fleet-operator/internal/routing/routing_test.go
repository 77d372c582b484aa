package routing

import (
	"testing"

	"github.com/stretchr/testify/assert"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/golden"
)

func fleet(r *v1alpha1.Routing) *v1alpha1.CelldFleet {
	return &v1alpha1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "fleets", UID: "11111111-2222-3333-4444-555555555555"},
		Spec:       v1alpha1.CelldFleetSpec{Image: "celld:1", Routing: r},
	}
}

func gatewayRouting() *v1alpha1.Routing {
	return &v1alpha1.Routing{
		Hostnames: []string{"app.example.com", "*.shop.example.com"},
		Gateway:   &v1alpha1.GatewayRouting{Name: "public", Namespace: "edge", SectionName: "https"},
		Source:    v1alpha1.RoutingSource{Namespace: "edge", PodLabels: map[string]v1alpha1.LabelValue{"app": "public-gateway"}},
	}
}

func ingressRouting() *v1alpha1.Routing {
	return &v1alpha1.Routing{
		Hostnames: []string{"app.example.com", "api.example.com"},
		Ingress: &v1alpha1.IngressRouting{ClassName: "nginx", TLSSecretName: "app-tls",
			Annotations: map[string]string{"cert-manager.io/cluster-issuer": "letsencrypt"}},
		Source: v1alpha1.RoutingSource{Namespace: "ingress-nginx", PodLabels: map[string]v1alpha1.LabelValue{"app.kubernetes.io/component": "controller"}},
	}
}

func TestGolden(t *testing.T) {
	gw := fleet(gatewayRouting())
	golden.AssertYAML(t, "gateway", HTTPRoute(gw), NetworkPolicy(gw, false))
	ing := fleet(ingressRouting())
	golden.AssertYAML(t, "ingress", IngressObject(ing), NetworkPolicy(ing, false), NetworkPolicy(ing, true))
	plain := ingressRouting()
	plain.Ingress.TLSSecretName, plain.Ingress.Annotations = "", nil
	golden.AssertYAML(t, "ingress-http-only", IngressObject(fleet(plain)))
}

func TestModeAndParent(t *testing.T) {
	assert.Equal(t, None, ModeOf(fleet(nil)))
	assert.Equal(t, Gateway, ModeOf(fleet(gatewayRouting())))
	assert.Equal(t, Ingress, ModeOf(fleet(ingressRouting())))
	local := gatewayRouting()
	local.Gateway.Namespace = ""
	assert.Equal(t, "fleets", ParentNamespace(fleet(local)), "a Gateway without namespace is in the fleet's")
	route := HTTPRoute(fleet(local))
	assert.Equal(t, "fleets", string(*route.Spec.ParentRefs[0].Namespace))
	assert.Nil(t, route.Spec.Rules[0].BackendRefs[0].Namespace, "the backend is always in the fleet namespace")
}

func cond(t string, s metav1.ConditionStatus, gen int64) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, ObservedGeneration: gen, Reason: "R", Message: "m"}
}

func TestGatewayReadiness(t *testing.T) {
	f := fleet(gatewayRouting())
	parent := gatewayv1.ParentReference{Name: "public", Namespace: ptr.To(gatewayv1.Namespace("edge")), SectionName: ptr.To(gatewayv1.SectionName("https"))}
	otherListener := gatewayv1.ParentReference{Name: "public", Namespace: ptr.To(gatewayv1.Namespace("edge")), SectionName: ptr.To(gatewayv1.SectionName("http"))}
	status := func(ref gatewayv1.ParentReference, conds ...metav1.Condition) *gatewayv1.HTTPRoute {
		r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "shop-routing", Namespace: "fleets", Generation: 3}}
		r.Status.Parents = []gatewayv1.RouteParentStatus{{ParentRef: ref, ControllerName: "example.com/gw", Conditions: conds}}
		return r
	}
	tests := []struct {
		name   string
		route  *gatewayv1.HTTPRoute
		status metav1.ConditionStatus
		reason v1alpha1.ConditionReason
	}{
		{"no parent status yet", &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "shop-routing", Generation: 1}}, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway},
		{"another listener's status does not count", status(otherListener, cond("Accepted", "True", 3), cond("ResolvedRefs", "True", 3)), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway},
		{"old generation", status(parent, cond("Accepted", "True", 2), cond("ResolvedRefs", "True", 2)), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway},
		{"accepted is current but refs old", status(parent, cond("Accepted", "True", 3), cond("ResolvedRefs", "True", 2)), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway},
		{"not accepted", status(parent, cond("Accepted", "False", 3), cond("ResolvedRefs", "True", 3)), metav1.ConditionFalse, v1alpha1.ReasonRouteNotAccepted},
		{"refs not resolved", status(parent, cond("Accepted", "True", 3), cond("ResolvedRefs", "False", 3)), metav1.ConditionFalse, v1alpha1.ReasonRouteRefsNotResolved},
		{"accepted and resolved", status(parent, cond("Accepted", "True", 3), cond("ResolvedRefs", "True", 3)), metav1.ConditionTrue, v1alpha1.ReasonRouteAccepted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := GatewayReadiness(f, tc.route)
			assert.Equal(t, tc.status, got.Status, got.Message)
			assert.Equal(t, tc.reason, got.Reason)
		})
	}
}

func TestIngressReadiness(t *testing.T) {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "shop-routing"}}
	got := IngressReadiness(ing)
	assert.Equal(t, metav1.ConditionUnknown, got.Status)
	assert.Equal(t, v1alpha1.ReasonAwaitingAddress, got.Reason)
	ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{Hostname: "lb.example.com"}}
	got = IngressReadiness(ing)
	assert.Equal(t, metav1.ConditionTrue, got.Status)
	assert.Contains(t, got.Message, "lb.example.com")
}
