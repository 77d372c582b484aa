package mesh

import (
	"slices"

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

// Wiring is the fleet's wiring graph as isolation strict reads it: the
// identities that may call the application port. Strict false means
// isolation strict is not in force in the fleet's namespace, and 8080
// follows applicationAccess alone.
type Wiring struct {
	Strict bool
	// Callers are the principals of the fleet's wired clients (Pods of its
	// namespace labelled celld.eric.dev/client-of: FLEET) and of its routing
	// source Pods, sorted and without duplicates.
	Callers []string
}

// appRule is the 8080 rule, if any. With Policies nothing admits 8080: the
// user's own policies decide. Under isolation strict only the wired callers
// are admitted (L4, by principal), never the peer-port identities (a
// client sharing the fleet's ServiceAccount is refused with them; ambient
// fleets report it), and with no wired caller there is no rule at all, so
// Istio denies 8080. Otherwise open reports the rule of the mode: nil
// sources for sidecar (the NetworkPolicy sees the real ports), the peer
// identities excluded for ambient.
func appRule(f *v1alpha1.CelldFleet, p Params, access v1alpha1.ApplicationAccess, w Wiring, former []string, open []policy.Source) (policy.Rule, bool) {
	if access == v1alpha1.Policies {
		return policy.Rule{}, false
	}
	if !w.Strict {
		return policy.Rule{From: open, Ports: []int{names.AppPort}}, true
	}
	peers := peerIdentities(f, p, former)
	var callers []string
	for _, c := range w.Callers {
		if !slices.Contains(peers, c) {
			callers = append(callers, c)
		}
	}
	if len(callers) == 0 {
		return policy.Rule{}, false
	}
	return policy.Rule{From: []policy.Source{{Principals: callers}}, Ports: []int{names.AppPort}}, true
}

// AuthorizationPolicy is the ALLOW policy FLEET-mesh of a sidecar fleet.
// Port 8081 admits only the fleet's and the operator's identities, or,
// while relaxed, any source (unmeshed members have no identity; the
// NetworkPolicy still limits who can connect). With AllowAll port 8080 is
// open to any caller, as outside the mesh: in sidecar mode the
// NetworkPolicy sees the real ports and already keeps members and the
// operator on 8081; under isolation strict only the wired callers (see
// appRule). With Policies nothing admits 8080, so Istio denies it until a
// policy of the user's own allows the caller.
//
// former are the other ServiceAccounts the members still run as, or may be
// recreated as, while a change of spec.serviceAccountName rolls (see
// FormerAccounts): they are peer identities until no member runs as them.
func AuthorizationPolicy(f *v1alpha1.CelldFleet, p Params, access v1alpha1.ApplicationAccess, relaxed bool, w Wiring, former []string) *unstructured.Unstructured {
	rules := []policy.Rule{peerRule(f, p, relaxed, former)}
	if r, ok := appRule(f, p, access, w, former, nil); ok {
		rules = append(rules, r)
	}
	return policy.AuthorizationPolicy(object(f), selector(f), policy.Allow, rules...)
}

// AmbientAuthorizationPolicy is FLEET-mesh of a fleet captured by an
// ambient mesh. In ambient the NetworkPolicy cannot tell the ports apart
// (everything meshed arrives on HBONE 15008), so with AllowAll the 8080
// rule itself keeps the two peer-port identities off 8080. A client that
// shares the fleet's ServiceAccount is refused with them; the fleet reports
// such sharing (AmbientSharedServiceAccount). notPrincipals also matches
// plaintext, which PeerAuthentication governs. Under isolation strict 8080
// admits the wired callers only (appRule). 8081 admits the peer identities
// and plaintext, never another mesh identity: plaintext arrives on the real
// port, where the NetworkPolicy admits only peers and the operator, and
// whether it is accepted at all is PeerAuthentication's to say (refused at
// STRICT unless the fleet's own PeerAuthentication relaxes 8081 while its
// members are captured one at a time). Admitting it in the policy too means
// that when the namespace goes PERMISSIVE before ztunnel releases the
// members (a teardown, an expired license, a data-plane migration), peers
// keep talking even if this operator has not reconciled yet (the
// transition explorer found peers cut off while it was restarting).
// former as for AuthorizationPolicy.
func AmbientAuthorizationPolicy(f *v1alpha1.CelldFleet, p Params, access v1alpha1.ApplicationAccess, w Wiring, former []string) *unstructured.Unstructured {
	peer := peerRule(f, p, false, former)
	peer.From = append(peer.From, policy.Source{NotPrincipals: []string{"*"}})
	rules := []policy.Rule{peer}
	if r, ok := appRule(f, p, access, w, former, []policy.Source{{NotPrincipals: peerIdentities(f, p, former)}}); ok {
		rules = append(rules, r)
	}
	return policy.AuthorizationPolicy(object(f), selector(f), policy.Allow, rules...)
}

// peerIdentities are the identities admitted to the peer port: the
// members' (the one the spec names first, then any former one members
// still run as) and the operator's.
func peerIdentities(f *v1alpha1.CelldFleet, p Params, former []string) []string {
	current := members.ServiceAccountName(f)
	ids := []string{policy.Principal(p.TrustDomain, f.Namespace, current)}
	for _, sa := range former {
		if sa != current {
			ids = append(ids, policy.Principal(p.TrustDomain, f.Namespace, sa))
		}
	}
	return append(ids, policy.Principal(p.TrustDomain, p.OperatorNamespace, p.OperatorServiceAccount))
}

func peerRule(f *v1alpha1.CelldFleet, p Params, relaxed bool, former []string) policy.Rule {
	peer := policy.Rule{Ports: []int{names.PeerPort}}
	if !relaxed {
		peer.From = []policy.Source{{Principals: peerIdentities(f, p, former)}}
	}
	return peer
}

// FormerAccounts are the ServiceAccounts, other than the one the spec asks
// for, that member Pods (terminating ones included) run as or that the
// members' StatefulSet template names (held while maintenance is paused,
// and what the StatefulSet controller recreates a lost member from), sorted
// and without duplicates. A Pod that names none runs as "default". They
// are what exists, not what status says: after a change of
// spec.serviceAccountName, old and new members talk to each other until
// the last old one is gone.
func FormerAccounts(f *v1alpha1.CelldFleet, podAccounts []string, templateAccount *string) []string {
	current := members.ServiceAccountName(f)
	var out []string
	add := func(sa string) {
		if sa == "" {
			sa = "default"
		}
		if sa != current {
			out = append(out, sa)
		}
	}
	for _, sa := range podAccounts {
		add(sa)
	}
	if templateAccount != nil {
		add(*templateAccount)
	}
	slices.Sort(out)
	return slices.Compact(out)
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
	m := names.ObjectMeta(f, PolicyName(f.Name))
	return policy.Object{Namespace: m.Namespace, Name: m.Name, Labels: m.Labels, Owner: m.OwnerReferences[0]}
}
