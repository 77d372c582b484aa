package netpol

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/policy"
)

func TestAmbient(t *testing.T) {
	shop := Namespace{Name: "shop", Labels: map[string]string{labels.NamespaceName: "shop", labels.IstioDataPlaneMode: "ambient"}}
	billing := Namespace{Name: "billing", Labels: map[string]string{labels.NamespaceName: "billing", labels.IstioDataPlaneMode: "ambient"}}
	ingress := func(name string, podSelector metav1.LabelSelector, rules ...networkingv1.NetworkPolicyIngressRule) networkingv1.NetworkPolicy {
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: podSelector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, Ingress: rules}}
	}
	only8080 := networkingv1.NetworkPolicyIngressRule{Ports: policy.TCPPorts(8080)}
	hboneFromMeshed := networkingv1.NetworkPolicyIngressRule{Ports: policy.TCPPorts(policy.HBONEPort), From: []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.IstioDataPlaneMode: "ambient"}}}}}
	probe := networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: policy.AmbientProbeSourceCIDR}}}}
	web := metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	fromClients := networkingv1.NetworkPolicyIngressRule{Ports: policy.TCPPorts(8080), From: []networkingv1.NetworkPolicyPeer{{
		PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}}}}
	fromBilling := networkingv1.NetworkPolicyIngressRule{Ports: policy.TCPPorts(9090), From: []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.NamespaceName: "billing"}}}}}

	cases := []struct {
		name     string
		policies []networkingv1.NetworkPolicy
		want     []AmbientRefusal
	}{
		{name: "no policy", want: nil},
		{name: "only 8080 from anyone", policies: []networkingv1.NetworkPolicy{ingress("web-only", metav1.LabelSelector{}, only8080)},
			want: []AmbientRefusal{{Policies: []string{"shop/web-only"}, HBONE: "Pods of namespace shop"}}},
		{name: "only 8080, with the documented rules", policies: []networkingv1.NetworkPolicy{ingress("web-only", metav1.LabelSelector{}, only8080, hboneFromMeshed, probe)}},
		{name: "the documented rules in a policy of their own", policies: []networkingv1.NetworkPolicy{
			ingress("web-only", metav1.LabelSelector{}, only8080), ingress("allow-ambient", metav1.LabelSelector{}, hboneFromMeshed, probe)}},
		{name: "deny all: the probes fail", policies: []networkingv1.NetworkPolicy{ingress("deny", metav1.LabelSelector{})},
			want: []AmbientRefusal{{Policies: []string{"shop/deny"}, Probe: true}}},
		{name: "clients of web, probe admitted", policies: []networkingv1.NetworkPolicy{ingress("web", web, fromClients, probe)},
			want: []AmbientRefusal{{Policies: []string{"shop/web"}, HBONE: "Pods role=client in namespace shop"}}},
		{name: "clients of web with 15008 beside 8080", policies: []networkingv1.NetworkPolicy{ingress("web", web, networkingv1.NetworkPolicyIngressRule{
			Ports: policy.TCPPorts(8080, policy.HBONEPort), From: fromClients.From}, probe)}},
		{name: "another meshed namespace's callers", policies: []networkingv1.NetworkPolicy{ingress("web", web, fromBilling, probe)},
			want: []AmbientRefusal{{Policies: []string{"shop/web"}, HBONE: "Pods of namespace billing"}}},
		{name: "two policies, two sets of Pods", policies: []networkingv1.NetworkPolicy{ingress("a", web, fromClients), ingress("b", metav1.LabelSelector{}, fromClients)},
			want: []AmbientRefusal{{Policies: []string{"shop/a", "shop/b"}, HBONE: "Pods role=client in namespace shop", Probe: true},
				{Policies: []string{"shop/b"}, HBONE: "Pods role=client in namespace shop", Probe: true}}},
		{name: "a caller in the namespace whose egress refuses 15008", policies: []networkingv1.NetworkPolicy{
			ingress("web", web, networkingv1.NetworkPolicyIngressRule{Ports: policy.TCPPorts(8080, policy.HBONEPort), From: fromClients.From}, probe),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "clients-out"}, Spec: networkingv1.NetworkPolicySpec{
				PodSelector: *fromClients.From[0].PodSelector, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: policy.TCPPorts(8080)}}}}},
			want: []AmbientRefusal{{Policies: []string{"shop/web"}, HBONE: "Pods role=client in namespace shop (by their own egress policies)"}}},
		{name: "egress only", policies: []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "out"},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}}},
		{name: "a selector that selects nothing", policies: []networkingv1.NetworkPolicy{ingress("none", metav1.LabelSelector{
			MatchLabels:      map[string]string{"app": "web"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"web"}}}})}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Ambient(shop, c.policies, []Namespace{billing})
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestAmbientRefusalString(t *testing.T) {
	r := AmbientRefusal{Policies: []string{"shop/web-only"}, HBONE: "Pods of namespace shop", Probe: true}
	assert.Equal(t, "NetworkPolicy shop/web-only refuses TCP 15008 (HBONE) from Pods of namespace shop, which it admits on other ports"+
		" and admits the probe address 169.254.7.127/32 on no port", r.String())
}
