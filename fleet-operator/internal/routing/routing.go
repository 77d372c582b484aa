// Package routing builds a fleet's optional application route, a Gateway API
// HTTPRoute or an Ingress named FLEET-routing, and the FLEET-routing
// NetworkPolicy that admits the routed traffic, and reads the route's status
// into an honest RoutingReady condition.
package routing

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/policy"
)

// Mode is how a fleet is routed.
type Mode string

const (
	None    Mode = ""
	Gateway Mode = "Gateway"
	Ingress Mode = "Ingress"
)

// ModeOf is the routing mode the spec asks for.
func ModeOf(f *v1alpha1.CelldFleet) Mode {
	switch {
	case f.Spec.Routing == nil:
		return None
	case f.Spec.Routing.Gateway != nil:
		return Gateway
	default:
		return Ingress
	}
}

// HTTPRouteGVK is the Gateway API kind the fleet operator writes.
var HTTPRouteGVK = schema.GroupVersionKind{Group: gatewayv1.GroupVersion.Group, Version: gatewayv1.GroupVersion.Version, Kind: "HTTPRoute"}

// ParentNamespace is the Gateway's namespace (the fleet's when unset).
func ParentNamespace(f *v1alpha1.CelldFleet) string {
	if ns := f.Spec.Routing.Gateway.Namespace; ns != "" {
		return ns
	}
	return f.Namespace
}

// HTTPRoute sends every path of the hostnames to the fleet Service on 8080.
// The backend is always in the fleet namespace: no ReferenceGrant is needed
// and a route can never point at another namespace's Service.
func HTTPRoute(f *v1alpha1.CelldFleet) *gatewayv1.HTTPRoute {
	r := f.Spec.Routing
	parent := gatewayv1.ParentReference{
		Group:     ptr.To(gatewayv1.Group(gatewayv1.GroupName)),
		Kind:      ptr.To(gatewayv1.Kind("Gateway")),
		Name:      gatewayv1.ObjectName(r.Gateway.Name),
		Namespace: ptr.To(gatewayv1.Namespace(ParentNamespace(f))),
	}
	if r.Gateway.SectionName != "" {
		parent.SectionName = ptr.To(gatewayv1.SectionName(r.Gateway.SectionName))
	}
	hostnames := make([]gatewayv1.Hostname, 0, len(r.Hostnames))
	for _, h := range r.Hostnames {
		hostnames = append(hostnames, gatewayv1.Hostname(h))
	}
	return &gatewayv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: objectMeta(f, nil),
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{parent}},
			Hostnames:       hostnames,
			Rules: []gatewayv1.HTTPRouteRule{{
				Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{
					Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To("/"),
				}}},
				BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{
					Group: ptr.To(gatewayv1.Group("")),
					Kind:  ptr.To(gatewayv1.Kind("Service")),
					Name:  gatewayv1.ObjectName(names.AppService(f.Name)),
					Port:  ptr.To(gatewayv1.PortNumber(names.AppPort)),
				}}}},
			}},
		},
	}
}

// AnnotationPolicy holds the glob patterns of the Ingress annotation keys
// the operator writes: '*' matches any run of characters ('/' and '.'
// included), everything else itself. No pattern allows nothing.
type AnnotationPolicy []string

// AllowAll is the operator's default (--allowed-ingress-annotations=*).
var AllowAll = AnnotationPolicy{"*"}

// Allows reports whether the operator writes the key. The families the
// fleet schema refuses (alwaysRefused) are never allowed: a fleet admitted
// under an older schema, or with validation off, must not get them either.
func (p AnnotationPolicy) Allows(key string) bool {
	if alwaysRefused(key) {
		return false
	}
	for _, pattern := range p {
		if globMatch(pattern, key) {
			return true
		}
	}
	return false
}

// alwaysRefused mirrors the CEL rules on IngressRouting.Annotations.
func alwaysRefused(key string) bool {
	return strings.HasSuffix(key, labels.IngressAnnotationSnippetSuffix) || key == labels.NginxAuthURL || key == labels.NginxAuthSignin
}

// globMatch matches s against a pattern whose only wildcard is '*'.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, part := range parts[1 : len(parts)-1] {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// IngressObject routes every path of the hostnames to the fleet Service on
// 8080, with TLS for all of them when a Secret is named. It carries the
// configured annotations the policy allows; refused lists, sorted, those it
// does not.
func IngressObject(f *v1alpha1.CelldFleet, allowed AnnotationPolicy) (ing *networkingv1.Ingress, refused []string) {
	r := f.Spec.Routing
	backend := networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
		Name: names.AppService(f.Name), Port: networkingv1.ServiceBackendPort{Number: names.AppPort},
	}}
	annotations := maps.Clone(r.Ingress.Annotations)
	for k := range annotations {
		if !allowed.Allows(k) {
			delete(annotations, k)
			refused = append(refused, k)
		}
	}
	slices.Sort(refused)
	if len(annotations) == 0 {
		annotations = nil
	}
	ing = &networkingv1.Ingress{
		TypeMeta:   metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "Ingress"},
		ObjectMeta: objectMeta(f, annotations),
		Spec:       networkingv1.IngressSpec{IngressClassName: ptr.To(r.Ingress.ClassName)},
	}
	for _, h := range r.Hostnames {
		ing.Spec.Rules = append(ing.Spec.Rules, networkingv1.IngressRule{
			Host: h,
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: ptr.To(networkingv1.PathTypePrefix), Backend: backend,
			}}}},
		})
	}
	if r.Ingress.TLSSecretName != "" {
		ing.Spec.TLS = []networkingv1.IngressTLS{{Hosts: slices.Clone(r.Hostnames), SecretName: r.Ingress.TLSSecretName}}
	}
	return ing, refused
}

// NetworkPolicy admits TCP 8080 to the members from the routing source Pods
// and nothing else. It is separate from the fleet policy, which stays as it
// is: the peer port is never reachable through routing.
//
// In an ambient mesh the same source also reaches HBONE 15008, where ztunnel
// delivers its traffic.
func NetworkPolicy(f *v1alpha1.CelldFleet, hbone bool) *networkingv1.NetworkPolicy {
	src := f.Spec.Routing.Source
	ports := policy.TCPPorts(names.AppPort)
	if hbone {
		ports = append(ports, policy.Port(corev1.ProtocolTCP, policy.HBONEPort))
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(f, nil),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: names.Selector(f.Name)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: ports,
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: policy.NamespaceNamed(src.Namespace),
					PodSelector:       &metav1.LabelSelector{MatchLabels: labelMap(src.PodLabels)},
				}},
			}},
		},
	}
}

func objectMeta(f *v1alpha1.CelldFleet, annotations map[string]string) metav1.ObjectMeta {
	m := names.ObjectMeta(f, names.Routing(f.Name))
	m.Annotations = annotations
	return m
}

func labelMap(in map[string]v1alpha1.LabelValue) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = string(v)
	}
	return out
}
