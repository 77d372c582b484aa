package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/policy"
)

var obj = policy.Object{Namespace: "team-a", Name: "p", Labels: map[string]string{"x": "y"}}

// The pieces mean on the wire what the evaluator of Istio's rules reads.
func TestAuthorizationPolicyPiecesRoundTrip(t *testing.T) {
	fleetSA := policy.Principal("cluster.local", "team-a", "fleet")
	assert.Equal(t, "cluster.local/ns/team-a/sa/fleet", fleetSA)
	u := policy.AuthorizationPolicy(obj, map[string]string{"app": "vault"}, policy.Allow,
		policy.Rule{From: []policy.Source{{Principals: []string{fleetSA}}}, Ports: []int{8081}},
		policy.Rule{From: []policy.Source{{NotPrincipals: []string{fleetSA}, NotNamespaces: []string{"team-b"}}}, Ports: []int{8080, 9090}},
		policy.Rule{},
	)
	assert.Equal(t, "security.istio.io/v1", u.GetAPIVersion())
	assert.Equal(t, "AuthorizationPolicy", u.GetKind())
	got := authzeval.FromUnstructured(u, map[string]string{"app": "vault"})
	assert.Equal(t, authzeval.Policy{Name: "team-a/p", Action: "ALLOW", Selects: true, Rules: []authzeval.Rule{
		{From: []authzeval.Source{{Principals: []string{fleetSA}}}, To: []int{8081}},
		{From: []authzeval.Source{{NotPrincipals: []string{fleetSA}, NotNamespaces: []string{"team-b"}}}, To: []int{8080, 9090}},
		{},
	}}, got)
	assert.False(t, authzeval.FromUnstructured(u, map[string]string{"app": "web"}).Selects)
}

func TestAllowWithoutRulesAdmitsNothing(t *testing.T) {
	u := policy.AuthorizationPolicy(obj, nil, policy.Allow)
	_, hasRules := u.Object["spec"].(map[string]any)["rules"]
	assert.False(t, hasRules)
	_, hasSelector := u.Object["spec"].(map[string]any)["selector"]
	assert.False(t, hasSelector, "nil selector: namespace-wide")
	p := authzeval.FromUnstructured(u, map[string]string{"any": "pod"})
	d := authzeval.Evaluate("STRICT", []authzeval.Policy{p}, authzeval.Request{MTLS: true, Principal: "cluster.local/ns/team-a/sa/x", Namespace: "team-a", Port: 8080})
	assert.False(t, d.Allowed)
}

func TestPeerAuthenticationPieces(t *testing.T) {
	ns := policy.PeerAuthentication(obj, nil, policy.Strict, nil)
	port := policy.PeerAuthentication(obj, map[string]string{"app": "vault"}, "", map[int]string{8081: policy.Permissive})
	pas := []unstructured.Unstructured{*ns, *port}
	assert.Equal(t, "STRICT", authzeval.MTLSMode(pas, map[string]string{"app": "vault"}, 8080))
	assert.Equal(t, "PERMISSIVE", authzeval.MTLSMode(pas, map[string]string{"app": "vault"}, 8081))
	assert.Equal(t, "STRICT", authzeval.MTLSMode(pas, map[string]string{"app": "web"}, 8081))
}

func TestNetworkPolicyPieces(t *testing.T) {
	assert.Equal(t, map[string]string{"kubernetes.io/metadata.name": "team-a"}, policy.NamespaceNamed("team-a").MatchLabels)
	ports := policy.TCPPorts(8080, policy.HBONEPort)
	assert.Len(t, ports, 2)
	assert.Equal(t, corev1.ProtocolTCP, *ports[1].Protocol)
	assert.Equal(t, 15008, ports[1].Port.IntValue())
	assert.Equal(t, corev1.ProtocolUDP, *policy.Port(corev1.ProtocolUDP, 53).Protocol)
}
