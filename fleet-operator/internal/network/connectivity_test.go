package network_test

// Connectivity truth tables for the fleet NetworkPolicy, judged by an
// evaluator nobody on this team wrote: the matcher of
// github.com/mattfenwick/cyclonus (the NetworkPolicy conformance tool from
// which SIG Network's policy-assistant grew). It answers "is this packet
// allowed?" from the NetworkPolicy objects alone, considering both the
// destination's ingress and the source's egress policies, so each row below
// is the end-to-end verdict a conformant CNI would reach.
//
// Nothing here sends traffic: every address is only a value handed to the
// evaluator. External addresses come from the documentation ranges
// (203.0.113.0/24, 2001:db8::/32) or are the well-known link-local
// endpoints under test.
//
// Why cyclonus and not sigs.k8s.io/kube-network-policies v0.8.0: that
// module's evaluator exists only as unexported methods of its nfqueue
// dataplane controller (pkg/networkpolicy), reachable only by running the
// controller against real netlink/nfqueue, so it cannot be called as a
// library.

import (
	"fmt"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/netpol"
)

// endpoint is one side of a connection: a Pod (namespace set) or an address
// outside the cluster (namespace empty).
type endpoint struct {
	name      string
	namespace string
	labels    map[string]string
	ip        string
}

func (e endpoint) String() string {
	if e.namespace == "" {
		return e.name + "(" + e.ip + ")"
	}
	return e.namespace + "/" + e.name
}

// pod builds a Pod endpoint. Namespaces carry exactly the label the API
// server sets on every namespace, kubernetes.io/metadata.name, which is all
// the fleet policy selects namespaces by.
func pod(namespace, name, ip string, podLabels map[string]string) endpoint {
	return endpoint{name: name, namespace: namespace, labels: podLabels, ip: ip}
}

func external(name, ip string) endpoint { return endpoint{name: name, ip: ip} }

func (e endpoint) trafficPeer() *matcher.TrafficPeer {
	if e.namespace == "" {
		return &matcher.TrafficPeer{IP: e.ip}
	}
	return &matcher.TrafficPeer{
		IP: e.ip,
		Internal: &matcher.InternalPeer{
			Namespace:       e.namespace,
			NamespaceLabels: map[string]string{labels.NamespaceName: e.namespace},
			PodLabels:       e.labels,
		},
	}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// memberLabels are a member Pod's labels: the fleet selector plus the kind
// of labels a StatefulSet adds, which must not matter.
func memberLabels(fleet string, ordinal int) map[string]string {
	return merge(names.Selector(fleet), map[string]string{
		"apps.kubernetes.io/pod-index":       fmt.Sprint(ordinal),
		"statefulset.kubernetes.io/pod-name": names.Member(fleet, ordinal),
	})
}

const (
	fleetNS    = "fleets"
	operatorNS = "celld-system"
	otherNS    = "shop"
	kubeSystem = "kube-system"
	myFleet    = "my-fleet"
	otherFleet = "other-fleet"
)

// operatorLabels has two keys so that the table also shows a Pod matching
// only one of them is refused (matchLabels is an AND).
var operatorLabels = map[string]string{
	labels.Name:     "fleet-operator",
	labels.Instance: "fleet-operator",
}

// The neighbourhood of my-fleet.
var (
	member0 = pod(fleetNS, names.Member(myFleet, 0), "10.244.1.10", memberLabels(myFleet, 0))
	member1 = pod(fleetNS, names.Member(myFleet, 1), "10.244.2.11", memberLabels(myFleet, 1))

	client        = pod(fleetNS, "web-5d9c7", "10.244.1.20", map[string]string{"app": "web", labels.ClientOf: myFleet})
	unlabelled    = pod(fleetNS, "batch-x81k", "10.244.1.21", map[string]string{"app": "batch"})
	clientOfOther = pod(fleetNS, "api-7f2a1", "10.244.2.22", map[string]string{"app": "api", labels.ClientOf: otherFleet})
	otherMember   = pod(fleetNS, names.Member(otherFleet, 0), "10.244.2.23", memberLabels(otherFleet, 0))
	fakeDNS       = pod(fleetNS, "dns-imposter", "10.244.2.24", map[string]string{labels.K8sApp: network.DNSAppLabelValue})

	remoteClient     = pod(otherNS, "shop-web", "10.244.3.30", map[string]string{labels.ClientOf: myFleet})
	lookalikeMember  = pod(otherNS, names.Member(myFleet, 0), "10.244.3.31", memberLabels(myFleet, 0))
	remoteOperator   = pod(otherNS, "fleet-operator-copy", "10.244.3.32", operatorLabels)
	remoteDNS        = pod(otherNS, "coredns-custom", "10.244.3.33", map[string]string{labels.K8sApp: network.DNSAppLabelValue})
	operator         = pod(operatorNS, "fleet-operator-6b8f9", "10.244.4.40", merge(operatorLabels, map[string]string{"pod-template-hash": "6b8f9"}))
	operatorPartial  = pod(operatorNS, "fleet-operator-canary", "10.244.4.41", map[string]string{labels.Name: "fleet-operator"})
	operatorNSOther  = pod(operatorNS, "prometheus-0", "10.244.4.42", map[string]string{"app": "prometheus"})
	kubeDNS          = pod(kubeSystem, "coredns-7db6d", "10.244.5.50", map[string]string{labels.K8sApp: network.DNSAppLabelValue, "eks.amazonaws.com/component": "coredns"})
	kubeSystemOther  = pod(kubeSystem, "metrics-server-5c", "10.244.5.51", map[string]string{labels.K8sApp: "metrics-server"})
	internetV4       = external("internet-v4", "203.0.113.10")
	internetV6       = external("internet-v6", "2001:db8::10")
	privateExternal  = external("vpc-endpoint", "10.20.30.40")
	podIdentityV4    = external("pod-identity-agent-v4", "169.254.170.23")
	podIdentityV6    = external("pod-identity-agent-v6", "fd00:ec2::23")
	podIdentityNext  = external("next-to-agent", "169.254.170.24")
	instanceMetadata = external("imds", "169.254.169.254")
	ambientProbe     = external("ambient-probe-snat", "169.254.7.127")
)

type flow struct {
	src, dst endpoint
	protocol corev1.Protocol
	port     int
	allowed  bool
	why      string
}

func tcp(src, dst endpoint, port int, allowed bool, why string) flow {
	return flow{src: src, dst: dst, protocol: corev1.ProtocolTCP, port: port, allowed: allowed, why: why}
}

func udp(src, dst endpoint, port int, allowed bool, why string) flow {
	return flow{src: src, dst: dst, protocol: corev1.ProtocolUDP, port: port, allowed: allowed, why: why}
}

const allow, deny = true, false

// portName is the container port name the evaluator resolves for named-port
// rules; the fleet policy uses numbers, and naming the member ports as the
// member template does keeps the evaluation honest if that ever changes.
func portName(dst endpoint, protocol corev1.Protocol, port int) string {
	if dst.namespace == "" || protocol != corev1.ProtocolTCP || dst.labels[labels.Name] != names.Runtime {
		return ""
	}
	switch port {
	case names.AppPort:
		return names.AppPortName
	case names.PeerPort:
		return names.PeerPortName
	}
	return ""
}

func evaluate(t *testing.T, policies []*networkingv1.NetworkPolicy, flows []flow) {
	t.Helper()
	// No simplification: evaluate the policies exactly as written.
	engine := matcher.BuildNetworkPolicies(false, policies)
	for _, f := range flows {
		name := fmt.Sprintf("%s->%s:%s/%d", f.src, f.dst, f.protocol, f.port)
		t.Run(name, func(t *testing.T) {
			result := engine.IsTrafficAllowed(&matcher.Traffic{
				Source:           f.src.trafficPeer(),
				Destination:      f.dst.trafficPeer(),
				ResolvedPort:     f.port,
				ResolvedPortName: portName(f.dst, f.protocol, f.port),
				Protocol:         f.protocol,
			})
			if got := result.IsAllowed(); got != f.allowed {
				t.Errorf("allowed=%t, want %t (%s)\nevaluator's verdict:\n%s", got, f.allowed, f.why, result.Table())
			}
		})
	}
}

func mustPolicy(t *testing.T, fleet *v1alpha1.CelldFleet, p network.Params) *networkingv1.NetworkPolicy {
	t.Helper()
	np, err := network.NetworkPolicy(fleet, p)
	if err != nil {
		t.Fatal(err)
	}
	return np
}

func TestNetworkPolicyConnectivity(t *testing.T) {
	params := network.Params{OperatorNamespace: operatorNS, OperatorPodLabels: operatorLabels}
	// other-fleet shares the namespace and has its own generated policy,
	// as it would in a cluster; neither may open a path into the other.
	policies := []*networkingv1.NetworkPolicy{
		mustPolicy(t, newFleet(myFleet, fleetNS, "uid-my-fleet"), params),
		mustPolicy(t, newFleet(otherFleet, fleetNS, "uid-other-fleet"), params),
	}

	ingress := []flow{
		// Application port: only same-namespace Pods labelled client-of: my-fleet.
		tcp(client, member0, 8080, allow, "labelled client in the fleet namespace"),
		tcp(client, member1, 8080, allow, "labelled client reaches every member"),
		udp(client, member0, 8080, deny, "the application port is TCP only"),
		tcp(unlabelled, member0, 8080, deny, "no client-of label"),
		tcp(clientOfOther, member0, 8080, deny, "client of another fleet"),
		tcp(remoteClient, member0, 8080, deny, "no cross-namespace client ingress, even when labelled"),
		tcp(otherMember, member0, 8080, deny, "another fleet's member is not a client"),
		tcp(member1, member0, 8080, deny, "members are not clients of their own fleet"),
		tcp(operator, member0, 8080, deny, "the operator only reads /state on the peer port"),
		tcp(kubeDNS, member0, 8080, deny, "cluster DNS is not a client"),
		tcp(internetV4, member0, 8080, deny, "no ingress from outside the cluster; routing adds its own policy"),
		tcp(internetV6, member0, 8080, deny, "no ingress from outside the cluster (IPv6)"),
		tcp(privateExternal, member0, 8080, deny, "no ingress from private addresses outside the cluster"),

		// Peer port: same-fleet members, and the operator in its namespace.
		tcp(member1, member0, 8081, allow, "peer RPC between members"),
		tcp(member0, member1, 8081, allow, "peer RPC in the other direction"),
		udp(member1, member0, 8081, deny, "peer RPC is TCP only"),
		tcp(operator, member0, 8081, allow, "operator /state read"),
		tcp(operator, member1, 8081, allow, "operator /state read of another member"),
		tcp(operatorPartial, member0, 8081, deny, "only part of the operator labels"),
		tcp(operatorNSOther, member0, 8081, deny, "other Pods of the operator namespace"),
		tcp(remoteOperator, member0, 8081, deny, "operator labels in the wrong namespace"),
		tcp(client, member0, 8081, deny, "clients never reach the peer port"),
		tcp(unlabelled, member0, 8081, deny, "unlabelled Pod in the fleet namespace"),
		tcp(remoteClient, member0, 8081, deny, "labelled client in another namespace"),
		tcp(otherMember, member0, 8081, deny, "another fleet's member in the same namespace"),
		tcp(member0, otherMember, 8081, deny, "and the other way round"),
		tcp(lookalikeMember, member0, 8081, deny, "same-fleet labels in another namespace"),
		tcp(kubeDNS, member0, 8081, deny, "kube-system Pods"),
		tcp(internetV4, member0, 8081, deny, "no peer port from outside the cluster"),
		tcp(privateExternal, member0, 8081, deny, "no peer port from private addresses outside the cluster"),

		// Any other port on members.
		tcp(client, member0, 9090, deny, "unlisted port"),
		tcp(member1, member0, 9090, deny, "unlisted port, even between peers"),
		tcp(operator, member0, 9090, deny, "unlisted port, even for the operator"),
		tcp(unlabelled, member0, 9090, deny, "unlisted port"),
	}

	egress := []flow{
		// Peers.
		tcp(member0, member1, 8081, allow, "peer RPC"),
		tcp(member0, member1, 8080, deny, "members do not call each other's application port"),
		tcp(member0, otherMember, 8081, deny, "another fleet's members"),
		tcp(member0, lookalikeMember, 8081, deny, "same-fleet labels in another namespace"),
		tcp(member0, operator, 8081, deny, "members do not call the operator"),
		tcp(member0, client, 8080, deny, "members do not call clients"),
		tcp(member0, unlabelled, 9090, deny, "arbitrary Pods"),

		// Cluster DNS: k8s-app: kube-dns in kube-system only.
		udp(member0, kubeDNS, 53, allow, "DNS over UDP"),
		tcp(member0, kubeDNS, 53, allow, "DNS over TCP"),
		tcp(member0, kubeDNS, 9153, deny, "only the DNS port of the DNS Pods"),
		udp(member0, kubeSystemOther, 53, deny, "other kube-system Pods"),
		udp(member0, fakeDNS, 53, deny, "a kube-dns label in the fleet namespace is not cluster DNS"),
		udp(member0, remoteDNS, 53, deny, "a kube-dns label in another namespace is not cluster DNS"),
		udp(member0, internetV4, 53, deny, "no external resolvers"),
		tcp(member0, internetV4, 53, deny, "no external resolvers over TCP"),

		// HTTPS to anywhere, for S3 and STS.
		tcp(member0, internetV4, 443, allow, "S3/STS over IPv4"),
		tcp(member0, internetV6, 443, allow, "S3/STS over IPv6"),
		tcp(member0, privateExternal, 443, allow, "VPC interface endpoints have private addresses"),
		udp(member0, internetV4, 443, deny, "HTTPS is TCP only (no QUIC)"),
		tcp(member0, internetV4, 80, deny, "no plain HTTP to the internet"),
		tcp(member0, internetV6, 80, deny, "no plain HTTP to the internet (IPv6)"),
		tcp(member0, privateExternal, 80, deny, "no plain HTTP to private addresses"),
		tcp(member0, privateExternal, 5432, deny, "no other ports to private addresses"),
		tcp(member0, internetV4, 8081, deny, "no peer port outside the cluster"),

		// EKS Pod Identity Agent.
		tcp(member0, podIdentityV4, 80, allow, "Pod Identity Agent, IPv4"),
		tcp(member0, podIdentityV6, 80, allow, "Pod Identity Agent, IPv6"),
		udp(member0, podIdentityV4, 80, deny, "the agent is TCP"),
		tcp(member0, podIdentityV4, 8080, deny, "only the agent's port"),
		// The agent listens on 80 only; 443 is open to every address for
		// S3/STS, so its address is admitted on 443 by that rule, not by a
		// rule of its own.
		tcp(member0, podIdentityV4, 443, allow, "HTTPS is open to every address"),
		tcp(member0, podIdentityNext, 80, deny, "only the agent's own address (/32)"),
		tcp(member0, instanceMetadata, 80, deny, "no instance metadata service: credentials come from Pod Identity"),
	}

	t.Run("ingress", func(t *testing.T) { evaluate(t, policies, ingress) })
	t.Run("egress", func(t *testing.T) { evaluate(t, policies, egress) })
}

// TestNetworkPolicyConnectivityOperatorInFleetNamespace covers a fleet in the
// operator's own namespace: the operator rule must still require the
// operator's labels, not admit the namespace.
func TestNetworkPolicyConnectivityOperatorInFleetNamespace(t *testing.T) {
	const ns = "celld-system"
	params := network.Params{OperatorNamespace: ns, OperatorPodLabels: operatorLabels}
	policies := []*networkingv1.NetworkPolicy{mustPolicy(t, newFleet(myFleet, ns, "uid-my-fleet"), params)}

	m0 := pod(ns, names.Member(myFleet, 0), "10.244.1.10", memberLabels(myFleet, 0))
	m1 := pod(ns, names.Member(myFleet, 1), "10.244.2.11", memberLabels(myFleet, 1))
	op := pod(ns, "fleet-operator-6b8f9", "10.244.4.40", operatorLabels)
	neighbour := pod(ns, "prometheus-0", "10.244.4.42", map[string]string{"app": "prometheus"})
	localClient := pod(ns, "web", "10.244.4.43", map[string]string{labels.ClientOf: myFleet})

	evaluate(t, policies, []flow{
		tcp(op, m0, 8081, allow, "operator /state read"),
		tcp(m1, m0, 8081, allow, "peer RPC"),
		tcp(neighbour, m0, 8081, deny, "the operator namespace is not admitted as a whole"),
		tcp(localClient, m0, 8081, deny, "clients never reach the peer port"),
		tcp(localClient, m0, 8080, allow, "labelled client"),
		tcp(op, m0, 8080, deny, "the operator is not a client"),
	})
}

// TestNetworkPolicyConnectivityIstiod checks the egress a meshed fleet gets:
// istiod's xDS port in the control-plane namespace, nothing else of it.
func TestNetworkPolicyConnectivityIstiod(t *testing.T) {
	istiod := pod("istio-system", "istiod-7d4f", "10.40.0.10", map[string]string{"app": "istiod"})
	istiodElsewhere := pod(fleetNS, "fake-istiod", "10.40.0.11", map[string]string{"app": "istiod"})
	otherControlPlane := pod("istio-canary", "istiod-canary", "10.40.0.12", map[string]string{"app": "istiod"})
	closed := network.Params{OperatorNamespace: operatorNS, OperatorPodLabels: operatorLabels}
	open := closed
	open.IstiodNamespaces = []string{"istio-system"}

	evaluate(t, []*networkingv1.NetworkPolicy{mustPolicy(t, newFleet(myFleet, fleetNS, "uid-my-fleet"), closed)}, []flow{
		tcp(member0, istiod, 15012, deny, "an unmeshed fleet has no route to istiod"),
	})
	evaluate(t, []*networkingv1.NetworkPolicy{mustPolicy(t, newFleet(myFleet, fleetNS, "uid-my-fleet"), open)}, []flow{
		tcp(member0, istiod, 15012, allow, "sidecars fetch config and certificates from istiod"),
		tcp(member0, istiod, 15010, deny, "only the TLS xDS port"),
		tcp(member0, istiod, 15017, deny, "not the webhook port"),
		tcp(member0, istiodElsewhere, 15012, deny, "an app=istiod Pod outside the control-plane namespace"),
		tcp(member0, otherControlPlane, 15012, deny, "another control plane's namespace"),
		tcp(member0, member1, 8081, allow, "peer egress unchanged"),
	})
	// A control plane that moved while old proxies still point at the old
	// one: both are open, and reading the policy back names both.
	moving := closed
	moving.IstiodNamespaces = []string{"istio-system", "istio-canary", "istio-system"}
	np := mustPolicy(t, newFleet(myFleet, fleetNS, "uid-my-fleet"), moving)
	evaluate(t, []*networkingv1.NetworkPolicy{np}, []flow{
		tcp(member0, istiod, 15012, allow, "the old control plane, for the proxies it injected"),
		tcp(member0, otherControlPlane, 15012, allow, "the new control plane"),
		tcp(member0, istiodElsewhere, 15012, deny, "still no app=istiod Pod elsewhere"),
	})
	assert.Equal(t, []string{"istio-canary", "istio-system"}, network.OpenIstiodNamespaces(np))
	assert.Empty(t, network.OpenIstiodNamespaces(mustPolicy(t, newFleet(myFleet, fleetNS, "uid-my-fleet"), closed)))
}

// TestNetworkPolicyConnectivityAmbient: in an ambient mesh ztunnel carries
// traffic between meshed Pods to port 15008 of the destination, so the CNI
// judges the source's egress and the destination's ingress on 15008. Exactly
// the sources admitted on 8080 or 8081 may use it; the fleet's
// AuthorizationPolicy then restricts the inner port.
func TestNetworkPolicyConnectivityAmbient(t *testing.T) {
	p := network.Params{OperatorNamespace: operatorNS, OperatorPodLabels: operatorLabels, HBONE: true}
	policies := []*networkingv1.NetworkPolicy{
		mustPolicy(t, newFleet(myFleet, fleetNS, "uid-my-fleet"), p),
		mustPolicy(t, newFleet(otherFleet, fleetNS, "uid-other-fleet"), p),
	}
	evaluate(t, policies, []flow{
		tcp(member1, member0, 15008, allow, "peer RPC over HBONE: member1's egress and member0's ingress"),
		tcp(member0, member1, 15008, allow, "and the other way round"),
		tcp(client, member0, 15008, allow, "a labelled client over HBONE"),
		tcp(operator, member0, 15008, allow, "the operator's /state reads over HBONE"),
		tcp(member0, otherMember, 15008, deny, "another fleet's members, not even over HBONE"),
		tcp(otherMember, member0, 15008, deny, "another fleet's member is neither peer nor client"),
		tcp(unlabelled, member0, 15008, deny, "HBONE does not widen the sources"),
		tcp(remoteClient, member0, 15008, deny, "no cross-namespace client"),
		tcp(operatorNSOther, member0, 15008, deny, "only the operator's Pods of its namespace"),
		tcp(member0, member1, 8081, allow, "plain peer RPC while members are not captured yet"),
		tcp(member0, member1, 15009, deny, "only the HBONE port is added"),
		tcp(ambientProbe, member0, 8081, allow, "the kubelet's readiness probe of /state, rewritten by istio-cni"),
		tcp(ambientProbe, member0, 8080, deny, "the probe address reaches only the probed port"),
		tcp(podIdentityV4, member0, 8081, deny, "other link-local addresses stay out"),
	})
	evaluate(t, []*networkingv1.NetworkPolicy{mustPolicy(t, newFleet(myFleet, fleetNS, "uid-my-fleet"), network.Params{OperatorNamespace: operatorNS, OperatorPodLabels: operatorLabels})}, []flow{
		tcp(ambientProbe, member0, 8081, deny, "without ambient the probe address is not special"),
	})
}

// TestNetworkPolicyConnectivityRouting adds spec.routing's FLEET-routing
// policy to the fleet policy: only the routing source Pods gain the
// application port, and nothing new reaches the peer port.
func TestNetworkPolicyConnectivityRouting(t *testing.T) {
	const edge = "edge"
	gatewayPod := pod(edge, "public-gateway-7c9", "10.244.6.60", map[string]string{"app": "public-gateway", "pod-template-hash": "7c9"})
	gatewayController := pod(edge, "gateway-controller-0", "10.244.6.61", map[string]string{"app": "gateway-controller"})
	lookalikeGateway := pod(otherNS, "public-gateway-copy", "10.244.3.34", map[string]string{"app": "public-gateway"})

	f := newFleet(myFleet, fleetNS, "uid-my-fleet")
	f.Spec.Routing = &v1alpha1.Routing{
		Hostnames: []string{"app.example.com"},
		Gateway:   &v1alpha1.GatewayRouting{Name: "public", Namespace: edge},
		Source:    v1alpha1.RoutingSource{Namespace: edge, PodLabels: map[string]v1alpha1.LabelValue{"app": "public-gateway"}},
	}
	policies := []*networkingv1.NetworkPolicy{
		mustPolicy(t, f, network.Params{OperatorNamespace: operatorNS, OperatorPodLabels: operatorLabels}),
		routing.NetworkPolicy(f, false),
	}
	evaluate(t, policies, []flow{
		tcp(gatewayPod, member0, 8080, allow, "the routing source's data plane reaches the application port"),
		tcp(gatewayPod, member1, 8080, allow, "on every member"),
		tcp(gatewayPod, member0, 8081, deny, "never the peer port through routing"),
		tcp(gatewayPod, member0, 9090, deny, "no other port"),
		udp(gatewayPod, member0, 8080, deny, "TCP only"),
		tcp(gatewayController, member0, 8080, deny, "other Pods of the source namespace (the controller itself)"),
		tcp(lookalikeGateway, member0, 8080, deny, "source labels in another namespace"),
		tcp(remoteClient, member0, 8080, deny, "cross-namespace clients stay out"),
		tcp(internetV4, member0, 8080, deny, "no direct ingress from outside"),
		tcp(client, member0, 8080, allow, "same-namespace labelled clients still reach it"),
		tcp(member1, member0, 8081, allow, "peer traffic unchanged"),
		tcp(operator, member0, 8081, allow, "operator /state unchanged"),
		tcp(client, member0, 8081, deny, "clients still never reach the peer port"),
	})
}

// TestFleetPoliciesPassTheAmbientCheck: the mesh operator holds a namespace
// out of ambient when its NetworkPolicies would cut off captured Pods
// (netpol.Ambient); the policies the fleet operator writes for an ambient
// fleet, routing's included, must never hold a fleet namespace back. The
// same policies without HBONE must (the check is not vacuous).
func TestFleetPoliciesPassTheAmbientCheck(t *testing.T) {
	const edge = "edge"
	ns := func(name string) netpol.Namespace {
		return netpol.Namespace{Name: name, Labels: map[string]string{labels.NamespaceName: name, labels.IstioDataPlaneMode: "ambient"}}
	}
	meshed := []netpol.Namespace{ns(operatorNS), ns(edge)}
	f := newFleet(myFleet, fleetNS, "uid-my-fleet")
	f.Spec.Routing = &v1alpha1.Routing{
		Hostnames: []string{"app.example.com"},
		Gateway:   &v1alpha1.GatewayRouting{Name: "public", Namespace: edge},
		Source:    v1alpha1.RoutingSource{Namespace: edge, PodLabels: map[string]v1alpha1.LabelValue{"app": "public-gateway"}},
	}
	for _, hbone := range []bool{true, false} {
		p := network.Params{OperatorNamespace: operatorNS, OperatorPodLabels: operatorLabels, HBONE: hbone}
		var list []networkingv1.NetworkPolicy
		for _, np := range []*networkingv1.NetworkPolicy{mustPolicy(t, f, p), mustPolicy(t, newFleet(otherFleet, fleetNS, "uid-other-fleet"), p), routing.NetworkPolicy(f, hbone)} {
			list = append(list, *np)
		}
		refusals, err := netpol.Ambient(ns(fleetNS), list, meshed)
		if err != nil {
			t.Fatal(err)
		}
		if hbone && len(refusals) > 0 {
			t.Errorf("the fleet's ambient policies hold its namespace out of the mesh: %v", refusals)
		}
		if !hbone && len(refusals) == 0 {
			t.Errorf("the fleet's policies without HBONE pass the ambient check")
		}
	}
}
