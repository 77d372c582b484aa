package network

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/policy"
)

// Cluster DNS as the fleet policy assumes it.
//
// Decision: DNS egress goes to Pods labelled k8s-app: kube-dns in the
// kube-system namespace only, selected by the API-server-owned
// kubernetes.io/metadata.name label. Without the namespace scoping anyone who
// can create a Pod anywhere in the cluster, including the fleet namespace,
// could label it k8s-app: kube-dns and receive the members' DNS queries, and
// port 53 would become an open path out of the fleet. EKS, kubeadm and most
// managed clusters run CoreDNS in kube-system under this label; clusters that
// run DNS elsewhere (or resolve through a node-local cache on a link-local
// address) need an additional policy of their own, which the networking docs
// point out ("check your CNI and DNS deployment").
const (
	// DNSNamespace is where the fleet policy expects cluster DNS Pods.
	DNSNamespace = "kube-system"
	// DNSAppLabelValue is the k8s-app label value of cluster DNS Pods.
	DNSAppLabelValue = "kube-dns"
	// DNSPort serves DNS over UDP and, for large answers and retries, TCP.
	DNSPort = 53
)

// External endpoints members call.
const (
	// HTTPSPort reaches S3 and STS. Any address is allowed: regional
	// endpoints are public, and VPC interface endpoints for S3 and STS
	// resolve to private addresses, so private ranges cannot be excluded.
	HTTPSPort = 443
	// PodIdentityAgentPort is where the EKS Pod Identity Agent serves
	// credentials on the node.
	PodIdentityAgentPort = 80
	// IstiodXDSPort is where sidecars fetch configuration and certificates.
	IstiodXDSPort = 15012
	// IstiodAppLabelValue marks istiod Pods (label app).
	IstiodAppLabelValue = "istiod"
	// PodIdentityAgentCIDRv4 and PodIdentityAgentCIDRv6 are the agent's fixed
	// link-local addresses, as single-address CIDRs. Plain HTTP is allowed
	// to these two only, so members cannot reach the instance metadata
	// service (169.254.169.254) or anything else over port 80.
	PodIdentityAgentCIDRv4 = "169.254.170.23/32"
	PodIdentityAgentCIDRv6 = "fd00:ec2::23/128"
)

// NetworkPolicy is the fleet's policy, named after the fleet, selecting its
// member Pods for both ingress and egress. It admits exactly:
//
//   - ingress TCP 8080 from Pods in the fleet namespace labelled
//     celld.eric.dev/client-of: FLEET (no cross-namespace client ingress;
//     routing adds its own policy for the edge);
//   - ingress TCP 8081 from the fleet's own members, and from Pods with the
//     operator's labels in the operator namespace (one peer: both must match);
//   - egress TCP 8081 to the fleet's own members;
//   - with Params.HBONE (ambient), TCP 15008 beside 8080 and 8081 in each
//     ingress rule and beside 8081 in the peer egress rule: ztunnel carries
//     meshed traffic in both directions over HBONE, and the CNI sees port
//     15008 on the source Pod's egress as much as on the destination's
//     ingress; and ingress TCP 8081 from 169.254.7.127/32, where the
//     kubelet's readiness probes of ambient Pods come from;
//   - egress UDP and TCP 53 to cluster DNS (see DNSNamespace);
//   - egress TCP 443 to any IPv4 or IPv6 address, for S3 and STS;
//   - egress TCP 80 to the EKS Pod Identity Agent addresses only.
//
// Everything else to or from members is denied once the CNI enforces the
// policy. It returns an error for Params that would make the policy admit
// more than that (see Params.Validate).
func NetworkPolicy(fleet *v1alpha1.CelldFleet, p Params) (*networkingv1.NetworkPolicy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	// A fresh selector at every use: the returned object shares no map or
	// pointer between its fields, so a caller may change one safely.
	members := func() *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: names.Selector(fleet.Name)}
	}

	ingress := []networkingv1.NetworkPolicyIngressRule{
		{
			Ports: policy.TCPPorts(names.AppPort),
			// A podSelector without a namespaceSelector matches only in the
			// policy's own namespace: clients elsewhere must go through a
			// labelled proxy in the fleet namespace.
			From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.ClientOf: fleet.Name}},
			}},
		},
		{
			Ports: policy.TCPPorts(names.PeerPort),
			From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: members()},
				// Namespace and Pod selectors in one peer are ANDed; as two
				// peers they would admit every Pod of the operator
				// namespace and operator-labelled Pods everywhere.
				{
					NamespaceSelector: policy.NamespaceNamed(p.OperatorNamespace),
					PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(p.OperatorPodLabels)},
				},
			},
		},
	}

	if p.HBONE {
		for i := range ingress {
			ingress[i].Ports = append(ingress[i].Ports, policy.Port(corev1.ProtocolTCP, policy.HBONEPort))
		}
		// The readiness probe (/state on the peer port) of a captured member
		// comes from istio-cni's link-local probe address.
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{
			Ports: policy.TCPPorts(names.PeerPort),
			From:  ipBlocks(policy.AmbientProbeSourceCIDR),
		})
	}

	egress := []networkingv1.NetworkPolicyEgressRule{
		{
			Ports: policy.TCPPorts(names.PeerPort),
			To:    []networkingv1.NetworkPolicyPeer{{PodSelector: members()}},
		},
		{
			Ports: []networkingv1.NetworkPolicyPort{
				policy.Port(corev1.ProtocolUDP, DNSPort),
				policy.Port(corev1.ProtocolTCP, DNSPort),
			},
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: policy.NamespaceNamed(DNSNamespace),
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{labels.K8sApp: DNSAppLabelValue}},
			}},
		},
		{
			Ports: policy.TCPPorts(HTTPSPort),
			To:    ipBlocks("0.0.0.0/0", "::/0"),
		},
		{
			Ports: policy.TCPPorts(PodIdentityAgentPort),
			To:    ipBlocks(PodIdentityAgentCIDRv4, PodIdentityAgentCIDRv6),
		},
	}
	if p.HBONE {
		egress[0].Ports = append(egress[0].Ports, policy.Port(corev1.ProtocolTCP, policy.HBONEPort))
	}
	if len(p.IstiodNamespaces) > 0 {
		rule := networkingv1.NetworkPolicyEgressRule{Ports: policy.TCPPorts(IstiodXDSPort)}
		for _, ns := range slices.Compact(slices.Sorted(slices.Values(p.IstiodNamespaces))) {
			rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{
				NamespaceSelector: policy.NamespaceNamed(ns),
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{labels.IstiodApp: IstiodAppLabelValue}},
			})
		}
		egress = append(egress, rule)
	}

	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{
			APIVersion: networkingv1.SchemeGroupVersion.String(),
			Kind:       "NetworkPolicy",
		},
		ObjectMeta: objectMeta(fleet, names.NetworkPolicy(fleet.Name)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *members(),
			// Both types are listed explicitly: a policy with egress rules
			// would imply Egress anyway, but listing it keeps members
			// egress-isolated even if every egress rule were removed.
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     ingress,
			Egress:      egress,
		},
	}, nil
}

// OpenIstiodNamespaces are the namespaces whose istiod Pods a fleet
// NetworkPolicy (as NetworkPolicy builds it) admits on TCP 15012, sorted:
// what the live policy opens, read back so that a control plane is closed
// only on positive evidence that no proxy needs it any more.
func OpenIstiodNamespaces(np *networkingv1.NetworkPolicy) []string {
	if np == nil {
		return nil
	}
	var out []string
	for _, rule := range np.Spec.Egress {
		if !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
			return p.Port != nil && p.Port.IntValue() == IstiodXDSPort
		}) {
			continue
		}
		for _, to := range rule.To {
			if to.NamespaceSelector == nil || to.PodSelector == nil || to.PodSelector.MatchLabels[labels.IstiodApp] != IstiodAppLabelValue {
				continue
			}
			if ns := to.NamespaceSelector.MatchLabels[labels.NamespaceName]; ns != "" {
				out = append(out, ns)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func ipBlocks(cidrs ...string) []networkingv1.NetworkPolicyPeer {
	peers := make([]networkingv1.NetworkPolicyPeer, 0, len(cidrs))
	for _, cidr := range cidrs {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr}})
	}
	return peers
}
