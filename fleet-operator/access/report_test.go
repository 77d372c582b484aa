package access

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/shared/golden"
)

var stateNames = []string{"fleet-only", "no-mesh", "routing", "sidecar-meshed", "sidecar-mixed-roll", "ambient-namespace-isolation", "ambient-namespace-permissive", "ambient-strict-isolation"}

// TestReportGolden pins the default and the wide table and the JSON for
// every recorded state.
func TestReportGolden(t *testing.T) {
	// With -update the states are rewritten in the same run
	// (TestRecordedStates); judge what they are becoming.
	var composed map[string]*Snapshot
	if golden.Updating() {
		composed = composeStates(t)
	}
	for _, name := range stateNames {
		t.Run(name, func(t *testing.T) {
			s := composed[name]
			if s == nil {
				s = loadState(t, name)
			}
			r, err := Compute(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var table, wide, js bytes.Buffer
			if err := r.Table(&table); err != nil {
				t.Fatal(err)
			}
			if err := r.WideTable(&wide); err != nil {
				t.Fatal(err)
			}
			if err := r.JSON(&js); err != nil {
				t.Fatal(err)
			}
			golden.AssertFile(t, "report/"+name+".txt", table.Bytes())
			golden.AssertFile(t, "report/"+name+".wide.txt", wide.Bytes())
			// The JSON schema is pinned on two states, for one member: the
			// table goldens already hold every verdict.
			if name == "fleet-only" || name == "ambient-namespace-isolation" {
				one, err := r.Filter("", "vault-0")
				if err != nil {
					t.Fatal(err)
				}
				js.Reset()
				if err := one.JSON(&js); err != nil {
					t.Fatal(err)
				}
				golden.AssertFile(t, "report/"+name+".vault-0.json", js.Bytes())
			}
		})
	}
}

// Callers given in Options are judged like live ones and classified by
// namespace, labels and mesh membership.
func TestExtraCallers(t *testing.T) {
	s := loadState(t, "ambient-namespace-isolation")
	r, err := Compute(s, Options{Callers: []Caller{
		{Name: "x/app", Namespace: fleetNS, Labels: map[string]string{"celld.eric.dev/client-of": "vault"}, ServiceAccount: "app", Meshed: true},
		{Name: "x/lookalike", Namespace: "payments", Labels: map[string]string{"celld.eric.dev/client-of": "vault", "app": "edge-proxy"}, ServiceAccount: "default", Meshed: true},
		{Name: "x/edge", Namespace: edgeNS, Labels: map[string]string{"app": "edge-proxy"}, ServiceAccount: "edge", Meshed: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		class   string
		allowed bool
		istio   string
	}{
		"x/app":       {ClassClient, true, "team-a/vault-mesh"},
		"x/lookalike": {ClassOtherMeshed, false, "team-a/mesh-isolation"},
		"x/edge":      {ClassRoutingSource, true, "team-a/vault-mesh"},
	}
	seen := 0
	for _, e := range r.Ingress {
		w, ok := want[e.Caller.Name]
		if !ok || e.Member != "vault-0" || e.Port != 8080 {
			continue
		}
		seen++
		if e.Caller.Class != w.class || e.Allowed != w.allowed || e.Istio.Policy != w.istio || e.WirePort != 15008 {
			t.Errorf("%s: class %s allowed %t istio %s wire %d; want %+v", e.Caller.Name, e.Caller.Class, e.Allowed, e.Istio.Policy, e.WirePort, w)
		}
	}
	if seen != len(want) {
		t.Errorf("judged %d of %d extra callers", seen, len(want))
	}
}

// With no operator Pod in sight its mesh identity is unknown, so the
// report shows the operator both with and without one.
func TestOperatorNotVisible(t *testing.T) {
	s := loadState(t, "sidecar-meshed")
	s.Pods = slices.DeleteFunc(s.Pods, func(p corev1.Pod) bool { return p.Namespace == opNS })
	r, err := Compute(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range r.Ingress {
		if e.Member == "vault-0" && e.Port == 8081 && e.Caller.Class == ClassOperator {
			got[e.Caller.Name] = e.Allowed
		}
	}
	want := map[string]bool{"(the fleet operator, with a sidecar)": true, "(the fleet operator, without mesh identity)": false}
	if !maps.Equal(got, want) {
		t.Errorf("operator rows on 8081: %v, want %v", got, want)
	}
}

// TestSidecarRollEveryState judges every state a fleet passes through while
// it rolls into the sidecar mesh one member at a time (the policies as
// mesh.Decide says for each) and, since the roll is only as safe as its
// worst moment, holds the same promises at each: members reach each other
// on 8081, the operator reaches 8081, nothing else does, and labelled
// clients keep 8080.
func TestSidecarRollEveryState(t *testing.T) {
	netParams := network.Params{OperatorNamespace: opNS, OperatorPodLabels: opLabels}
	meshParams := mesh.Params{OperatorNamespace: opNS, OperatorServiceAccount: "fleet-operator", TrustDomain: "cluster.local"}
	f := fleet(false)
	f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{ControlPlaneNamespace: "istio-system"}}
	for rolled := 0; rolled <= 3; rolled++ {
		t.Run(fmt.Sprintf("%d of 3 members with a proxy", rolled), func(t *testing.T) {
			var obs []mesh.Pod
			var pods []corev1.Pod
			// The StatefulSet rolls from the highest ordinal down.
			for i := range 3 {
				proxy := i >= 3-rolled
				obs = append(obs, mesh.Pod{Name: fmt.Sprintf("vault-%d", i), Revision: map[bool]string{true: "b", false: "a"}[proxy], Proxy: proxy})
				if proxy {
					pods = append(pods, member(f, i, sidecar))
				} else {
					pods = append(pods, member(f, i))
				}
			}
			st := mesh.Decide(mesh.Observation{Desired: true, TargetRevision: "b", Pods: obs})
			r, err := Compute(sidecarState(f, st, netParams, meshParams, pods), Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range r.Violations(8081, ClassMember, ClassOperator) {
				t.Errorf("%s: %s (%s) reaches %s:8081 (network: %s; istio: %s)", st.Phase, v.Caller.Name, v.Caller.Class, v.Member, networkRule(v.Network), v.Istio.Rule)
			}
			for _, e := range r.Ingress {
				mustReach := (e.Port == 8081 && e.Caller.Live && (e.Caller.Class == ClassMember || e.Caller.Class == ClassOperator)) ||
					(e.Port == 8080 && e.Caller.Live && e.Caller.Class == ClassClient)
				if mustReach && !e.Allowed {
					t.Errorf("%s: %s (%s) cannot reach %s:%d (network: %s; istio: %s)", st.Phase, e.Caller.Name, e.Caller.Class, e.Member, e.Port, networkRule(e.Network), e.Istio.Rule)
				}
			}
		})
	}
}

// A NetworkPolicy with the fleet's name that the fleet does not own (anyone
// with rights in the namespace could create one) must not tell the report
// who the operator is.
func TestOperatorOnlyFromOwnedPolicies(t *testing.T) {
	s := loadState(t, "no-mesh")
	for i := range s.NetworkPolicies {
		np := &s.NetworkPolicies[i]
		np.OwnerReferences = nil
		np.Spec.Ingress[1].From[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] = "attacker"
	}
	r, err := Compute(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Operator.Namespace != DefaultOperatorNamespace {
		t.Errorf("operator namespace %q taken from a NetworkPolicy the fleet does not own", r.Operator.Namespace)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "not owned by the fleet") }) {
		t.Errorf("no note about the foreign NetworkPolicy: %q", r.Notes)
	}
}

// A fleet with no member running (scaled to zero, or not created yet) is
// judged for the Pod its selector would pick, and says so.
func TestNoMemberRunning(t *testing.T) {
	s := loadState(t, "no-mesh")
	s.Pods = slices.DeleteFunc(s.Pods, func(p corev1.Pod) bool { return strings.HasPrefix(p.Name, "vault-") })
	r, err := Compute(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 1 || r.Members[0].Live {
		t.Fatalf("members %+v", r.Members)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "no member Pod is running") }) {
		t.Errorf("notes %q", r.Notes)
	}
	if v := r.Violations(8081, ClassMember, ClassOperator); len(v) > 0 {
		t.Errorf("8081 open to %+v", v[0].Caller)
	}
	if v := r.Violations(8080, ClassClient); len(v) > 0 {
		t.Errorf("8080 open to %+v", v[0].Caller)
	}
}
