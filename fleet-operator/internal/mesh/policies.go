package mesh

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// Istio's security API, which the fleet operator requires for the mesh.
var (
	SecurityGroupVersion    = schema.GroupVersion{Group: "security.istio.io", Version: "v1"}
	AuthorizationPolicyKind = SecurityGroupVersion.WithKind("AuthorizationPolicy")
	PeerAuthenticationKind  = SecurityGroupVersion.WithKind("PeerAuthentication")
)

// Params are the operator-wide facts the policies need.
type Params struct {
	OperatorNamespace      string
	OperatorServiceAccount string
	// TrustDomain of the mesh, the first part of SPIFFE principals.
	TrustDomain string
}

func principal(trustDomain, namespace, serviceAccount string) string {
	return fmt.Sprintf("%s/ns/%s/sa/%s", trustDomain, namespace, serviceAccount)
}

// AuthorizationPolicy is the ALLOW policy FLEET-mesh. Port 8081 admits only
// the fleet's and the operator's identities, or, while relaxed, any source
// (unmeshed members have no identity; the NetworkPolicy still limits who can
// connect). With AllowAll port 8080 is open to any caller but those two
// identities, as outside the mesh; with Policies nothing admits 8080, so
// Istio denies it until a policy of the user's own allows the caller.
func AuthorizationPolicy(f *v1alpha1.CelldFleet, p Params, access v1alpha1.ApplicationAccess, relaxed bool) *unstructured.Unstructured {
	peerIdentities := func() []any {
		return []any{
			principal(p.TrustDomain, f.Namespace, members.ServiceAccountName(f)),
			principal(p.TrustDomain, p.OperatorNamespace, p.OperatorServiceAccount),
		}
	}
	peer := map[string]any{
		"to": []any{map[string]any{"operation": map[string]any{"ports": []any{fmt.Sprint(names.PeerPort)}}}},
	}
	if !relaxed {
		peer["from"] = []any{map[string]any{"source": map[string]any{"principals": peerIdentities()}}}
	}
	rules := []any{peer}
	if access != v1alpha1.Policies {
		// "Any caller, as outside the mesh": outside it the NetworkPolicy
		// admits the members and the operator on 8081 only. In ambient it
		// cannot tell the ports apart (everything arrives on HBONE 15008),
		// so this rule keeps the two peer-port identities off 8080 itself.
		// notPrincipals also matches plaintext, which PeerAuthentication
		// governs.
		rules = append(rules, map[string]any{
			"from": []any{map[string]any{"source": map[string]any{"notPrincipals": peerIdentities()}}},
			"to":   []any{map[string]any{"operation": map[string]any{"ports": []any{fmt.Sprint(names.AppPort)}}}},
		})
	}
	return object(f, AuthorizationPolicyKind, map[string]any{
		"selector": selector(f),
		"action":   "ALLOW",
		"rules":    rules,
	})
}

// PeerAuthentication is FLEET-mesh: the peer port PERMISSIVE for the
// fleet's Pods whatever the mesh or namespace mode, so unmeshed members'
// plaintext peer RPC is accepted while the fleet is mixed.
func PeerAuthentication(f *v1alpha1.CelldFleet) *unstructured.Unstructured {
	return object(f, PeerAuthenticationKind, map[string]any{
		"selector": selector(f),
		"portLevelMtls": map[string]any{
			fmt.Sprint(names.PeerPort): map[string]any{"mode": "PERMISSIVE"},
		},
	})
}

// selector picks the members by the label the meshed template carries; the
// opt-out template keeps it too, so a leaving fleet stays selected.
func selector(f *v1alpha1.CelldFleet) map[string]any {
	return map[string]any{"matchLabels": map[string]any{labels.Fleet: f.Name}}
}

func object(f *v1alpha1.CelldFleet, gvk schema.GroupVersionKind, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetName(PolicyName(f.Name))
	u.SetNamespace(f.Namespace)
	u.SetLabels(names.CommonLabels(f.Name))
	u.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(f, v1alpha1.GroupVersion.WithKind("CelldFleet"))})
	return u
}
