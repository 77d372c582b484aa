package enroll

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/golden"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// The sequence logs: a small pure simulator feeds the planner's steps back
// into the observed world pass after pass, the way the executor's writes
// come back through the next pass's reads, and writes one line per step
// (testdata/sequence-*.golden, rewritten with -update). A step that changes
// nothing (the executor then sends no write) is marked "(no change)".

// simNamespace is one namespace of the simulated cluster: its labels, the
// keys the operator applies there, its policies of the ServiceMesh, and
// whether its one Pod runs a proxy.
type simNamespace struct {
	name   string
	labels map[string]string
	owned  map[string]bool
	live   map[string]*unstructured.Unstructured
	meshed bool
}

type sim struct {
	t        *testing.T
	spec     v1alpha1.ServiceMeshSpec
	now      time.Time
	ready    bool
	nss      []*simNamespace // by name
	enrolled []string        // status.enrolledNamespaces
	// roll: a namespace's Pod is restarted (and meshed) at the end of a
	// pass in which its data-plane label is on, as a rollout would do.
	roll bool
	out  strings.Builder
	pass int
}

func newSim(t *testing.T, spec v1alpha1.ServiceMeshSpec, names ...string) *sim {
	s := &sim{t: t, spec: spec, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), roll: true}
	for _, n := range names {
		s.nss = append(s.nss, &simNamespace{name: n, labels: map[string]string{}, owned: map[string]bool{}, live: map[string]*unstructured.Unstructured{}})
	}
	return s
}

func (s *sim) ns(name string) *simNamespace {
	for _, n := range s.nss {
		if n.name == name {
			return n
		}
	}
	s.t.Fatalf("no namespace %s", name)
	return nil
}

func (s *sim) note(format string, args ...any) {
	fmt.Fprintf(&s.out, "# "+format+"\n", args...)
}

// pods is the namespace's one Pod, with a proxy once meshed.
func (n *simNamespace) pods() []corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n.name + "-app", Namespace: n.name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if n.meshed {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ProxyContainer})
	}
	return []corev1.Pod{p}
}

// world is the namespace as the planner reads it. The request label only
// the operator holds is not a request (requestLabels in the controller).
func (s *sim) world(n *simNamespace) Namespace {
	req := maps.Clone(n.labels)
	if n.owned[labels.Mesh] {
		delete(req, labels.Mesh)
	}
	d := Decide(n.name, req, slices.Contains(s.spec.EnrollNamespaces, n.name), Protected("istio-system"))
	return Namespace{Name: n.name, Labels: maps.Clone(n.labels), Owned: maps.Clone(n.owned), Decision: d, Live: maps.Clone(n.live)}
}

func (s *sim) basePass() Pass {
	return Pass{Spec: s.spec, Now: s.now, Ready: s.ready, ControlPlane: "istio-system", Owner: Owner(testMesh)}
}

// facts answers the planner's needs from the simulated Pods.
func (s *sim) facts(p Pass, w Namespace, evaluate bool) Facts {
	f := Facts{Evaluate: evaluate}
	needs := p.PolicyNeeds(w, evaluate)
	if needs.Workloads {
		_, f.Blocker = WorkloadsReady(s.spec.DataPlane, s.ns(w.Name).pods())
	}
	for _, e := range needs.Edges {
		if f.EdgePods == nil {
			f.EdgePods, f.Redirecting = map[string][]corev1.Pod{}, map[string]bool{}
		}
		f.EdgePods[e] = s.ns(e).pods()
	}
	return f
}

// take applies steps to the world and logs them; false when one waits.
func (s *sim) take(steps []Step) bool {
	for _, st := range steps {
		line := st.String()
		if st.Why != "" && (st.Kind == StepDelete || st.Kind == StepLabels) {
			line += " (" + st.Why + ")"
		}
		if !s.change(st) {
			line += " (no change)"
		}
		fmt.Fprintf(&s.out, "pass %d: %s\n", s.pass, line)
		if st.Kind == StepWait {
			return false
		}
	}
	return true
}

// change takes one step on the world and says whether it changed it.
func (s *sim) change(st Step) bool {
	if st.Kind == StepWait || st.Kind == StepHold {
		return false
	}
	n := s.ns(st.Namespace)
	switch st.Kind {
	case StepLabels:
		before := maps.Clone(n.labels)
		for k := range n.owned {
			delete(n.labels, k)
		}
		n.owned = map[string]bool{}
		for k, v := range st.Labels {
			n.labels[k], n.owned[k] = v, true
		}
		return !maps.Equal(before, n.labels)
	case StepDelete:
		_, ok := n.live[st.Key]
		delete(n.live, st.Key)
		return ok
	}
	old := n.live[st.Key]
	n.live[st.Key] = st.Object.DeepCopy()
	return old == nil || !sameObject(old, st.Object)
}

func sameObject(a, b *unstructured.Unstructured) bool {
	ja, _ := json.Marshal([]any{a.Object["spec"], a.GetAnnotations()})
	jb, _ := json.Marshal([]any{b.Object["spec"], b.GetAnnotations()})
	return string(ja) == string(jb)
}

// run is one pass, in the executor's order (reconcileEnrollment): the
// namespaces to enroll (each one's steps, then the second looks), then
// those leaving (relax all, then let go).
func (s *sim) run() {
	s.pass++
	p := s.basePass()
	var worlds []Namespace
	var leaving []*simNamespace
	for _, n := range s.nss {
		w := s.world(n)
		worlds = append(worlds, w)
		if Leaves(w) {
			leaving = append(leaving, n)
			p.Leaving = append(p.Leaving, n.name)
		}
	}
	sel := p.Select(worlds, nil, s.enrolled)
	s.take(sel.Announce)
	enrolled := slices.Clone(sel.HeldEnrolled)
	type second struct {
		n     *simNamespace
		first NamespacePlan
	}
	var seconds []second
	var failed []Namespace
	for _, name := range sel.Todo {
		n := s.ns(name)
		w := s.world(n)
		heldBy := ""
		if p.StateNeedsPods(w) {
			heldBy = "" // the simulated Pods are never redirected
		}
		plan := p.PlanNamespace(w, heldBy, s.facts(p, w, p.InPlace(w)))
		if !s.take(plan.Steps) {
			failed = append(failed, s.world(n))
			continue
		}
		if p.Ready {
			enrolled = append(enrolled, name)
		}
		if plan.SecondLook {
			seconds = append(seconds, second{n, plan})
			continue
		}
		s.verdict(name, plan.PolicyPlan)
	}
	for _, sl := range seconds {
		w := s.world(sl.n)
		plan := p.PlanSecondLook(w, sl.first, s.facts(p, w, true))
		fmt.Fprintf(&s.out, "pass %d: second look %s\n", s.pass, sl.n.name)
		s.take(plan.Steps)
		s.verdict(sl.n.name, plan)
	}
	var relaxed, stillStrict []Namespace
	for _, n := range leaving {
		if s.take(PlanRelax(s.world(n))) {
			relaxed = append(relaxed, Namespace{Name: n.name})
		} else {
			stillStrict = append(stillStrict, s.world(n))
		}
	}
	stillStrict = append(failed, stillStrict...)
	s.take(PlanLetGo(relaxed, stillStrict))
	slices.Sort(enrolled)
	s.enrolled = enrolled
	if s.roll {
		for _, n := range s.nss {
			if n.labels[labels.IstioInjection] == "enabled" {
				n.meshed = true
			}
		}
	}
}

func (s *sim) verdict(name string, plan PolicyPlan) {
	line := fmt.Sprintf("pass %d: = %s %s (%s)", s.pass, name, strings.ToUpper(plan.Mode.Mode), plan.Mode.Reason)
	if plan.Pending && plan.Blocker != "" {
		line += " waiting for " + plan.Blocker
	}
	fmt.Fprintln(&s.out, line)
}

// teardown is the ServiceMesh's deletion (teardownEnrollment): every
// namespace carrying what the operator applied is released.
func (s *sim) teardown() {
	s.pass++
	var relaxed, stillStrict []Namespace
	for _, n := range s.nss {
		w := s.world(n)
		if !Applied(w) {
			continue
		}
		if s.take(PlanRelax(w)) {
			relaxed = append(relaxed, Namespace{Name: n.name})
		} else {
			stillStrict = append(stillStrict, s.world(n))
		}
	}
	s.take(PlanLetGo(relaxed, stillStrict))
	s.enrolled = nil
}

func strictSidecar(enroll ...string) v1alpha1.ServiceMeshSpec {
	return v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar, Isolation: v1alpha1.IsolationStrict, EnrollNamespaces: enroll}
}

// TestSequenceCutover: PERMISSIVE first, STRICT once the control plane is
// Ready and the workloads carry a proxy; the baseline only after the
// PeerAuthentication is STRICT.
func TestSequenceCutover(t *testing.T) {
	s := newSim(t, strictSidecar("shop"), "shop")
	s.note("control plane not Ready: nothing is enrolled")
	s.run()
	s.ready = true
	s.note("control plane Ready: policies first, then the labels; the Pods predate injection")
	s.run()
	s.note("the Pods rolled with a proxy: STRICT, then the baseline")
	s.run()
	s.note("settled: nothing changes")
	s.run()
	s.ready = false
	s.note("control plane not Ready: held as it is")
	s.run()
	golden.AssertText(t, "sequence-cutover", s.out.String())
}

// TestSequenceMaintenance: a maintenance window withdraws the baseline
// before the PeerAuthentication goes PERMISSIVE, even with the control
// plane not Ready; its end restores STRICT, the baseline after it.
func TestSequenceMaintenance(t *testing.T) {
	s := newSim(t, strictSidecar("shop"), "shop")
	s.ready = true
	s.run()
	s.run()
	s.ready = false
	until := metav1.NewTime(s.now.Add(time.Hour))
	s.spec.MTLS.MaintenanceUntil = &until
	s.note("window open, control plane not Ready: relaxing is still allowed")
	s.run()
	s.ready = true
	s.note("window still open")
	s.run()
	s.now = s.now.Add(2 * time.Hour)
	s.note("window over: STRICT returns")
	s.run()
	golden.AssertText(t, "sequence-maintenance", s.out.String())
}

// TestSequenceLeaving: a namespace no longer asked for relaxes (state
// labels, baseline, isolation, PeerAuthentication) before its data-plane
// label goes.
func TestSequenceLeaving(t *testing.T) {
	s := newSim(t, strictSidecar("shop"), "shop")
	s.ready = true
	s.run()
	s.run()
	s.spec.EnrollNamespaces = nil
	s.note("shop is no longer asked for")
	s.run()
	s.note("gone: nothing left to do")
	s.run()
	golden.AssertText(t, "sequence-leaving", s.out.String())
}

// TestSequenceEdges: a declared edge holds STRICT back while its Pod
// speaks plaintext; once meshed it is accepted at the cutover; when it
// leaves, its dependant goes PERMISSIVE in the same pass, before the
// edge's data-plane label goes.
func TestSequenceEdges(t *testing.T) {
	s := newSim(t, strictSidecar("shop"), "payments", "shop")
	s.ns("shop").labels[labels.AllowFromPrefix+"payments"] = "true"
	s.ready = true
	s.note("shop declares payments as an edge; payments is not in the mesh")
	s.run()
	s.run()
	s.spec.EnrollNamespaces = []string{"payments", "shop"}
	s.note("payments is enrolled too")
	s.run()
	s.run()
	s.run()
	s.spec.EnrollNamespaces = []string{"shop"}
	s.note("payments leaves: shop relaxes first")
	s.run()
	golden.AssertText(t, "sequence-edges", s.out.String())
}

// TestSequenceTeardown: on deletion every namespace relaxes before any
// namespace's data-plane label goes, so a dependant is never STRICT while
// its edge speaks plaintext.
func TestSequenceTeardown(t *testing.T) {
	s := newSim(t, strictSidecar("payments", "shop"), "payments", "shop")
	s.ns("shop").labels[labels.AllowFromPrefix+"payments"] = "true"
	s.ready = true
	s.run()
	s.run()
	s.run()
	s.note("the ServiceMesh is deleted")
	s.teardown()
	golden.AssertText(t, "sequence-teardown", s.out.String())
}

// TestPlanLetGo: a leaving namespace keeps its data-plane label while a
// namespace that declared it as an edge may still be STRICT (its pass or
// its own first round failed); the others are let go.
func TestPlanLetGo(t *testing.T) {
	edgeOf := func(name string, edges ...string) Namespace {
		l := map[string]string{}
		for _, e := range edges {
			l[labels.AllowFromPrefix+e] = "true"
		}
		return Namespace{Name: name, Labels: l}
	}
	steps := PlanLetGo([]Namespace{{Name: "a"}, {Name: "b"}, {Name: "c"}}, []Namespace{edgeOf("x", "b"), edgeOf("y", "b", "c")})
	var got []string
	for _, s := range steps {
		got = append(got, s.String())
	}
	want := []string{
		"labels a {}",
		"wait b: namespace b keeps its data-plane label for now: y, which declares it as an edge, may still be STRICT",
		"wait c: namespace c keeps its data-plane label for now: y, which declares it as an edge, may still be STRICT",
	}
	if !slices.Equal(got, want) {
		t.Errorf("PlanLetGo:\n got %q\nwant %q", got, want)
	}
}

// TestPlanRelaxOrder: state labels first (the data-plane label and the
// labels of others stay), then the baseline, isolation, any other policy
// of ours, and the PeerAuthentication last.
func TestPlanRelaxOrder(t *testing.T) {
	u := func(key string) *unstructured.Unstructured {
		kind, name, _ := strings.Cut(key, "/")
		o := &unstructured.Unstructured{}
		o.SetKind(kind)
		o.SetName(name)
		return o
	}
	live := map[string]*unstructured.Unstructured{}
	for _, k := range []string{keyPeerAuthentication, keyIsolation, keyBaseline, "AuthorizationPolicy/legacy"} {
		live[k] = u(k)
	}
	ns := Namespace{Name: "a", Live: live,
		Labels: map[string]string{labels.IstioInjection: "enabled", labels.MeshMTLS: "strict", labels.Mesh: labels.MeshEnabled, "team": "x"},
		Owned:  map[string]bool{labels.IstioInjection: true, labels.MeshMTLS: true, labels.Mesh: true}}
	var got []string
	for _, s := range PlanRelax(ns) {
		got = append(got, s.String())
	}
	want := []string{
		"labels a {istio-injection=enabled}",
		"delete a AuthorizationPolicy/mesh-baseline",
		"delete a AuthorizationPolicy/mesh-isolation",
		"delete a AuthorizationPolicy/legacy",
		"delete a PeerAuthentication/mesh-mtls",
	}
	if !slices.Equal(got, want) {
		t.Errorf("PlanRelax:\n got %q\nwant %q", got, want)
	}
	if steps := PlanRelax(Namespace{Name: "b", Labels: map[string]string{labels.IstioInjection: "enabled"}, Owned: map[string]bool{labels.IstioInjection: true}}); len(steps) != 0 {
		t.Errorf("nothing to relax: %v", steps)
	}
}

// TestRelaxOptedOut: an admin's Istio opt-out on a STRICT namespace takes
// the baseline and the STRICT PeerAuthentication away before anything else
// of the leave (issue 43, seed 7039); nothing when the namespace is not
// STRICT, has no Istio opt-out, or the label is the operator's own.
func TestRelaxOptedOut(t *testing.T) {
	pa := func(mode string) *unstructured.Unstructured {
		return PeerAuthentication("a", mode, "", metav1.OwnerReference{})
	}
	baseline := &unstructured.Unstructured{}
	baseline.SetKind(KindAuthorizationPolicy)
	baseline.SetName(BaselinePolicyName)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		owned  map[string]bool
		live   map[string]*unstructured.Unstructured
		want   []string
	}{
		{"ambient, admin's none, STRICT", map[string]string{labels.IstioDataPlaneMode: "none"}, nil,
			map[string]*unstructured.Unstructured{keyPeerAuthentication: pa(contract.MTLSStrict)},
			[]string{"delete a PeerAuthentication/mesh-mtls"}},
		{"with the baseline", map[string]string{labels.IstioDataPlaneMode: "none"}, nil,
			map[string]*unstructured.Unstructured{keyPeerAuthentication: pa(contract.MTLSStrict), keyBaseline: baseline},
			[]string{"delete a AuthorizationPolicy/mesh-baseline", "delete a PeerAuthentication/mesh-mtls"}},
		{"sidecars, admin's injection disabled", map[string]string{labels.IstioInjection: "disabled"}, nil,
			map[string]*unstructured.Unstructured{keyPeerAuthentication: pa(contract.MTLSStrict)},
			[]string{"delete a PeerAuthentication/mesh-mtls"}},
		{"PERMISSIVE already", map[string]string{labels.IstioDataPlaneMode: "none"}, nil,
			map[string]*unstructured.Unstructured{keyPeerAuthentication: pa(contract.MTLSPermissive)}, nil},
		{"no PeerAuthentication", map[string]string{labels.IstioDataPlaneMode: "none"}, nil, nil, nil},
		{"core.navique.com/mesh=disabled: the ordinary leave", map[string]string{labels.Mesh: labels.MeshDisabled, labels.IstioDataPlaneMode: "ambient"}, nil,
			map[string]*unstructured.Unstructured{keyPeerAuthentication: pa(contract.MTLSStrict)}, nil},
		{"the operator's own label", map[string]string{labels.IstioDataPlaneMode: "none"}, map[string]bool{labels.IstioDataPlaneMode: true},
			map[string]*unstructured.Unstructured{keyPeerAuthentication: pa(contract.MTLSStrict)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range RelaxOptedOut(Namespace{Name: "a", Labels: tc.labels, Owned: tc.owned, Live: tc.live}) {
				got = append(got, s.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSequenceMigration: a change of data plane (sidecar to ambient)
// withdraws the baseline and relaxes to PERMISSIVE before the namespace is
// relabelled, recording where it comes from; the second look of the same
// pass finds its Pods meshed (a Pod with a proxy speaks mTLS in ambient
// too, podmesh.MeshedIn) and returns to STRICT. The simulator has no
// NetworkPolicies, so no ambient gate holds.
func TestSequenceMigration(t *testing.T) {
	s := newSim(t, strictSidecar("shop"), "shop")
	s.ready = true
	s.run()
	s.run()
	s.spec.DataPlane = v1alpha1.DataPlaneAmbient
	s.note("spec.dataPlane: ambient")
	s.run()
	s.note("settled")
	s.run()
	golden.AssertText(t, "sequence-migration", s.out.String())
}
