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
	ingress, _ := IngressObject(ing, AllowAll)
	golden.AssertYAML(t, "ingress", ingress, NetworkPolicy(ing, false), NetworkPolicy(ing, true))
	plain := ingressRouting()
	plain.Ingress.TLSSecretName, plain.Ingress.Annotations = "", nil
	httpOnly, _ := IngressObject(fleet(plain), AllowAll)
	golden.AssertYAML(t, "ingress-http-only", httpOnly)
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
	pending := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "shop-routing"}}
	published := pending.DeepCopy()
	published.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{Hostname: "lb.example.com"}}
	tests := []struct {
		name     string
		ing      *networkingv1.Ingress
		refused  []string
		status   metav1.ConditionStatus
		reason   v1alpha1.ConditionReason
		contains []string
	}{
		{"no address yet", pending, nil, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress, nil},
		{"address published", published, nil, metav1.ConditionTrue, v1alpha1.ReasonAddressAssigned, []string{"lb.example.com"}},
		// An address says the controller serves the route, not that it
		// serves it as configured: the refused keys are missing from it.
		{"refused annotations, with an address", published, []string{"a.example.com/x", "b.example.com/y"}, metav1.ConditionFalse, v1alpha1.ReasonIngressAnnotationRefused,
			[]string{"a.example.com/x, b.example.com/y", "routing.allowedIngressAnnotations", "without them"}},
		{"refused annotations, no address", pending, []string{"a.example.com/x"}, metav1.ConditionFalse, v1alpha1.ReasonIngressAnnotationRefused, []string{"a.example.com/x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := IngressReadiness(tc.ing, tc.refused)
			assert.Equal(t, tc.status, got.Status, got.Message)
			assert.Equal(t, tc.reason, got.Reason)
			for _, s := range tc.contains {
				assert.Contains(t, got.Message, s)
			}
		})
	}
}

func TestAnnotationPolicy(t *testing.T) {
	tests := []struct {
		patterns []string
		key      string
		allowed  bool
	}{
		{[]string{"*"}, "cert-manager.io/cluster-issuer", true},
		{[]string{"*"}, "nginx.ingress.kubernetes.io/proxy-body-size", true},
		{nil, "cert-manager.io/cluster-issuer", false},
		{[]string{}, "cert-manager.io/cluster-issuer", false},
		{[]string{"cert-manager.io/*"}, "cert-manager.io/cluster-issuer", true},
		{[]string{"cert-manager.io/*"}, "evil.cert-manager.io/cluster-issuer", false},
		{[]string{"cert-manager.io/*"}, "nginx.ingress.kubernetes.io/proxy-body-size", false},
		{[]string{"*.example.com/*"}, "a.b.example.com/x", true},
		{[]string{"nginx.ingress.kubernetes.io/proxy-body-size"}, "nginx.ingress.kubernetes.io/proxy-body-size", true},
		{[]string{"nginx.ingress.kubernetes.io/proxy-body-size"}, "nginx.ingress.kubernetes.io/proxy-body-sizes", false},
		{[]string{"a.b/c"}, "aXb/c", false},
		// The families the fleet schema refuses stay refused whatever the
		// patterns say: a fleet admitted under an older schema must not
		// get them written either.
		{[]string{"*"}, "nginx.ingress.kubernetes.io/configuration-snippet", false},
		{[]string{"nginx.ingress.kubernetes.io/*"}, "nginx.ingress.kubernetes.io/server-snippet", false},
		{[]string{"*"}, "nginx.ingress.kubernetes.io/auth-url", false},
		{[]string{"*"}, "nginx.ingress.kubernetes.io/auth-signin", false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.allowed, AnnotationPolicy(tc.patterns).Allows(tc.key), "%v allows %s", tc.patterns, tc.key)
	}
}

func TestIngressObjectWritesOnlyAllowedAnnotations(t *testing.T) {
	r := ingressRouting()
	r.Ingress.Annotations["nginx.ingress.kubernetes.io/rewrite-target"] = "/"
	r.Ingress.Annotations["example.com/a"] = "1"
	ing, refused := IngressObject(fleet(r), AnnotationPolicy{"cert-manager.io/*"})
	assert.Equal(t, map[string]string{"cert-manager.io/cluster-issuer": "letsencrypt"}, ing.Annotations)
	assert.Equal(t, []string{"example.com/a", "nginx.ingress.kubernetes.io/rewrite-target"}, refused, "sorted, so the message is stable")
	assert.Len(t, r.Ingress.Annotations, 3, "the spec is not changed")

	ing, refused = IngressObject(fleet(r), AllowAll)
	assert.Len(t, ing.Annotations, 3)
	assert.Empty(t, refused)
}
