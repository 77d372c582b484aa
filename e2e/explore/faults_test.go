package explore

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestFaultsAreInTheAlphabet: every fault is an env.fault argument, each
// names a shape the proxy answers, and the names say the operator.
func TestFaultsAreInTheAlphabet(t *testing.T) {
	args := faultArgs()
	if args[len(args)-1] != "clear" || len(args) != len(faults)+1 {
		t.Fatalf("env.fault's arguments %v", args)
	}
	for name, f := range faults {
		if !strings.HasPrefix(name, f.operator+"-") {
			t.Errorf("%s: does not start with its operator %s", name, f.operator)
		}
		switch f.fault {
		case harness.Fault403, harness.Fault429, harness.Fault500, harness.FaultTimeout:
		default:
			t.Errorf("%s: unknown fault shape %q", name, f.fault)
		}
		if !strings.HasSuffix(name, "-"+f.fault) {
			t.Errorf("%s: does not end with its shape %s", name, f.fault)
		}
	}
	if !known(Fault) || !known(APIServer) {
		t.Fatal("env.fault and env.apiserver must be in the alphabet")
	}
}

// withPolicyAndFleet is a state with fleet a (deleting or not) and, if
// policy, its NetworkPolicy.
func withPolicyAndFleet(t *testing.T, sec int, policy bool, deleting bool) *snapshot {
	f := fleet("a", 2)
	if deleting {
		f.obj.(*fleetv1.CelldFleet).DeletionTimestamp = &metav1.Time{Time: t0}
		f.obj.(*fleetv1.CelldFleet).Finalizers = []string{"x"}
	}
	objs := []typed{f}
	if policy {
		objs = append(objs, fleetPolicy("a"))
	}
	return state(t, sec, "DELETED networkpolicies x1-app/a", objs...)
}

// TestFleetPolicyDeletedWhileHeld (invariant (a), the fleet's part): a
// fleet's NetworkPolicy deleted while a fault holds is a violation; kept,
// deleted with its fleet, deleted by hand just before, or outside a hold,
// it is not.
func TestFleetPolicyDeletedWhileHeld(t *testing.T) {
	w := testWorld()
	before := withPolicyAndFleet(t, 0, true, false)
	if got := fleetPolicyDeleted(w, before, withPolicyAndFleet(t, 1, true, false), nil); got != nil {
		t.Fatalf("kept: %q", got)
	}
	got := fleetPolicyDeleted(w, before, withPolicyAndFleet(t, 1, false, false), nil)
	if len(got) != 1 || got[0] != "fleet a's NetworkPolicy x1-app/a was deleted" {
		t.Fatalf("deleted: %q", got)
	}
	if got := fleetPolicyDeleted(w, before, withPolicyAndFleet(t, 1, false, true), nil); got != nil {
		t.Fatalf("deleted with its fleet: %q", got)
	}
	if got := fleetPolicyDeleted(w, before, withPolicyAndFleet(t, 1, false, false), []time.Time{t0}); got != nil {
		t.Fatalf("deleted by hand (env.handedit) 1 s before: %q", got)
	}
	if got := fleetPolicyDeleted(w, before, withPolicyAndFleet(t, 10, false, false), []time.Time{t0}); len(got) != 1 {
		t.Fatalf("a hand edit 10 s before excuses nothing: %q", got)
	}

	// Through checkHeld: only inside the fault's hold, and the violation
	// names the fault.
	rec := faultRecord{name: "fleet-networkpolicies-500", spec: faults["fleet-networkpolicies-500"]}
	for _, tc := range []struct {
		name string
		h    hold
		want bool
	}{
		{"during the fault", hold{why: rec.why(), from: t0.Add(-time.Minute)}, true},
		{"within the grace after it", hold{why: rec.why(), from: t0.Add(-time.Minute), until: t0.Add(2 * time.Second)}, true},
		{"after the grace", hold{why: rec.why(), from: t0.Add(-time.Minute), until: t0}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(w)
			j.holds = []hold{tc.h}
			j.checkHeld(before, 1)
			j.checkHeld(withPolicyAndFleet(t, 1, false, false), 2)
			if (len(j.violations) > 0) != tc.want {
				t.Fatalf("violations %q, want some: %t", j.violations, tc.want)
			}
			if tc.want && !strings.Contains(j.violations[0], "while the API server answers the fleet operator's every request on networkpolicies with 500 (env.fault fleet-networkpolicies-500): fleet a's NetworkPolicy x1-app/a was deleted") {
				t.Fatalf("violation %q does not name the fault", j.violations[0])
			}
		})
	}
}

// meshWith is a state whose ServiceMesh has the given Ready condition
// (none when status is "").
func meshWith(t *testing.T, sec int, status, reason, msg string) *snapshot {
	m := map[string]any{"apiVersion": "core.navique.com/v1alpha1", "kind": "ServiceMesh", "metadata": map[string]any{"name": "cluster"}}
	if status != "" {
		m["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": status, "reason": reason, "message": msg}}}
	}
	return state(t, sec, "MODIFIED servicemeshes /cluster", typed{gvrMeshes, &unstructured.Unstructured{Object: m}})
}

// TestFaultStatus (invariant (b)): a fault that keeps the mesh operator's
// steps failing for longer than statusBound must show in the ServiceMesh's
// status within statusBound of its first failed step.
func TestFaultStatus(t *testing.T) {
	documented := func(r string) bool { return r == "ReconcileError" || r == "LicenseUnreadable" }
	biting := harness.FaultStats{Requests: 9, Steps: 9, StepFirst: t0.Add(10 * time.Second), StepLast: t0.Add(40 * time.Second)}
	judge := func(stats harness.FaultStats, states ...*snapshot) []string {
		j := newJudgement(testWorld())
		j.documented = documented
		j.faults = []faultWatch{{faultRecord: faultRecord{name: "mesh-license-500", spec: faults["mesh-license-500"], operator: "mesh", stats: stats}}}
		for _, s := range states {
			j.checkFaultStatus(s)
		}
		return j.faultStatusVerdicts()
	}
	ready := func(sec int) *snapshot { return meshWith(t, sec, "True", "Ready", "ready") }
	failing := func(sec int, reason string) *snapshot {
		return meshWith(t, sec, "False", reason, "reading the license Secret: Internal error occurred")
	}
	wantViolation(t, judge(biting, ready(0), failing(12, "ReconcileError"), ready(45)))
	// Ready stays True while EnrollmentFailed says the pass over the
	// namespaces failed (the second api-faults run: a PeerAuthentication
	// list answered 500).
	enrollmentFailed := func(sec int, status string) *snapshot {
		s := ready(sec)
		u := s.objs[gvrMeshes]["/cluster"]
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		conds = append(conds, map[string]any{"type": "EnrollmentFailed", "status": status, "reason": "EnrollmentStepFailed", "message": "listing PeerAuthentications: Internal error occurred"})
		_ = unstructured.SetNestedSlice(u.Object, conds, "status", "conditions")
		return s
	}
	documented = func(r string) bool {
		return r == "ReconcileError" || r == "LicenseUnreadable" || r == "EnrollmentStepFailed"
	}
	wantViolation(t, judge(biting, ready(0), enrollmentFailed(11, "True"), ready(45)))
	wantViolation(t, judge(biting, ready(0), enrollmentFailed(11, "False"), ready(45)), "but the ServiceMesh never said so")
	wantViolation(t, judge(biting, failing(5, "LicenseUnreadable"), ready(45)))
	wantViolation(t, judge(biting, ready(0), ready(30)), "env.fault mesh-license-500 failed 9 steps of the mesh operator", "but the ServiceMesh never said so")
	wantViolation(t, judge(biting, ready(0), failing(22, "ReconcileError")))
	wantViolation(t, judge(biting, ready(0), failing(23, "ReconcileError")), "its status said so only 13s later")
	wantViolation(t, judge(biting, ready(0), failing(12, "NotAReason")), "but the ServiceMesh never said so")
	wantViolation(t, judge(biting, ready(0), meshWith(t, 12, "False", "ReconcileError", "")), "but the ServiceMesh never said so")
	// A fault that failed steps only briefly is not judged.
	brief := harness.FaultStats{Requests: 2, Steps: 2, StepFirst: t0.Add(10 * time.Second), StepLast: t0.Add(12 * time.Second)}
	wantViolation(t, judge(brief, ready(0), ready(30)))
	wantViolation(t, judge(harness.FaultStats{}, ready(0), ready(30)))
}

// TestFaultStatusFleets: for a fleet operator's fault one fleet of the app
// namespace saying so suffices; a fleet being deleted does not count.
func TestFaultStatusFleets(t *testing.T) {
	biting := harness.FaultStats{Requests: 5, Steps: 5, StepFirst: t0.Add(10 * time.Second), StepLast: t0.Add(40 * time.Second)}
	withReady := func(sec int, status string, deleting bool) *snapshot {
		f := fleet("a", 2)
		cf := f.obj.(*fleetv1.CelldFleet)
		cf.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionStatus(status), Reason: "ReconcileError", Message: "applying NetworkPolicy x1-app/a: Internal error occurred"}}
		if deleting {
			cf.DeletionTimestamp, cf.Finalizers = &metav1.Time{Time: t0}, []string{"x"}
		}
		return state(t, sec, "MODIFIED celldfleets x1-app/a", f, fleet("b", 1))
	}
	for _, tc := range []struct {
		name   string
		states []*snapshot
		want   []string
	}{
		{"fleet a says so", []*snapshot{withReady(0, "True", false), withReady(11, "False", false)}, nil},
		{"no fleet says so", []*snapshot{withReady(0, "True", false), withReady(30, "True", false)}, []string{"but no fleet of x1-app ever said so"}},
		{"only a deleting fleet says so", []*snapshot{withReady(0, "True", false), withReady(11, "False", true)}, []string{"but no fleet of x1-app ever said so"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(testWorld())
			j.documented = func(r string) bool { return r == "ReconcileError" }
			j.faults = []faultWatch{{faultRecord: faultRecord{name: "fleet-networkpolicies-500", spec: faults["fleet-networkpolicies-500"], operator: "fleet", stats: biting}}}
			for _, s := range tc.states {
				j.checkFaultStatus(s)
			}
			wantViolation(t, j.faultStatusVerdicts(), tc.want...)
		})
	}
}

// TestFrozenEdge: a routing source's connection into a STRICT namespace
// that has not accepted its edge is excused while a hold freezes the mesh
// operator, and only then.
func TestFrozenEdge(t *testing.T) {
	strictPA := func(accepted string) typed {
		pa := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "security.istio.io/v1", "kind": "PeerAuthentication",
			"metadata": map[string]any{"namespace": "x1-app", "name": meshMTLSPolicy}, "spec": map[string]any{"mtls": map[string]any{"mode": "STRICT"}}}}
		if accepted != "" {
			pa.SetAnnotations(map[string]string{labels.MeshStrictEdges: accepted})
		}
		return typed{gvrPAs, pa}
	}
	src := caller{name: edgePod, namespace: "x1-edge"}
	dst := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x1-app", Name: "a-1"}}
	meshFault := faultRecord{name: "mesh-license-403", spec: faults["mesh-license-403"]}
	fleetFault := faultRecord{name: "fleet-networkpolicies-500", spec: faults["fleet-networkpolicies-500"]}
	for _, tc := range []struct {
		name  string
		holds []hold
		pa    typed
		src   caller
		want  bool
	}{
		{"license unreadable, edge not accepted", []hold{{why: licenseUnreadable, from: t0}}, strictPA(""), src, true},
		{"a mesh operator's fault", []hold{{why: meshFault.why(), from: t0}}, strictPA("x1-other"), src, true},
		{"the API server restarting", []hold{{why: apiServerRestart, from: t0}}, strictPA(""), src, true},
		{"no hold", nil, strictPA(""), src, false},
		{"the hold is over", []hold{{why: licenseUnreadable, from: t0, until: t0.Add(time.Second)}}, strictPA(""), src, false},
		{"a fleet operator's fault", []hold{{why: fleetFault.why(), from: t0}}, strictPA(""), src, false},
		{"the edge was accepted", []hold{{why: licenseUnreadable, from: t0}}, strictPA("x1-other,x1-edge"), src, false},
		{"a caller of the namespace itself", []hold{{why: licenseUnreadable, from: t0}}, strictPA(""), caller{name: "client-a", namespace: "x1-app"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(testWorld())
			j.holds = tc.holds
			if got := j.frozenEdge(state(t, 5, "MODIFIED pods x1-app/a-1", tc.pa), tc.src, dst); got != tc.want {
				t.Fatalf("frozenEdge = %t, want %t", got, tc.want)
			}
		})
	}
}
