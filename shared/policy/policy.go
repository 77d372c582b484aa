// Package policy holds the pieces both operators build their traffic
// policies from: Kubernetes NetworkPolicy peers and ports, and Istio
// AuthorizationPolicy and PeerAuthentication objects with their rules. The
// operators compose whole policies from these in their own builders; what a
// piece means on the wire (which identity a principal names, which label
// selects a namespace, which port ztunnel uses) is decided once, here.
package policy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Istio's security API, which both operators write.
var IstioSecurity = schema.GroupVersion{Group: "security.istio.io", Version: "v1"}

// Kinds of the Istio security API.
const (
	KindAuthorizationPolicy = "AuthorizationPolicy"
	KindPeerAuthentication  = "PeerAuthentication"
)

// HBONEPort is where ztunnel carries ambient-mesh traffic between Pods; the
// CNI sees this port, not the application's, on both ends.
const HBONEPort = 15008

// AmbientProbeSourceCIDR is the link-local address istio-cni rewrites the
// kubelet's probes of ambient Pods to come from, so ztunnel can tell them
// apart; CNIs that apply NetworkPolicy to node-originated traffic then need
// it admitted on the probed port.
const AmbientProbeSourceCIDR = "169.254.7.127/32"

// Actions and mTLS modes as Istio spells them.
const (
	Allow      = "ALLOW"
	Deny       = "DENY"
	Strict     = "STRICT"
	Permissive = "PERMISSIVE"
)

// --- NetworkPolicy pieces ---

// NamespaceNamed selects exactly one namespace by the label the API server
// sets to each namespace's name and that users cannot change.
func NamespaceNamed(namespace string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{labels.NamespaceName: namespace}}
}

// Port is one NetworkPolicy port.
func Port(protocol corev1.Protocol, number int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(protocol), Port: ptr.To(intstr.FromInt32(number))}
}

// TCPPorts is a NetworkPolicy port list of TCP ports.
func TCPPorts(numbers ...int32) []networkingv1.NetworkPolicyPort {
	out := make([]networkingv1.NetworkPolicyPort, 0, len(numbers))
	for _, n := range numbers {
		out = append(out, Port(corev1.ProtocolTCP, n))
	}
	return out
}

// --- Istio pieces ---

// Principal is the SPIFFE-derived identity Istio gives a ServiceAccount, as
// AuthorizationPolicy rules name it.
func Principal(trustDomain, namespace, serviceAccount string) string {
	return fmt.Sprintf("%s/ns/%s/sa/%s", trustDomain, namespace, serviceAccount)
}

// Source is the from.source of an AuthorizationPolicy rule; every field set
// must match. Principals and namespaces match only mTLS peers; notPrincipals
// also matches plaintext, which has no principal.
type Source struct {
	Principals, NotPrincipals, Namespaces, NotNamespaces []string
}

// Rule is one AuthorizationPolicy rule: any of From (none: any source) and
// any of Ports (none: any port).
type Rule struct {
	From  []Source
	Ports []int
}

func (r Rule) object() map[string]any {
	out := map[string]any{}
	if len(r.From) > 0 {
		from := make([]any, 0, len(r.From))
		for _, s := range r.From {
			src := map[string]any{}
			for key, values := range map[string][]string{
				"principals": s.Principals, "notPrincipals": s.NotPrincipals,
				"namespaces": s.Namespaces, "notNamespaces": s.NotNamespaces,
			} {
				if len(values) > 0 {
					src[key] = strings(values)
				}
			}
			from = append(from, map[string]any{"source": src})
		}
		out["from"] = from
	}
	if len(r.Ports) > 0 {
		ports := make([]string, 0, len(r.Ports))
		for _, p := range r.Ports {
			ports = append(ports, strconv.Itoa(p))
		}
		out["to"] = []any{map[string]any{"operation": map[string]any{"ports": strings(ports)}}}
	}
	return out
}

// Object is the identity of a policy object: where it lives, its labels
// and its controller.
type Object struct {
	Namespace, Name string
	Labels          map[string]string
	Owner           metav1.OwnerReference
}

// AuthorizationPolicy builds an AuthorizationPolicy. A nil selector makes it
// namespace-wide. An ALLOW without rules admits nothing: it makes every
// request to the workloads it selects need another ALLOW that matches.
func AuthorizationPolicy(o Object, selector map[string]string, action string, rules ...Rule) *unstructured.Unstructured {
	spec := map[string]any{"action": action}
	if selector != nil {
		spec["selector"] = matchLabels(selector)
	}
	if len(rules) > 0 {
		list := make([]any, 0, len(rules))
		for _, r := range rules {
			list = append(list, r.object())
		}
		spec["rules"] = list
	}
	return o.istio(KindAuthorizationPolicy, spec)
}

// PeerAuthentication builds a PeerAuthentication: with a nil selector the
// namespace-wide mode; with a selector, mode (may be empty: inherit) and
// per-port modes, which Istio honours only for selected workloads.
func PeerAuthentication(o Object, selector map[string]string, mode string, portModes map[int]string) *unstructured.Unstructured {
	spec := map[string]any{}
	if selector != nil {
		spec["selector"] = matchLabels(selector)
	}
	if mode != "" {
		spec["mtls"] = map[string]any{"mode": mode}
	}
	if len(portModes) > 0 {
		ports := map[string]any{}
		for _, p := range slices.Sorted(maps.Keys(portModes)) {
			ports[strconv.Itoa(p)] = map[string]any{"mode": portModes[p]}
		}
		spec["portLevelMtls"] = ports
	}
	return o.istio(KindPeerAuthentication, spec)
}

func (o Object) istio(kind string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(IstioSecurity.WithKind(kind))
	u.SetNamespace(o.Namespace)
	u.SetName(o.Name)
	u.SetLabels(maps.Clone(o.Labels))
	u.SetOwnerReferences([]metav1.OwnerReference{o.Owner})
	return u
}

func matchLabels(selector map[string]string) map[string]any {
	m := make(map[string]any, len(selector))
	for k, v := range selector {
		m[k] = v
	}
	return map[string]any{"matchLabels": m}
}

func strings(values []string) []any {
	out := make([]any, 0, len(values))
	for _, v := range values {
		out = append(out, v)
	}
	return out
}
