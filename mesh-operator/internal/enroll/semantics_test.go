package enroll_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	. "github.com/ericdev/fleetmesh/shared/authzeval" //nolint:revive // the truth tables read as the evaluator's own vocabulary
)

const (
	fleetSA    = "cluster.local/ns/team-a/sa/fleet-x"
	operatorSA = "cluster.local/ns/fleet-system/sa/fleet-operator"
	appSA      = "cluster.local/ns/team-a/sa/app"
	foreignSA  = "cluster.local/ns/team-b/sa/client"
	gatewaySA  = "cluster.local/ns/istio-system/sa/ingress"
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

func isolation(iso v1alpha1.Isolation, edges ...string) []Policy {
	owner := *metav1.NewControllerRef(&v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: "u"}}, v1alpha1.GroupVersion.WithKind("ServiceMesh"))
	u := enroll.IsolationPolicy("team-a", iso, enroll.AllowedSources("team-a", []string{"istio-system"}, edges), owner)
	if u == nil {
		return nil
	}
	return []Policy{FromUnstructured(u, nil)}
}

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
	for _, mode := range []string{"STRICT", "PERMISSIVE"} {
		want := table(mode, []Policy{fleetAllow})
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
			got := table(mode, append(isolation(iso, "fleet-system"), fleetAllow))
			assert.Equal(t, want, got, "%s/%s: isolation must not change the fleet's own policy", mode, iso)
		}
		// The counterfactual the contract forbids: a namespace-wide ALLOW for the allowed set.
		wide := Policy{Action: "ALLOW", Selects: true, Rules: []Rule{{From: []Source{{Namespaces: []string{"team-a", "istio-system", "fleet-system"}}}}}}
		got := table(mode, []Policy{wide, fleetAllow})
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
		{"STRICT", v1alpha1.IsolationOff, nil, []string{"allow", "allow", "allow", "allow", "allow", "allow", "allow", "deny"}},
		{"PERMISSIVE", v1alpha1.IsolationOff, nil, []string{"allow", "allow", "allow", "allow", "allow", "allow", "allow", "allow"}},
		{"STRICT", v1alpha1.IsolationNamespace, []string{"fleet-system"}, []string{"allow", "allow", "allow", "deny", "deny", "allow", "allow", "deny"}},
		{"STRICT", v1alpha1.IsolationNamespace, nil, []string{"allow", "allow", "deny", "deny", "deny", "allow", "allow", "deny"}},
		// While PERMISSIVE (cutover pending, maintenance) the DENY never drops plaintext.
		{"PERMISSIVE", v1alpha1.IsolationNamespace, []string{"fleet-system"}, []string{"allow", "allow", "allow", "deny", "deny", "allow", "allow", "allow"}},
		{"STRICT", v1alpha1.IsolationStrict, []string{"fleet-system"}, []string{"allow", "allow", "allow", "deny", "deny", "allow", "allow", "deny"}},
	} {
		var got []string
		for _, r := range requests {
			got = append(got, map[bool]string{true: "allow", false: "deny"}[Evaluate(tc.mode, isolation(tc.iso, tc.edges...), r.req).Allowed])
		}
		assert.Equal(t, tc.want, got, "%s %s edges=%v", tc.mode, tc.iso, tc.edges)
	}
}
