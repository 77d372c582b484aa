package enroll_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	. "github.com/ericdev/fleetmesh/shared/authzeval" //nolint:revive // the truth tables read as the evaluator's own vocabulary
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

const (
	fleetSA    = "cluster.local/ns/team-a/sa/fleet-x"
	operatorSA = "cluster.local/ns/fleet-system/sa/fleet-operator"
	appSA      = "cluster.local/ns/team-a/sa/app"
	foreignSA  = "cluster.local/ns/team-b/sa/client"
	gatewaySA  = "cluster.local/ns/istio-system/sa/ingress"
	routingSA  = "cluster.local/ns/ingress/sa/gateway"
)

// fleetAllow is a fleet's own L4 ALLOW policy (the fleet operator's
// NAME-mesh): the peer port 8081 only from the fleet's and its operator's
// identities, the application port 8080 from the namespace.
var fleetAllow = Policy{Action: "ALLOW", Selects: true, Rules: []Rule{
	{From: []Source{{Principals: []string{fleetSA, operatorSA}}}, To: []int{8081}},
	{From: []Source{{Namespaces: []string{"team-a"}}}, To: []int{8080}},
}}

var requests = []struct {
	name string
	req  Request
}{
	{"fleet peer :8081", Request{MTLS: true, Principal: fleetSA, Namespace: "team-a", Port: 8081}},
	{"other SA same ns :8081", Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 8081}},
	{"fleet operator (edge) :8081", Request{MTLS: true, Principal: operatorSA, Namespace: "fleet-system", Port: 8081}},
	{"foreign ns :8081", Request{MTLS: true, Principal: foreignSA, Namespace: "team-b", Port: 8081}},
	{"foreign ns :8080", Request{MTLS: true, Principal: foreignSA, Namespace: "team-b", Port: 8080}},
	{"same ns :8080", Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 8080}},
	{"gateway :8080", Request{MTLS: true, Principal: gatewaySA, Namespace: "istio-system", Port: 8080}},
	{"plaintext :8080", Request{Port: 8080}},
}

var owner = *metav1.NewControllerRef(&v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: "u"}}, v1alpha1.GroupVersion.WithKind("ServiceMesh"))

// meshPolicies builds team-a's policy set with the real builders for the
// mTLS mode in force (a contract value) and returns the mode the evaluator
// reads from the PeerAuthentication, and the AuthorizationPolicies as they
// apply to a workload with podLabels.
func meshPolicies(t *testing.T, mode string, iso v1alpha1.Isolation, podLabels map[string]string, edges ...string) (string, []Policy) {
	t.Helper()
	set := enroll.PolicySet(enroll.PolicyInputs{Namespace: "team-a", Isolation: iso, Mode: mode,
		Allowed: enroll.AllowedSources("team-a", []string{"istio-system"}, edges), Owner: owner}).All()
	require.Equal(t, enroll.KindPeerAuthentication, set[0].GetKind())
	// The namespace-wide PeerAuthentication sets one mode for every port.
	istioMode := MTLSMode([]unstructured.Unstructured{*set[0]}, podLabels, 8080)
	var out []Policy
	for _, u := range set[1:] {
		out = append(out, FromUnstructured(u, podLabels))
	}
	return istioMode, out
}

func verdict(d Decision) string { return map[bool]string{true: "allow", false: "deny"}[d.Allowed] }

func table(mode string, policies []Policy) []string {
	out := make([]string, len(requests))
	for i, r := range requests {
		d := Evaluate(mode, policies, r.req)
		out[i] = fmt.Sprintf("%-28s %s", r.name, map[bool]string{true: "allow", false: "deny"}[d.Allowed])
	}
	return out
}

// TestFleetAllowStaysNarrow: under every isolation level and mTLS mode, the
// fleet workload admits exactly what its own ALLOW admitted without
// isolation (given the fleet declared its operator's namespace as an
// edge); a namespace-wide ALLOW would have widened it.
func TestFleetAllowStaysNarrow(t *testing.T) {
	for _, mode := range []string{contract.MTLSStrict, contract.MTLSPermissive} {
		istioMode, _ := meshPolicies(t, mode, v1alpha1.IsolationOff, nil)
		want := table(istioMode, []Policy{fleetAllow})
		assert.Equal(t, []string{
			"fleet peer :8081             allow",
			"other SA same ns :8081       deny",
			"fleet operator (edge) :8081  allow",
			"foreign ns :8081             deny",
			"foreign ns :8080             deny",
			"same ns :8080                allow",
			"gateway :8080                deny",
			"plaintext :8080              deny",
		}, want, mode)
		for _, iso := range []v1alpha1.Isolation{v1alpha1.IsolationOff, v1alpha1.IsolationNamespace, v1alpha1.IsolationStrict} {
			m, set := meshPolicies(t, mode, iso, nil, "fleet-system")
			got := table(m, append(set, fleetAllow))
			assert.Equal(t, want, got, "%s/%s: isolation must not change the fleet's own policy", mode, iso)
		}
		// The counterfactual the contract forbids: a namespace-wide ALLOW for the allowed set.
		wide := Policy{Action: "ALLOW", Selects: true, Rules: []Rule{{From: []Source{{Namespaces: []string{"team-a", "istio-system", "fleet-system"}}}}}}
		got := table(istioMode, []Policy{wide, fleetAllow})
		assert.Equal(t, "other SA same ns :8081       allow", got[1], "a namespace-wide ALLOW widens the fleet's peer port")
		assert.Equal(t, "gateway :8080                allow", got[6])
	}
}

// TestIsolationTruthTable: a workload without policies of its own.
func TestIsolationTruthTable(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		iso   v1alpha1.Isolation
		edges []string
		want  []string
	}{
		{contract.MTLSStrict, v1alpha1.IsolationOff, nil, []string{"allow", "allow", "allow", "allow", "allow", "allow", "allow", "deny"}},
		{contract.MTLSPermissive, v1alpha1.IsolationOff, nil, []string{"allow", "allow", "allow", "allow", "allow", "allow", "allow", "allow"}},
		{contract.MTLSStrict, v1alpha1.IsolationNamespace, []string{"fleet-system"}, []string{"allow", "allow", "allow", "deny", "deny", "allow", "allow", "deny"}},
		{contract.MTLSStrict, v1alpha1.IsolationNamespace, nil, []string{"allow", "allow", "deny", "deny", "deny", "allow", "allow", "deny"}},
		// While PERMISSIVE (cutover pending, maintenance) the DENY never drops plaintext.
		{contract.MTLSPermissive, v1alpha1.IsolationNamespace, []string{"fleet-system"}, []string{"allow", "allow", "allow", "deny", "deny", "allow", "allow", "allow"}},
		// strict while STRICT: the allow-nothing baseline; a workload
		// without an ALLOW of its own admits nothing, edges or not.
		{contract.MTLSStrict, v1alpha1.IsolationStrict, []string{"fleet-system"}, []string{"deny", "deny", "deny", "deny", "deny", "deny", "deny", "deny"}},
		{contract.MTLSStrict, v1alpha1.IsolationStrict, nil, []string{"deny", "deny", "deny", "deny", "deny", "deny", "deny", "deny"}},
		// strict while PERMISSIVE: no baseline, so exactly namespace
		// isolation, and plaintext is not dropped.
		{contract.MTLSPermissive, v1alpha1.IsolationStrict, []string{"fleet-system"}, []string{"allow", "allow", "allow", "deny", "deny", "allow", "allow", "allow"}},
	} {
		mode, set := meshPolicies(t, tc.mode, tc.iso, nil, tc.edges...)
		var got []string
		for _, r := range requests {
			got = append(got, verdict(Evaluate(mode, set, r.req)))
		}
		assert.Equal(t, tc.want, got, "%s %s edges=%v", tc.mode, tc.iso, tc.edges)
	}
}

// fleetLabels are a fleet member's Pod labels; realFleetAllow is shaped
// exactly like the fleet operator's NAME-mesh ALLOW with applicationAccess
// AllowAll (fleet-operator/internal/mesh.AuthorizationPolicy): selected by
// the fleet label, 8081 only from the fleet's and its operator's
// identities, 8080 from any caller.
var (
	fleetLabels    = map[string]string{labels.Fleet: "x", "app.kubernetes.io/instance": "x"}
	realFleetAllow = &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{labels.Fleet: "x"}},
		"action":   "ALLOW",
		"rules": []any{
			map[string]any{
				"to":   []any{map[string]any{"operation": map[string]any{"ports": []any{"8081"}}}},
				"from": []any{map[string]any{"source": map[string]any{"principals": []any{fleetSA, operatorSA}}}},
			},
			map[string]any{"to": []any{map[string]any{"operation": map[string]any{"ports": []any{"8080"}}}}},
		},
	}}}
)

var crossRequests = []struct {
	name string
	req  Request
}{
	{"fleet peer :8081", Request{MTLS: true, Principal: fleetSA, Namespace: "team-a", Port: 8081}},
	{"same ns other SA :8081", Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 8081}},
	{"same ns other SA :8080", Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 8080}},
	{"fleet operator :8081", Request{MTLS: true, Principal: operatorSA, Namespace: "fleet-system", Port: 8081}},
	{"routing source :8080", Request{MTLS: true, Principal: routingSA, Namespace: "ingress", Port: 8080}},
	{"routing source :8081", Request{MTLS: true, Principal: routingSA, Namespace: "ingress", Port: 8081}},
	{"foreign ns :8080", Request{MTLS: true, Principal: foreignSA, Namespace: "team-b", Port: 8080}},
	{"plaintext :8080", Request{Port: 8080}},
	{"plaintext :8081", Request{Port: 8081}},
}

func crossTable(mode string, policies []Policy) []string {
	out := make([]string, len(crossRequests))
	for i, r := range crossRequests {
		out[i] = fmt.Sprintf("%-24s %s", r.name, verdict(Evaluate(mode, policies, r.req)))
	}
	return out
}

// TestStrictIsolationWithFleetAllow: under strict, a fleet member admits
// exactly what its own ALLOW admits, a cross-namespace source only if its
// namespace is a declared edge AND the fleet's ALLOW admits it, and a
// workload of the same namespace without an ALLOW of its own admits
// nothing, whatever the edges.
func TestStrictIsolationWithFleetAllow(t *testing.T) {
	edges := []string{"fleet-system", "ingress"}
	mode, set := meshPolicies(t, contract.MTLSStrict, v1alpha1.IsolationStrict, fleetLabels, edges...)
	require.Len(t, set, 2, "the isolation DENY and the baseline")
	fleet := append(set, FromUnstructured(realFleetAllow, fleetLabels))
	assert.Equal(t, []string{
		"fleet peer :8081         allow",
		"same ns other SA :8081   deny",
		"same ns other SA :8080   allow",
		"fleet operator :8081     allow",
		"routing source :8080     allow",
		"routing source :8081     deny",
		"foreign ns :8080         deny",
		"plaintext :8080          deny",
		"plaintext :8081          deny",
	}, crossTable(mode, fleet), "edge declared and own ALLOW admits: allowed; own ALLOW does not admit (8081): denied")

	// Exactly as narrow as the fleet's ALLOW alone, except where the edge is missing.
	own := crossTable(mode, []Policy{FromUnstructured(realFleetAllow, fleetLabels)})
	assert.Equal(t, "foreign ns :8080         allow", own[6], "without isolation the fleet's 8080 rule admits anyone")
	for i, line := range crossTable(mode, fleet) {
		if i != 6 {
			assert.Equal(t, own[i], line, "strict changes nothing the fleet's own ALLOW decides for its edges and namespace")
		}
	}

	// No edge for the routing source: the DENY stops it before the fleet's ALLOW.
	mode, set = meshPolicies(t, contract.MTLSStrict, v1alpha1.IsolationStrict, fleetLabels, "fleet-system")
	got := crossTable(mode, append(set, FromUnstructured(realFleetAllow, fleetLabels)))
	assert.Equal(t, "routing source :8080     deny", got[4], "an undeclared namespace is denied even where the own ALLOW admits")
	assert.Equal(t, "fleet operator :8081     allow", got[3])

	// Another workload of the namespace, not selected by the fleet's ALLOW:
	// the baseline leaves it admitting nothing, edges included.
	other := map[string]string{"app": "other"}
	mode, set = meshPolicies(t, contract.MTLSStrict, v1alpha1.IsolationStrict, other, edges...)
	for _, line := range crossTable(mode, append(set, FromUnstructured(realFleetAllow, other))) {
		assert.True(t, strings.HasSuffix(line, " deny"), "a declared edge grants nothing by itself: %s", line)
	}

	// The reading strict does not implement: the edges as a namespace-wide
	// ALLOW would let the routing source reach the fleet's peer port.
	wide := Policy{Action: "ALLOW", Selects: true, Rules: []Rule{{From: []Source{{Namespaces: edges}}}}}
	mode, set = meshPolicies(t, contract.MTLSStrict, v1alpha1.IsolationStrict, fleetLabels, edges...)
	got = crossTable(mode, append(set, wide, FromUnstructured(realFleetAllow, fleetLabels)))
	assert.Equal(t, "routing source :8081     allow", got[5], "a namespace-wide ALLOW for the edges widens the fleet's 8081 rule")
}

// TestStrictIsolationPermissive: while the mode in force is PERMISSIVE
// (awaiting the cutover, a maintenance window, mtls.mode permissive) the
// baseline is absent and strict is namespace isolation: plaintext is not
// dropped, neither for the fleet nor for a workload without policies.
func TestStrictIsolationPermissive(t *testing.T) {
	edges := []string{"fleet-system", "ingress"}
	mode, set := meshPolicies(t, contract.MTLSPermissive, v1alpha1.IsolationStrict, fleetLabels, edges...)
	assert.Equal(t, "PERMISSIVE", mode)
	require.Len(t, set, 1, "no baseline while PERMISSIVE")
	nsMode, nsSet := meshPolicies(t, contract.MTLSPermissive, v1alpha1.IsolationNamespace, fleetLabels, edges...)
	fleet := crossTable(mode, append(set, FromUnstructured(realFleetAllow, fleetLabels)))
	assert.Equal(t, crossTable(nsMode, append(nsSet, FromUnstructured(realFleetAllow, fleetLabels))), fleet)
	assert.Equal(t, "plaintext :8080          allow", fleet[7])
	assert.Equal(t, "plaintext :8081          deny", fleet[8], "the fleet's own peer rule still wants an identity")

	bare := crossTable(mode, set)
	assert.Equal(t, "plaintext :8080          allow", bare[7], "an un-meshed client still reaches a workload without policies")
	assert.Equal(t, "plaintext :8081          allow", bare[8])
	assert.Equal(t, "foreign ns :8080         deny", bare[6], "isolation still applies to authenticated traffic")
}
