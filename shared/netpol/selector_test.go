package netpol

import (
	"fmt"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Selector semantics: every selector below is judged in the three places a
// NetworkPolicy uses one (spec.podSelector, a peer's podSelector, a peer's
// namespaceSelector) against label sets with the key missing, empty and
// set, and the verdict must be what Kubernetes' own selector code
// (metav1.LabelSelectorAsSelector, which CNIs use) says. The two cases
// cyclonus gets wrong on its own are pinned in TestCyclonusSelectorBugs.

var selectorCases = map[string]metav1.LabelSelector{
	`matchLabels {k: ""}`:            {MatchLabels: map[string]string{"k": ""}},
	`matchLabels {k: a}`:             {MatchLabels: map[string]string{"k": "a"}},
	`k NotIn [a]`:                    {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}},
	`k NotIn [a], j NotIn [b]`:       {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}, {Key: "j", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"b"}}}},
	`{j: b} and k NotIn [""]`:        {MatchLabels: map[string]string{"j": "b"}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpNotIn, Values: []string{""}}}},
	`{k: ""} and j NotIn [b]`:        {MatchLabels: map[string]string{"k": ""}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "j", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"b"}}}},
	`k In [a, ""]`:                   {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", ""}}}},
	`k Exists`:                       {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpExists}}},
	`k DoesNotExist`:                 {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpDoesNotExist}}},
	`empty (everything)`:             {},
	`k NotIn [a] and k Exists`:       {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}, {Key: "k", Operator: metav1.LabelSelectorOpExists}}},
	`k NotIn [a] and j DoesNotExist`: {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}, {Key: "j", Operator: metav1.LabelSelectorOpDoesNotExist}}},
}

var labelSets = []map[string]string{
	{}, {"k": ""}, {"k": "a"}, {"k": "b"}, {"j": "b"}, {"j": "b", "k": ""}, {"j": "c", "k": "b"},
}

func kubernetesMatches(t *testing.T, sel metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		t.Fatal(err)
	}
	return s.Matches(labels.Set(l))
}

func ingressPolicy(podSelector metav1.LabelSelector, from ...networkingv1.NetworkPolicyPeer) networkingv1.NetworkPolicy {
	np := networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dst", Name: "p"},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: podSelector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}
	if len(from) > 0 {
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: from}}
	}
	return np
}

func pod(namespace string, l map[string]string, ip string) Endpoint {
	return Endpoint{Namespace: namespace, NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": namespace}, Labels: l, IP: ip}
}

func TestSelectorSemanticsMatchKubernetes(t *testing.T) {
	for name, sel := range selectorCases {
		for _, l := range labelSets {
			want := kubernetesMatches(t, sel, l)
			t.Run(fmt.Sprintf("%s/%v", name, l), func(t *testing.T) {
				// spec.podSelector: a selected Pod is isolated (no rules), so
				// the connection is denied exactly when the selector matches.
				n, err := New([]networkingv1.NetworkPolicy{ingressPolicy(sel)})
				if err != nil {
					t.Fatal(err)
				}
				v, err := n.Judge(pod("dst", nil, "198.51.100.1"), pod("dst", l, "198.51.100.2"), 80, "", corev1.ProtocolTCP)
				if err != nil {
					t.Fatal(err)
				}
				if v.Allowed == want {
					t.Errorf("spec.podSelector %s on %v: selected=%t, Kubernetes says %t (%s)", name, l, !v.Allowed, want, v.Ingress.Rule)
				}
				// A peer's podSelector: the source is admitted when it matches.
				peerSel := sel
				n, err = New([]networkingv1.NetworkPolicy{ingressPolicy(metav1.LabelSelector{}, networkingv1.NetworkPolicyPeer{PodSelector: &peerSel})})
				if err != nil {
					t.Fatal(err)
				}
				v, err = n.Judge(pod("dst", l, "198.51.100.1"), pod("dst", nil, "198.51.100.2"), 80, "", corev1.ProtocolTCP)
				if err != nil {
					t.Fatal(err)
				}
				if v.Allowed != want {
					t.Errorf("peer podSelector %s from %v: admitted=%t, Kubernetes says %t (%s)", name, l, v.Allowed, want, v.Ingress.Rule)
				}
				// A peer's namespaceSelector, against the source namespace's labels.
				n, err = New([]networkingv1.NetworkPolicy{ingressPolicy(metav1.LabelSelector{}, networkingv1.NetworkPolicyPeer{NamespaceSelector: &peerSel})})
				if err != nil {
					t.Fatal(err)
				}
				src := Endpoint{Namespace: "src", NamespaceLabels: l, IP: "198.51.100.1"}
				v, err = n.Judge(src, pod("dst", nil, "198.51.100.2"), 80, "", corev1.ProtocolTCP)
				if err != nil {
					t.Fatal(err)
				}
				if v.Allowed != want {
					t.Errorf("peer namespaceSelector %s from a namespace labelled %v: admitted=%t, Kubernetes says %t (%s)", name, l, v.Allowed, want, v.Ingress.Rule)
				}
			})
		}
	}
}

// TestCyclonusSelectorBugs pins the two cyclonus v0.5.6 deviations the
// normalization exists for. When an upgrade fixes them this test fails, and
// normalize can go.
func TestCyclonusSelectorBugs(t *testing.T) {
	raw := func(sel metav1.LabelSelector, l map[string]string) bool {
		np := ingressPolicy(sel)
		res := matcher.BuildNetworkPolicies(false, []*networkingv1.NetworkPolicy{&np}).IsTrafficAllowed(&matcher.Traffic{
			Source:       pod("dst", nil, "198.51.100.1").peer(),
			Destination:  pod("dst", l, "198.51.100.2").peer(),
			ResolvedPort: 80, Protocol: corev1.ProtocolTCP,
		})
		return !res.IsAllowed() // selected
	}
	emptyValue := selectorCases[`matchLabels {k: ""}`]
	notIn := selectorCases[`k NotIn [a]`]
	if !raw(emptyValue, map[string]string{}) || kubernetesMatches(t, emptyValue, map[string]string{}) {
		t.Errorf(`expected cyclonus to select a Pod without k by matchLabels {k: ""} (Kubernetes does not)`)
	}
	if raw(notIn, map[string]string{}) || !kubernetesMatches(t, notIn, map[string]string{}) {
		t.Errorf("expected cyclonus not to select a Pod without k by k NotIn [a] (Kubernetes does)")
	}
}
