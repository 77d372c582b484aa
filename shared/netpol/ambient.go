package netpol

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ericdev/fleetmesh/shared/policy"
)

// Namespace is a namespace as a namespaceSelector sees it.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// AmbientRefusal is one set of a namespace's Pods (those the same policies
// isolate for ingress) that ambient capture would cut off.
type AmbientRefusal struct {
	// Policies are the namespace/name of the NetworkPolicies that isolate
	// those Pods for ingress, sorted.
	Policies []string
	// HBONE names a meshed peer the policies admit on some port but refuse
	// on TCP 15008, where ztunnel delivers its traffic once both ends are
	// captured ("": none).
	HBONE string
	// Probe: the policies admit the kubelet's probe address of ambient
	// Pods (169.254.7.127) on no port, so every probe fails.
	Probe bool
}

func (r AmbientRefusal) String() string {
	var what []string
	if r.HBONE != "" {
		what = append(what, fmt.Sprintf("refuses TCP %d (HBONE) from %s, which it admits on other ports", policy.HBONEPort, r.HBONE))
	}
	if r.Probe {
		what = append(what, fmt.Sprintf("admits the probe address %s on no port", policy.AmbientProbeSourceCIDR))
	}
	return fmt.Sprintf("NetworkPolicy %s %s", strings.Join(r.Policies, ", "), strings.Join(what, " and "))
}

// Addresses the ambient check puts on its hypothetical Pods; any address
// serves (an ipBlock peer is never taken for a meshed peer, below), these
// are documentation addresses no cluster uses.
const (
	ambientTargetIP = "198.51.100.1"
	ambientSourceIP = "198.51.100.2"
)

// Ambient reports what the NetworkPolicies of namespace ns (its whole
// list) would cut off once ambient captures its Pods, judged by cyclonus
// (as Judge judges) on hypothetical Pods, since a namespace may be enrolled before
// any Pod runs:
//
//   - the Pods each ingress-isolating policy selects are represented by one
//     Pod carrying labels its podSelector requires (a selector no Pod can
//     satisfy selects nothing and is skipped);
//   - HBONE: after capture a meshed caller reaches any port of the Pod on
//     TCP 15008, so every in-cluster peer a rule of the namespace's policies
//     names is a caller (a rule without `from` stands for Pods of every
//     meshed namespace; a namespaceSelector for Pods of the meshed
//     namespaces it matches; a podSelector alone for Pods of ns); a caller
//     admitted on some port must be admitted on 15008 as well, by ingress
//     and, for callers in ns, by their own egress. ipBlock peers are not
//     taken for meshed Pods: an address outside the cluster arrives as it
//     did. Only meshed namespaces' callers matter: the others keep
//     reaching the application port (until STRICT refuses plaintext);
//   - probes: the kubelet's probes of a captured Pod come from
//     169.254.7.127, which must be admitted on at least one port (probed
//     ports are the Pods' own business and a namespace may have none yet;
//     the fleet operator admits it on exactly the port it probes).
//
// meshed lists the namespaces whose Pods are (or will be) captured, with
// the labels they carry then; ns itself is taken as meshed. Egress to
// other namespaces on 15008 is not judged here.
func Ambient(ns Namespace, list []networkingv1.NetworkPolicy, meshed []Namespace) ([]AmbientRefusal, error) {
	var ingress []*networkingv1.NetworkPolicy
	for i := range list {
		if p := withPolicyTypes(&list[i]); slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			ingress = append(ingress, p)
		}
	}
	if len(ingress) == 0 {
		return nil, nil
	}
	n, err := New(list)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(meshed, func(m Namespace) bool { return m.Name == ns.Name }) {
		meshed = append([]Namespace{ns}, meshed...)
	}
	ports := ambientPorts(ingress)
	sources := ambientSources(ns, ingress, meshed)
	probe := Endpoint{IP: strings.TrimSuffix(policy.AmbientProbeSourceCIDR, "/32")}

	byPolicies := map[string]*AmbientRefusal{}
	for _, p := range ingress {
		podLabels, ok := representative(&p.Spec.PodSelector)
		if !ok {
			continue
		}
		dst := Endpoint{Namespace: ns.Name, NamespaceLabels: ns.Labels, Labels: podLabels, IP: ambientTargetIP}
		isolating := isolatingPolicies(ingress, podLabels)
		key := strings.Join(isolating, ",")
		if _, seen := byPolicies[key]; seen {
			continue
		}
		r := AmbientRefusal{Policies: isolating}
		admitted, err := n.admittedOnSome(probe, dst, ports)
		if err != nil {
			return nil, err
		}
		r.Probe = !admitted
		for _, src := range sources {
			if admitted, err := n.admittedOnSome(src.Endpoint, dst, ports); err != nil {
				return nil, err
			} else if !admitted {
				continue
			}
			in, out, err := n.allows(src.Endpoint, dst, policy.HBONEPort, "", corev1.ProtocolTCP)
			if err != nil {
				return nil, err
			}
			if !in {
				r.HBONE = src.what
				break
			}
			if !out {
				r.HBONE = src.what + " (by their own egress policies)"
				break
			}
		}
		byPolicies[key] = &r
	}
	var out []AmbientRefusal
	for _, k := range slices.Sorted(maps.Keys(byPolicies)) {
		if r := byPolicies[k]; r.HBONE != "" || r.Probe {
			out = append(out, *r)
		}
	}
	return out, nil
}

// admittedOnSome: src reaches dst on one of ports.
func (n *Policies) admittedOnSome(src, dst Endpoint, ports []networkingv1.NetworkPolicyPort) (bool, error) {
	for _, p := range ports {
		number, name := 0, ""
		if p.Port.Type == intstr.Int {
			number = int(p.Port.IntVal)
		} else {
			name = p.Port.StrVal
		}
		if in, out, err := n.allows(src, dst, number, name, corev1.ProtocolTCP); err != nil || (in && out) {
			return err == nil, err
		}
	}
	return false, nil
}

// ambientPorts are the TCP ports other than 15008 the policies' ingress
// rules name (a range by its first port), and one port no rule names, for
// the rules that name none (they admit every port).
func ambientPorts(policies []*networkingv1.NetworkPolicy) []networkingv1.NetworkPolicyPort {
	seen := map[string]bool{}
	out := []networkingv1.NetworkPolicyPort{}
	add := func(p networkingv1.NetworkPolicyPort) {
		if k := p.Port.String(); !seen[k] {
			seen[k] = true
			out = append(out, p)
		}
	}
	for _, np := range policies {
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) {
					continue
				}
				if p.Port.Type == intstr.Int && p.Port.IntVal == policy.HBONEPort {
					continue
				}
				add(networkingv1.NetworkPolicyPort{Port: p.Port})
			}
		}
	}
	for unnamed := int32(1); ; unnamed++ {
		if p := policy.Port(corev1.ProtocolTCP, unnamed); !seen[p.Port.String()] && unnamed != policy.HBONEPort {
			add(networkingv1.NetworkPolicyPort{Port: p.Port})
			return out
		}
	}
}

// ambientSource is a hypothetical meshed caller and how to name it.
type ambientSource struct {
	Endpoint
	what string
}

// ambientSources are the meshed callers the policies' ingress rules name,
// one Pod per peer and meshed namespace (see Ambient).
func ambientSources(ns Namespace, policies []*networkingv1.NetworkPolicy, meshed []Namespace) []ambientSource {
	seen := map[string]bool{}
	var out []ambientSource
	add := func(in Namespace, podSel *metav1.LabelSelector) {
		podLabels := map[string]string{}
		what := "Pods of namespace " + in.Name
		if podSel != nil {
			l, ok := representative(podSel)
			if !ok {
				return
			}
			podLabels = l
			if sel, err := metav1.LabelSelectorAsSelector(podSel); err == nil && !sel.Empty() {
				what = fmt.Sprintf("Pods %s in namespace %s", sel, in.Name)
			}
		}
		key := in.Name + "/" + k8slabels.Set(podLabels).String()
		if seen[key] {
			return
		}
		seen[key] = true
		out = append(out, ambientSource{what: what, Endpoint: Endpoint{Namespace: in.Name, NamespaceLabels: in.Labels, Labels: podLabels, IP: ambientSourceIP}})
	}
	for _, np := range policies {
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				for _, m := range meshed {
					add(m, nil)
				}
			}
			for _, peer := range rule.From {
				switch {
				case peer.IPBlock != nil:
				case peer.NamespaceSelector == nil:
					add(ns, peer.PodSelector)
				default:
					sel, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
					if err != nil {
						continue
					}
					for _, m := range meshed {
						if sel.Matches(k8slabels.Set(m.Labels)) {
							add(m, peer.PodSelector)
						}
					}
				}
			}
		}
	}
	return out
}

// isolatingPolicies are the namespace/name of the policies whose
// podSelector selects a Pod with podLabels, sorted.
func isolatingPolicies(policies []*networkingv1.NetworkPolicy, podLabels map[string]string) []string {
	var out []string
	for _, p := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err == nil && sel.Matches(k8slabels.Set(podLabels)) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	sort.Strings(out)
	return out
}

// representative is a label set sel selects (Kubernetes' semantics), and
// false when the one it tries does not satisfy sel (a selector that
// contradicts itself selects nothing).
func representative(sel *metav1.LabelSelector) (map[string]string, bool) {
	l := maps.Clone(sel.MatchLabels)
	if l == nil {
		l = map[string]string{}
	}
	for _, e := range sel.MatchExpressions {
		if _, set := l[e.Key]; set {
			continue
		}
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			if len(e.Values) > 0 {
				l[e.Key] = e.Values[0]
			}
		case metav1.LabelSelectorOpExists:
			l[e.Key] = "ambient-check"
		}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, false
	}
	return l, s.Matches(k8slabels.Set(l))
}
