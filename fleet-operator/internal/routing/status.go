package routing

import (
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

// Readiness is the RoutingReady condition's status, reason and message.
type Readiness struct {
	Status  metav1.ConditionStatus
	Reason  v1alpha1.ConditionReason
	Message string
}

// GatewayReadiness reads the configured parent's entry in the route status.
// Only conditions written for the route's current generation count: an
// Accepted=True left over from an older spec says nothing about this one.
func GatewayReadiness(f *v1alpha1.CelldFleet, route *gatewayv1.HTTPRoute) Readiness {
	gw := f.Spec.Routing.Gateway
	parentNS := ParentNamespace(f)
	for _, p := range route.Status.Parents {
		if !sameParent(p.ParentRef, route.Namespace, parentNS, gw.Name, gw.SectionName) {
			continue
		}
		accepted := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionAccepted))
		resolved := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionResolvedRefs))
		switch {
		case stale(accepted, route.Generation) || stale(resolved, route.Generation):
			return Readiness{metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway, fmt.Sprintf(
				"Gateway %s/%s (controller %s) has not yet reported on generation %d of HTTPRoute %s.",
				parentNS, gw.Name, p.ControllerName, route.Generation, route.Name)}
		case accepted.Status != metav1.ConditionTrue:
			return Readiness{metav1.ConditionFalse, v1alpha1.ReasonRouteNotAccepted, fmt.Sprintf(
				"Gateway %s/%s did not accept HTTPRoute %s (%s): %s", parentNS, gw.Name, route.Name, accepted.Reason, accepted.Message)}
		case resolved.Status != metav1.ConditionTrue:
			return Readiness{metav1.ConditionFalse, v1alpha1.ReasonRouteRefsNotResolved, fmt.Sprintf(
				"Gateway %s/%s cannot resolve the backend of HTTPRoute %s (%s): %s", parentNS, gw.Name, route.Name, resolved.Reason, resolved.Message)}
		default:
			return Readiness{metav1.ConditionTrue, v1alpha1.ReasonRouteAccepted, fmt.Sprintf(
				"Gateway %s/%s accepted HTTPRoute %s and resolved its backend. This does not verify DNS, certificates or a real request.",
				parentNS, gw.Name, route.Name)}
		}
	}
	return Readiness{metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway, fmt.Sprintf(
		"No status from Gateway %s/%s for HTTPRoute %s yet: check that the Gateway exists, that its listener's allowedRoutes admit namespace %s, and that its controller runs.",
		parentNS, gw.Name, route.Name, f.Namespace)}
}

func stale(c *metav1.Condition, generation int64) bool {
	return c == nil || c.ObservedGeneration < generation
}

func sameParent(ref gatewayv1.ParentReference, routeNS, ns, name, section string) bool {
	refNS := routeNS
	if ref.Namespace != nil {
		refNS = string(*ref.Namespace)
	}
	refSection := ""
	if ref.SectionName != nil {
		refSection = string(*ref.SectionName)
	}
	return string(ref.Name) == name && refNS == ns && refSection == section
}

// IngressReadiness is True once the controller published an address.
// Controllers that never publish one leave it Unknown even when traffic flows.
// Annotations left out (refused) make it False whatever the address: the
// route is served, but not as the fleet configured it.
func IngressReadiness(ing *networkingv1.Ingress, refused []string) Readiness {
	if len(refused) > 0 {
		return Readiness{metav1.ConditionFalse, v1alpha1.ReasonIngressAnnotationRefused, fmt.Sprintf(
			"spec.routing.ingress.annotations %s are not among the keys the operator may write (chart value routing.allowedIngressAnnotations, flag --allowed-ingress-annotations): Ingress %s is written without them. Remove them from the fleet, or ask the operator's administrator to allow them; the operator writes annotations with its own rights (docs/security.md). The members are not affected.",
			strings.Join(refused, ", "), ing.Name)}
	}
	var addrs []string
	for _, lb := range ing.Status.LoadBalancer.Ingress {
		if lb.Hostname != "" {
			addrs = append(addrs, lb.Hostname)
		} else if lb.IP != "" {
			addrs = append(addrs, lb.IP)
		}
	}
	if len(addrs) == 0 {
		return Readiness{metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress, fmt.Sprintf(
			"Ingress %s has no address yet; some controllers never publish one, so this can stay Unknown even when traffic works.", ing.Name)}
	}
	return Readiness{metav1.ConditionTrue, v1alpha1.ReasonAddressAssigned, fmt.Sprintf(
		"Ingress %s has address %s. This does not verify DNS, certificates or a real request.", ing.Name, strings.Join(addrs, ", "))}
}
