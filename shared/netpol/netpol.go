// Package netpol judges connections under Kubernetes NetworkPolicies.
//
// Verdicts come from cyclonus' matcher, a NetworkPolicy evaluator written
// outside this project (its successor is SIG Network's policy-assistant, the
// nested module sigs.k8s.io/network-policy-api/policy-assistant; this
// package is the only one that talks to the evaluator, so a move stays
// here). Two of its selector rules differ from Kubernetes' label-selector
// semantics, so the policies are rewritten into an equivalent form it does
// evaluate correctly before it sees them (see normalize). The fleet
// operator's access report and both operators' ambient checks (Ambient)
// use it.
package netpol

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// Endpoint is one end of a connection as the NetworkPolicy layer sees it.
type Endpoint struct {
	// Namespace is empty for an address outside the cluster.
	Namespace       string
	NamespaceLabels map[string]string
	Labels          map[string]string
	IP              string
}

func (e Endpoint) peer() *matcher.TrafficPeer {
	if e.Namespace == "" {
		return &matcher.TrafficPeer{IP: e.IP}
	}
	return &matcher.TrafficPeer{IP: e.IP, Internal: &matcher.InternalPeer{
		Namespace: e.Namespace, NamespaceLabels: e.NamespaceLabels, PodLabels: e.Labels}}
}

// Direction is the verdict of one end's policies: the destination's ingress
// or the source's egress.
type Direction struct {
	Allowed bool `json:"allowed"`
	// Rule is the deciding rule in words.
	Rule string `json:"rule"`
	// Policy (namespace/name) and Index name the rule that admitted the
	// connection; Index is -1 when no single rule decided.
	Policy string `json:"policy,omitempty"`
	Index  int    `json:"index"`
}

// NetworkVerdict is the NetworkPolicy layer's answer for one connection.
type NetworkVerdict struct {
	Allowed bool `json:"allowed"`
	// Unknown: NetworkPolicies of a namespace involved could not be read.
	Unknown bool      `json:"unknown,omitempty"`
	Ingress Direction `json:"ingress"`
	Egress  Direction `json:"egress"`
}

// Policies evaluates a set of live NetworkPolicies.
type Policies struct {
	byNamespace map[string][]*networkingv1.NetworkPolicy
	whole       *matcher.Policy
}

func New(list []networkingv1.NetworkPolicy) (*Policies, error) {
	n := &Policies{byNamespace: map[string][]*networkingv1.NetworkPolicy{}}
	var all []*networkingv1.NetworkPolicy
	for i := range list {
		p := withPolicyTypes(&list[i])
		n.byNamespace[p.Namespace] = append(n.byNamespace[p.Namespace], p)
		all = append(all, p)
	}
	whole, err := build(all)
	if err != nil {
		return nil, err
	}
	n.whole = whole
	return n, nil
}

// build hands the normalized policies to cyclonus, which panics on policies
// the API server would not have admitted; that becomes an error here.
func build(policies []*networkingv1.NetworkPolicy) (p *matcher.Policy, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("evaluating NetworkPolicies: %v", r)
		}
	}()
	var normalized []*networkingv1.NetworkPolicy
	for _, np := range policies {
		normalized = append(normalized, normalize(np)...)
	}
	return matcher.BuildNetworkPolicies(false, normalized), nil
}

// withPolicyTypes fills policyTypes the way the API server defaults it, so
// an object built by hand (a recorded state) means what it would live.
func withPolicyTypes(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	if len(np.Spec.PolicyTypes) > 0 {
		return np
	}
	np = np.DeepCopy()
	np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(np.Spec.Egress) > 0 {
		np.Spec.PolicyTypes = append(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	}
	return np
}

// Judge decides a connection from src to port of dst: allowed when the
// destination's ingress and the source's egress policies both admit it.
func (n *Policies) Judge(src, dst Endpoint, port int, portName string, protocol corev1.Protocol) (v NetworkVerdict, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("evaluating NetworkPolicies: %v", r)
		}
	}()
	traffic := &matcher.Traffic{Source: src.peer(), Destination: dst.peer(), ResolvedPort: port, ResolvedPortName: portName, Protocol: protocol}
	res := n.whole.IsTrafficAllowed(traffic)
	v.Ingress, err = n.explain(traffic, true, res.Ingress.IsAllowed())
	if err != nil {
		return v, err
	}
	v.Egress, err = n.explain(traffic, false, res.Egress.IsAllowed())
	v.Allowed = res.IsAllowed()
	return v, err
}

// allows is Judge's verdict alone, without the explanation (which judges
// every rule on its own): whether the destination's ingress and the
// source's egress policies admit the connection.
func (n *Policies) allows(src, dst Endpoint, port int, portName string, protocol corev1.Protocol) (ingress, egress bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("evaluating NetworkPolicies: %v", r)
		}
	}()
	traffic := &matcher.Traffic{Source: src.peer(), Destination: dst.peer(), ResolvedPort: port, ResolvedPortName: portName, Protocol: protocol}
	res := n.whole.IsTrafficAllowed(traffic)
	return res.Ingress.IsAllowed(), res.Egress.IsAllowed(), nil
}

// explain finds the deciding rule of one direction: the first rule (policy
// by name, then rule order) that admits the connection on its own, or the
// policies that isolate the Pod when none does. Each rule is judged by
// cyclonus alone in a policy of its own, so the attribution can never
// disagree with the verdict; a disagreement is reported as an error.
func (n *Policies) explain(t *matcher.Traffic, ingress bool, allowed bool) (Direction, error) {
	target, word, typ := t.Destination, "ingress", networkingv1.PolicyTypeIngress
	if !ingress {
		target, word, typ = t.Source, "egress", networkingv1.PolicyTypeEgress
	}
	if target.Internal == nil {
		return Direction{Allowed: true, Index: -1, Rule: "an address outside the cluster: no NetworkPolicy applies to it"}, nil
	}
	var selecting []string
	for _, np := range n.byNamespace[target.Internal.Namespace] {
		if !slices.Contains(np.Spec.PolicyTypes, typ) {
			continue
		}
		whole, err := build([]*networkingv1.NetworkPolicy{np})
		if err != nil {
			return Direction{}, err
		}
		if len(whole.TargetsApplyingToPod(ingress, target.Internal.Namespace, target.Internal.PodLabels)) == 0 {
			continue
		}
		selecting = append(selecting, np.Name)
		count := len(np.Spec.Ingress)
		if !ingress {
			count = len(np.Spec.Egress)
		}
		for i := range count {
			one := np.DeepCopy()
			one.Spec.PolicyTypes = []networkingv1.PolicyType{typ}
			if ingress {
				one.Spec.Ingress, one.Spec.Egress = np.Spec.Ingress[i:i+1], nil
			} else {
				one.Spec.Egress, one.Spec.Ingress = np.Spec.Egress[i:i+1], nil
			}
			p, err := build([]*networkingv1.NetworkPolicy{one})
			if err != nil {
				return Direction{}, err
			}
			if p.IsIngressOrEgressAllowed(t, ingress).IsAllowed() {
				if !allowed {
					return Direction{}, fmt.Errorf("NetworkPolicy %s/%s %s rule %d admits what the whole set denies", np.Namespace, np.Name, word, i)
				}
				return Direction{Allowed: true, Policy: np.Namespace + "/" + np.Name, Index: i,
					Rule: fmt.Sprintf("NetworkPolicy %s %s[%d]", np.Name, word, i)}, nil
			}
		}
	}
	if len(selecting) == 0 {
		if !allowed {
			return Direction{}, fmt.Errorf("no NetworkPolicy selects %s/%v for %s, yet the set denies", target.Internal.Namespace, target.Internal.PodLabels, word)
		}
		return Direction{Allowed: true, Index: -1, Rule: "no NetworkPolicy selects this Pod for " + word}, nil
	}
	if allowed {
		return Direction{}, fmt.Errorf("NetworkPolicies %v select the Pod for %s and none admits, yet the set allows", selecting, word)
	}
	slices.Sort(selecting)
	return Direction{Index: -1, Rule: fmt.Sprintf("isolated for %s by NetworkPolicy %s; no rule admits this peer on %s %d",
		word, strings.Join(selecting, ", "), t.Protocol, t.ResolvedPort)}, nil
}

// normalize rewrites a NetworkPolicy into policies that, evaluated by
// cyclonus, select and admit exactly what the original does under
// Kubernetes' label-selector semantics. cyclonus differs in two places:
//
//   - matchLabels {k: ""} matches a Pod without k (it compares the missing
//     value "" with ""); Kubernetes requires k to be present with the empty
//     value. Such an entry becomes the expression k In [""], which cyclonus
//     evaluates with the presence check.
//   - k NotIn [v...] does not match a Pod without k; Kubernetes matches it.
//     Selectors are conjunctions, so the expression is split into two
//     alternatives, k DoesNotExist or k NotIn [v...] (cyclonus' NotIn then
//     only misses the case the first alternative covers). Peer alternatives
//     become separate peers; alternatives of spec.podSelector become
//     separate copies of the policy.
func normalize(np *networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy {
	np = np.DeepCopy()
	for i := range np.Spec.Ingress {
		np.Spec.Ingress[i].From = expandPeers(np.Spec.Ingress[i].From)
	}
	for i := range np.Spec.Egress {
		np.Spec.Egress[i].To = expandPeers(np.Spec.Egress[i].To)
	}
	alts := alternatives(&np.Spec.PodSelector)
	out := make([]*networkingv1.NetworkPolicy, 0, len(alts))
	for _, sel := range alts {
		c := np.DeepCopy()
		c.Spec.PodSelector = *sel
		out = append(out, c)
	}
	return out
}

func expandPeers(peers []networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
	if peers == nil {
		return nil
	}
	out := []networkingv1.NetworkPolicyPeer{}
	for _, p := range peers {
		if p.IPBlock != nil {
			out = append(out, p)
			continue
		}
		for _, ns := range alternatives(p.NamespaceSelector) {
			for _, pod := range alternatives(p.PodSelector) {
				out = append(out, networkingv1.NetworkPolicyPeer{NamespaceSelector: ns, PodSelector: pod})
			}
		}
	}
	return out
}
