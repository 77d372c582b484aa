package mesh

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/policy"
)

// Istio's security API, which the fleet operator requires for the mesh.
var (
	SecurityGroupVersion    = policy.IstioSecurity
	AuthorizationPolicyKind = policy.IstioSecurity.WithKind(policy.KindAuthorizationPolicy)
	PeerAuthenticationKind  = policy.IstioSecurity.WithKind(policy.KindPeerAuthentication)
)

// Params are the operator-wide facts the policies need.
type Params struct {
	OperatorNamespace      string
	OperatorServiceAccount string
	// TrustDomain of the mesh, the first part of SPIFFE principals.
	TrustDomain string
}

// AuthorizationPolicy is the ALLOW policy FLEET-mesh of a sidecar fleet.
// Port 8081 admits only the fleet's and the operator's identities, or,
// while relaxed, any source (unmeshed members have no identity; the
// NetworkPolicy still limits who can connect). With AllowAll port 8080 is
// open to any caller, as outside the mesh: in sidecar mode the
// NetworkPolicy sees the real ports and already keeps members and the
// operator on 8081. With Policies nothing admits 8080, so Istio denies it
// until a policy of the user's own allows the caller.
func AuthorizationPolicy(f *v1alpha1.CelldFleet, p Params, access v1alpha1.ApplicationAccess, relaxed bool) *unstructured.Unstructured {
	rules := []policy.Rule{peerRule(f, p, relaxed)}
	if access != v1alpha1.Policies {
		rules = append(rules, policy.Rule{Ports: []int{names.AppPort}})
	}
	return policy.AuthorizationPolicy(object(f), selector(f), policy.Allow, rules...)
}

// AmbientAuthorizationPolicy is FLEET-mesh of a fleet captured by an
// ambient mesh. In ambient the NetworkPolicy cannot tell the ports apart
// (everything meshed arrives on HBONE 15008), so with AllowAll the 8080
// rule itself keeps the two peer-port identities off 8080. A client that
// shares the fleet's ServiceAccount is refused with them; the fleet reports
// such sharing (AmbientSharedServiceAccount). notPrincipals also matches
// plaintext, which PeerAuthentication governs. While relaxed (members
// captured one at a time), 8081 also admits plaintext, never another mesh
// identity: plaintext arrives on the real port, where the NetworkPolicy
// admits only peers and the operator.
func AmbientAuthorizationPolicy(f *v1alpha1.CelldFleet, p Params, access v1alpha1.ApplicationAccess, relaxed bool) *unstructured.Unstructured {
	peer := peerRule(f, p, false)
	if relaxed {
		peer.From = append(peer.From, policy.Source{NotPrincipals: []string{"*"}})
	}
	rules := []policy.Rule{peer}
	if access != v1alpha1.Policies {
		rules = append(rules, policy.Rule{From: []policy.Source{{NotPrincipals: peerIdentities(f, p)}}, Ports: []int{names.AppPort}})
	}
	return policy.AuthorizationPolicy(object(f), selector(f), policy.Allow, rules...)
}

func peerIdentities(f *v1alpha1.CelldFleet, p Params) []string {
	return []string{
		policy.Principal(p.TrustDomain, f.Namespace, members.ServiceAccountName(f)),
		policy.Principal(p.TrustDomain, p.OperatorNamespace, p.OperatorServiceAccount),
	}
}

func peerRule(f *v1alpha1.CelldFleet, p Params, relaxed bool) policy.Rule {
	peer := policy.Rule{Ports: []int{names.PeerPort}}
	if !relaxed {
		peer.From = []policy.Source{{Principals: peerIdentities(f, p)}}
	}
	return peer
}

// PeerAuthentication is FLEET-mesh: the peer port PERMISSIVE for the
// fleet's Pods whatever the mesh or namespace mode, so unmeshed members'
// plaintext peer RPC is accepted while the fleet is mixed.
func PeerAuthentication(f *v1alpha1.CelldFleet) *unstructured.Unstructured {
	return policy.PeerAuthentication(object(f), selector(f), "", map[int]string{names.PeerPort: policy.Permissive})
}

// selector picks the members by the label every member carries.
func selector(f *v1alpha1.CelldFleet) map[string]string {
	return map[string]string{labels.Fleet: f.Name}
}

func object(f *v1alpha1.CelldFleet) policy.Object {
	return policy.Object{
		Namespace: f.Namespace, Name: PolicyName(f.Name), Labels: names.CommonLabels(f.Name),
		Owner: *metav1.NewControllerRef(f, v1alpha1.GroupVersion.WithKind("CelldFleet")),
	}
}
