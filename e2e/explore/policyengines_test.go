package explore

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// adversaryState is a snapshot at rv holding objs (and the world's
// namespaces), at t0+sec.
func adversaryState(t *testing.T, rv int64, sec int, objs ...typed) *snapshot {
	t.Helper()
	ns := func(name string) typed {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace"}}
		u.SetName(name)
		return typed{gvrNamespaces, u}
	}
	s := state(t, sec, "MODIFIED something", append([]typed{ns("x1-app"), ns("x1-edge"), ns("x1-other")}, objs...)...)
	s.rv = rv
	return s
}

func obj(gvr typed, mutate ...func(*unstructured.Unstructured)) typed {
	u := gvr.obj.(*unstructured.Unstructured).DeepCopy()
	for _, m := range mutate {
		m(u)
	}
	return typed{gvr.gvr, u}
}

func tenantPolicy() typed {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"spec": map[string]any{"podSelector": map[string]any{}, "policyTypes": []any{"Ingress", "Egress"}}}}
	u.SetNamespace("x1-other")
	u.SetName(tenantNetpol)
	u.SetUID("uid-np")
	return typed{gvrNetpols, u}
}

func fleetIngress(annotations map[string]string) typed {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
		"spec": map[string]any{"ingressClassName": "nginx"}}}
	u.SetNamespace("x1-app")
	u.SetName("a-routing")
	u.SetUID("uid-ing")
	u.SetAnnotations(annotations)
	return typed{gvrIngresses, u}
}

func statefulSet(name string, uid types.UID) typed {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet"}}
	u.SetNamespace("x1-app")
	u.SetName(name)
	u.SetUID(uid)
	return typed{gvrStatefulSets, u}
}

// judgeAdversaries runs check over the states with the record rec.
func judgeAdversaries(rec advRecord, states ...*snapshot) []string {
	j := newJudgement(testWorld())
	j.adv = &advJudge{advRecord: rec}
	for i, s := range states {
		j.checkAdversaries(s, i+1)
	}
	return j.violations
}

// TestStandingObjects: what the admin or a tenant set stands while its
// author has not taken it away: an object is neither deleted, replaced
// nor changed; an annotation reads as set while its object (same UID)
// exists.
func TestStandingObjects(t *testing.T) {
	np := tenantPolicy()
	npStands := standing{who: "the tenant", gvr: gvrNetpols, namespace: "x1-other", name: tenantNetpol, uid: "uid-np",
		fingerprint: fingerprint(np.obj.(*unstructured.Unstructured)), from: 10}
	snippet := map[string]string{labels.NginxConfigurationSnippet: snippetValue, "operator/hash": "1"}
	ingStands := standing{who: "the namespace editor", gvr: gvrIngresses, namespace: "x1-app", name: "a-routing", uid: "uid-ing",
		key: labels.NginxConfigurationSnippet, value: snippetValue, from: 10}
	rec := advRecord{standing: []standing{npStands, ingStands}}
	for _, tc := range []struct {
		name   string
		rec    advRecord
		states []*snapshot
		want   string
	}{
		{"both stand", rec, []*snapshot{adversaryState(t, 11, 1, np, fleetIngress(snippet)), adversaryState(t, 12, 2, np, fleetIngress(snippet))}, ""},
		{"before they were set", rec, []*snapshot{adversaryState(t, 5, 1)}, ""},
		{"the operator's own annotations change", rec, []*snapshot{adversaryState(t, 11, 1, np,
			fleetIngress(map[string]string{labels.NginxConfigurationSnippet: snippetValue, "operator/hash": "2"}))}, ""},
		{"the Ingress went (routing off): so did the annotation", rec, []*snapshot{adversaryState(t, 11, 1, np)}, ""},
		{"a new Ingress without it", rec, []*snapshot{adversaryState(t, 11, 1, np, obj(fleetIngress(nil), func(u *unstructured.Unstructured) { u.SetUID("uid-new") }))}, ""},
		{"the author took them away", advRecord{standing: []standing{withUntil(npStands, 20), withUntil(ingStands, 20)}},
			[]*snapshot{adversaryState(t, 20, 1, fleetIngress(nil))}, ""},
		{"the tenant's NetworkPolicy deleted", rec, []*snapshot{adversaryState(t, 11, 1, fleetIngress(snippet))},
			"the tenant's networkpolicies x1-other/tenant-no-hbone was deleted"},
		{"the tenant's NetworkPolicy replaced", rec, []*snapshot{adversaryState(t, 11, 1, fleetIngress(snippet),
			obj(np, func(u *unstructured.Unstructured) { u.SetUID("uid-other") }))}, "was replaced"},
		{"the tenant's NetworkPolicy changed", rec, []*snapshot{adversaryState(t, 11, 1, fleetIngress(snippet),
			obj(np, func(u *unstructured.Unstructured) {
				u.Object["spec"].(map[string]any)["policyTypes"] = []any{"Ingress"}
			}))}, "was changed"},
		{"the tenant's NetworkPolicy adopted", rec, []*snapshot{adversaryState(t, 11, 1, fleetIngress(snippet),
			obj(np, func(u *unstructured.Unstructured) {
				u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "celld.eric.dev/v1alpha1", Kind: "CelldFleet", Name: "a", UID: "uid-fleet-a"}})
			}))}, "was changed"},
		{"the snippet removed", rec, []*snapshot{adversaryState(t, 11, 1, np, fleetIngress(map[string]string{"operator/hash": "1"}))},
			"the namespace editor's nginx.ingress.kubernetes.io/configuration-snippet=\"more_set_headers \\\"X-Explore: snippet\\\";\" on ingresses x1-app/a-routing was deleted"},
		{"the snippet overwritten", rec, []*snapshot{adversaryState(t, 11, 1, np, fleetIngress(map[string]string{labels.NginxConfigurationSnippet: ""}))},
			"was overwritten: it reads \"\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judgeAdversaries(tc.rec, tc.states...)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			if assert.Len(t, got, 1, "%q", got) {
				assert.Contains(t, got[0], tc.want)
			}
		})
	}
}

func withUntil(s standing, until int64) standing {
	s.until = until
	return s
}

// TestNothingDestructiveWhileRefused: while policy.sts refuses
// StatefulSets, a live fleet's StatefulSet is not deleted or replaced
// (outside the span, or for a fleet being deleted, it may be).
func TestNothingDestructiveWhileRefused(t *testing.T) {
	refusing := advRecord{stsSpans: []span{{from: t0.Add(10 * time.Second), until: t0.Add(20 * time.Second)}}}
	a := fleet("a", 2)
	deleting := obj(typedUnstructured(t, a), func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&metav1.Time{Time: t0}) })
	for _, tc := range []struct {
		name   string
		states []*snapshot
		want   string
	}{
		{"kept", []*snapshot{adversaryState(t, 1, 11, a, statefulSet("a", "s1")), adversaryState(t, 2, 12, a, statefulSet("a", "s1"))}, ""},
		{"deleted before the policy", []*snapshot{adversaryState(t, 1, 5, a, statefulSet("a", "s1")), adversaryState(t, 2, 6, a)}, ""},
		{"deleted after the policy", []*snapshot{adversaryState(t, 1, 21, a, statefulSet("a", "s1")), adversaryState(t, 2, 22, a)}, ""},
		{"the fleet deleted", []*snapshot{adversaryState(t, 1, 11, a, statefulSet("a", "s1")), adversaryState(t, 2, 12, deleting)}, ""},
		{"deleted while refused", []*snapshot{adversaryState(t, 1, 11, a, statefulSet("a", "s1")), adversaryState(t, 2, 12, a)},
			"while explore-statefulset-label refuses StatefulSets, fleet a's StatefulSet x1-app/a was deleted"},
		{"replaced while refused", []*snapshot{adversaryState(t, 1, 11, a, statefulSet("a", "s1")), adversaryState(t, 2, 12, a, statefulSet("a", "s2"))},
			"was deleted (uid s1 -> \"s2\")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := judgeAdversaries(refusing, tc.states...)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			if assert.Len(t, got, 1, "%q", got) {
				assert.Contains(t, got[0], tc.want)
			}
		})
	}
}

func typedUnstructured(t *testing.T, o typed) typed {
	t.Helper()
	s := state(t, 0, "", o)
	for _, u := range s.objs[o.gvr] {
		return typed{o.gvr, u}
	}
	t.Fatal("no object")
	return typed{}
}

// TestPoliciesAtRest: at rest, a fleet a policy in force refuses says so
// in its status, quoting the policy; one it does not refuse need not.
func TestPoliciesAtRest(t *testing.T) {
	withStatus := func(mutate func(*fleetv1.CelldFleet)) typed {
		f := fleet("a", 2)
		cf := f.obj.(*fleetv1.CelldFleet).DeepCopy()
		cf.Generation = 2
		cf.Status.ObservedGeneration = 2
		mutate(cf)
		return typed{gvrFleets, cf}
	}
	cond := func(typ fleetv1.ConditionType, status metav1.ConditionStatus, reason fleetv1.ConditionReason, msg string) func(*fleetv1.CelldFleet) {
		return func(f *fleetv1.CelldFleet) {
			f.Status.Conditions = append(f.Status.Conditions, metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), Message: msg})
		}
	}
	both := func(m ...func(*fleetv1.CelldFleet)) func(*fleetv1.CelldFleet) {
		return func(f *fleetv1.CelldFleet) {
			for _, x := range m {
				x(f)
			}
		}
	}
	behind := func(f *fleetv1.CelldFleet) { f.Status.ObservedGeneration = 1 }
	paused := func(f *fleetv1.CelldFleet) { f.Spec.Maintenance.Paused = true }
	enrolled := func(s *snapshot) {
		s.objs[gvrNamespaces]["/x1-app"].SetLabels(map[string]string{labels.Mesh: labels.MeshEnabled})
	}
	refusedLabels := cond(fleetv1.ConditionNamespaceDeclared, metav1.ConditionFalse, fleetv1.ReasonNamespaceLabelsRefused,
		"the API server refused core.navique.com/mesh=enabled: "+policyMessage(policyNSLabels))
	declared := cond(fleetv1.ConditionNamespaceDeclared, metav1.ConditionTrue, fleetv1.ReasonNamespaceLabelsDeclared, "")
	stepFailed := cond(fleetv1.ConditionReconciled, metav1.ConditionFalse, fleetv1.ReasonStepFailed, "applying the StatefulSet: "+policyMessage(policySTS))
	nslabels := map[string]bool{PolicyNSLabels: true}
	sts := map[string]bool{PolicySTS: true}
	for _, tc := range []struct {
		name    string
		inForce map[string]bool
		fleet   typed
		edit    func(*snapshot)
		want    string
	}{
		{"no policy", nil, withStatus(both(behind, declared)), nil, ""},
		{"labels refused and said", nslabels, withStatus(refusedLabels), nil, ""},
		{"labels there before the policy", nslabels, withStatus(declared), enrolled, ""},
		{"mode disabled asks for nothing", nslabels, withStatus(func(f *fleetv1.CelldFleet) {
			f.Spec.Mesh = &fleetv1.Mesh{Mode: fleetv1.MeshDisabled}
		}), nil, ""},
		{"labels refused, status claims declared", nslabels, withStatus(declared), nil,
			"explore-namespace-labels refuses the enrollment request core.navique.com/mesh for fleet a, but its status does not say so"},
		{"labels refused, no condition", nslabels, withStatus(func(*fleetv1.CelldFleet) {}), nil, "no condition"},
		{"StatefulSet refused and said", sts, withStatus(both(behind, stepFailed)), nil, ""},
		{"StatefulSet current", sts, withStatus(func(*fleetv1.CelldFleet) {}), nil, ""},
		{"paused holds the spec", sts, withStatus(both(behind, paused)), nil, ""},
		{"StatefulSet refused, status silent", sts, withStatus(behind), nil,
			"explore-statefulset-label refuses the StatefulSet for fleet a, but its status does not say so"},
		{"StatefulSet refused, another failure quoted", sts, withStatus(both(behind,
			cond(fleetv1.ConditionReconciled, metav1.ConditionFalse, fleetv1.ReasonStepFailed, "routing: timeout"))), nil, "routing: timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := adversaryState(t, 1, 1, tc.fleet)
			if tc.edit != nil {
				tc.edit(s)
			}
			j := newJudgement(testWorld())
			j.adv = &advJudge{advRecord: advRecord{inForce: tc.inForce}}
			got := j.policiesAtRest(s)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			if assert.Len(t, got, 1, "%q", got) {
				assert.Contains(t, got[0], tc.want)
			}
		})
	}
}

// TestMembersRefusedByAPolicy: at rest a fleet without members passes only
// while a policy in force refuses them and its status says so.
func TestMembersRefusedByAPolicy(t *testing.T) {
	f := fleet("a", 2)
	said := func(typ fleetv1.ConditionType, reason fleetv1.ConditionReason, msg string) typed {
		cf := f.obj.(*fleetv1.CelldFleet).DeepCopy()
		cf.Status.Conditions = []metav1.Condition{{Type: string(typ), Status: metav1.ConditionFalse, Reason: string(reason), Message: msg}}
		return typed{gvrFleets, cf}
	}
	stsRefused := said(fleetv1.ConditionReconciled, fleetv1.ReasonStepFailed, "applying the StatefulSet: "+policyMessage(policySTS))
	podsRefused := said(fleetv1.ConditionProvisioning, fleetv1.ReasonMembersRefused, `pods "a-0" is forbidden: violates PodSecurity "restricted:latest"`)
	for _, tc := range []struct {
		name    string
		inForce map[string]bool
		fleet   typed
		fails   bool
	}{
		{"StatefulSet refused by policy.sts", map[string]bool{PolicySTS: true}, stsRefused, false},
		{"Pods refused under policy.pss", map[string]bool{PolicyPSS: true}, podsRefused, false},
		{"no policy in force", nil, stsRefused, true},
		{"policy in force, status silent", map[string]bool{PolicySTS: true, PolicyPSS: true}, f, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(testWorld())
			j.adv = &advJudge{advRecord: advRecord{inForce: tc.inForce}}
			got := j.membersAtRest(adversaryState(t, 1, 1, tc.fleet))
			if tc.fails {
				assert.Len(t, got, 1)
			} else {
				assert.Empty(t, got)
			}
		})
	}
}

// TestTenantNetpolStaysInItsNamespace: the tenant's own NetworkPolicy in
// its namespace changes no other namespace's access (checkTenants passes);
// one in the app namespace naming the tenant's namespace fails.
func TestTenantNetpolStaysInItsNamespace(t *testing.T) {
	own := tenantPolicy()
	foreign := obj(own, func(u *unstructured.Unstructured) {
		u.SetNamespace("x1-app")
		u.Object["spec"].(map[string]any)["ingress"] = []any{map[string]any{"from": []any{map[string]any{"namespaceSelector": map[string]any{
			"matchLabels": map[string]any{labels.NamespaceName: "x1-other"}}}}}}
	})
	for _, tc := range []struct {
		name string
		np   typed
		want string
	}{
		{"in its own namespace", own, ""},
		{"in the app namespace", foreign, "NetworkPolicy x1-app/tenant-no-hbone names the tenant's namespace x1-other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(testWorld())
			j.checkTenants(adversaryState(t, 1, 1, tc.np), 1)
			if tc.want == "" {
				assert.Empty(t, j.violations)
				return
			}
			assert.True(t, len(j.violations) == 1 && strings.Contains(j.violations[0], tc.want), "%q", j.violations)
		})
	}
}

// TestPolicyObjects: the policies are bound to the world's namespaces and
// quote their names (which policiesAtRest looks for).
func TestPolicyObjects(t *testing.T) {
	w := testWorld()
	vap, b := policyObjects(w, PolicyNSLabels)
	assert.Equal(t, []string{w.app, w.edge}, b.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values)
	assert.Contains(t, vap.Spec.MatchConditions[0].Expression, "system:serviceaccount:fleet-system:fleet-operator")
	assert.Contains(t, vap.Spec.MatchConditions[0].Expression, "system:serviceaccount:mesh-system:mesh-operator")
	assert.Contains(t, vap.Spec.Validations[0].Message, policyNSLabels)
	vap, b = policyObjects(w, PolicySTS)
	assert.Equal(t, []string{w.app}, b.Spec.MatchResources.NamespaceSelector.MatchExpressions[0].Values)
	assert.Contains(t, vap.Spec.Validations[0].Expression, policyLabel)
	assert.Empty(t, vap.Spec.MatchConditions, "every StatefulSet writer is refused")
}

// TestWritesAtRest: at rest a refused write is not a stored one; a stored
// write is reported.
func TestWritesAtRest(t *testing.T) {
	before := map[string]float64{"APPLY statefulsets": 10, "APPLY namespaces": 3}
	for _, tc := range []struct {
		name                string
		after, refusedAfter map[string]float64
		want                []string
	}{
		{"nothing", map[string]float64{"APPLY statefulsets": 10, "APPLY namespaces": 3}, map[string]float64{"APPLY statefulsets": 4}, nil},
		{"refused writes only", map[string]float64{"APPLY statefulsets": 15, "APPLY namespaces": 3}, map[string]float64{"APPLY statefulsets": 9}, nil},
		{"a stored write", map[string]float64{"APPLY statefulsets": 10, "APPLY namespaces": 4}, map[string]float64{"APPLY statefulsets": 4},
			[]string{"APPLY namespaces 1"}},
		{"a stored write among refused ones", map[string]float64{"APPLY statefulsets": 13, "APPLY namespaces": 3}, map[string]float64{"APPLY statefulsets": 6},
			[]string{"APPLY statefulsets 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, writesAtRest(before, tc.after, map[string]float64{"APPLY statefulsets": 4}, tc.refusedAfter))
		})
	}
}

// TestRefusedRetriesAtRest: refused writes are counted per writer (the
// operator, its field manager) and per object, as the fault proxies record
// them: two fleets and a mesh each retrying at their poll pass (seeds 7001
// and 7038 reported eight and more of a kind in 12 s with the count per
// kind), one writer retrying one object faster than the poll does not.
func TestRefusedRetriesAtRest(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 19, 0, 0, 0, time.UTC)
	rec := func(s float64, manager, ns string, code int) harness.WriteRecord {
		return harness.WriteRecord{At: t0.Add(time.Duration(s * float64(time.Second))), Verb: "patch", Resource: "namespaces", Namespace: ns, Name: ns,
			FieldManager: manager, Code: code}
	}
	pollers := map[string][]harness.WriteRecord{
		"fleet-operator": {rec(0.5, "fleet-operator/fleet/x1-app/a", "x1-app", 422), rec(3, "fleet-operator/fleet/x1-app/b", "x1-app", 422),
			rec(10.5, "fleet-operator/fleet/x1-app/a", "x1-app", 422), rec(11, "fleet-operator/fleet/x1-app/b", "x1-app", 422)},
		"mesh-operator": {rec(1, "mesh-operator", "x1-app", 422), rec(1.1, "mesh-operator", "x1-edge", 422),
			rec(9, "mesh-operator", "x1-app", 422), rec(9.1, "mesh-operator", "x1-edge", 422),
			rec(9.2, "mesh-operator", "x1-app", 200)},
	}
	assert.Empty(t, refusedRetries(pollers), "pollers, each at its interval")
	loop := map[string][]harness.WriteRecord{"mesh-operator": {rec(1, "mesh-operator", "x1-app", 422), rec(2, "mesh-operator", "x1-app", 422),
		rec(4, "mesh-operator", "x1-app", 403), rec(8, "mesh-operator", "x1-app", 422), rec(8, "mesh-operator", "x1-edge", 422)}}
	assert.Equal(t, []string{`the mesh-operator (field manager "mesh-operator") had patch namespaces /x1-app refused 4 times (at 19:00:01, +1s, +3s, +7s), retried more often than the poll`},
		refusedRetries(loop))
}

// TestMeshSaysEnrollmentRefused: at rest under policy.nslabels a Ready
// ServiceMesh that is to enroll a namespace still without its mesh-state
// reports EnrollmentFailed quoting the policy.
func TestMeshSaysEnrollmentRefused(t *testing.T) {
	mesh := func(conds ...metav1.Condition) typed {
		m := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: meshv1.SingletonName},
			Spec:   meshv1.ServiceMeshSpec{EnrollNamespaces: []string{"x1-app"}},
			Status: meshv1.ServiceMeshStatus{Conditions: append([]metav1.Condition{{Type: string(meshv1.ConditionReady), Status: metav1.ConditionTrue, Reason: "ControlPlaneReady"}}, conds...)}}
		return typed{gvrMeshes, m}
	}
	failed := metav1.Condition{Type: string(meshv1.ConditionEnrollmentFailed), Status: metav1.ConditionTrue, Reason: string(meshv1.ReasonEnrollmentStepFailed),
		Message: "announcing namespace x1-app for ambient: " + policyMessage(policyNSLabels)}
	enrolled := func(s *snapshot) {
		s.objs[gvrNamespaces]["/x1-app"].SetLabels(map[string]string{labels.MeshState: "enrolled"})
	}
	for _, tc := range []struct {
		name    string
		inForce map[string]bool
		mesh    typed
		edit    func(*snapshot)
		want    string
	}{
		{"refused and said", map[string]bool{PolicyNSLabels: true}, mesh(failed), nil, ""},
		{"enrolled before the policy", map[string]bool{PolicyNSLabels: true}, mesh(), enrolled, ""},
		{"no policy", nil, mesh(), nil, ""},
		{"refused, status silent", map[string]bool{PolicyNSLabels: true}, mesh(), nil,
			"explore-namespace-labels refuses enrolling namespace x1-app, but the ServiceMesh's status does not say so"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := adversaryState(t, 1, 1, tc.mesh)
			if tc.edit != nil {
				tc.edit(s)
			}
			j := newJudgement(testWorld())
			j.adv = &advJudge{advRecord: advRecord{inForce: tc.inForce}}
			got := j.policiesAtRest(s)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			if assert.Len(t, got, 1, "%q", got) {
				assert.Contains(t, got[0], tc.want)
			}
		})
	}
}
