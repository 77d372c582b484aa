package enroll

// The enrollment planner: what one pass over the namespaces does, decided
// from what the pass observed, as an ordered list of steps. The ServiceMesh
// reconciler (enrollment.go) is its executor: it reads the world, asks the
// planner which facts it still needs (Pods are read only when a decision
// depends on them, as before the split: the request counts are part of the
// behaviour), and takes the steps in order, stopping a namespace at its
// first failed step. Nothing here talks to the API server, so the order of
// a cutover, a maintenance window, a namespace leaving or a teardown is
// checked pass after pass by a simulator (plan_test.go) against golden
// sequence logs under testdata/, the way Cluster API checks its rollout
// planner.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// StepKind is what a step does.
type StepKind string

const (
	// StepApply applies Object (a managed policy) with the operator's
	// field manager, checking ownership first.
	StepApply StepKind = "apply"
	// StepDelete deletes Object (a managed policy of ours; a live object of
	// someone else with that name is left alone).
	StepDelete StepKind = "delete"
	// StepLabels makes Labels exactly the labels the operator applies on
	// the namespace (through contract.ApplyLabels).
	StepLabels StepKind = "labels"
	// StepHold leaves Object as it is: it carries the reconcile-paused
	// annotation. The executor reports it in status.pausedObjects.
	StepHold StepKind = "hold"
	// StepWait is a step that cannot be taken in this pass; Why says what
	// it waits for, and the executor reports it as the namespace's error.
	StepWait StepKind = "wait"
)

// Step is one action of a pass on one namespace.
type Step struct {
	Kind      StepKind
	Namespace string
	// Key is the policy's PolicyKey (apply, delete, hold).
	Key string
	// Object is the desired policy (apply) or the live one (delete, hold).
	Object *unstructured.Unstructured
	// Labels is the exact set of labels the operator applies (labels).
	Labels map[string]string
	// Event names the Normal event the executor raises when the step
	// changed something (a baseline created or withdrawn); "" for none.
	Event v1alpha1.EventReason
	// Why says why the step is taken, for events and the sequence logs.
	Why string
	// Err is what a wait step reports (nil: Why).
	Err error
}

// String is the step as one line of a sequence log.
func (s Step) String() string {
	switch s.Kind {
	case StepApply:
		return strings.TrimSuffix(fmt.Sprintf("apply %s %s %s", s.Namespace, s.Key, objectSummary(s.Object)), " ")
	case StepDelete, StepHold:
		return fmt.Sprintf("%s %s %s", s.Kind, s.Namespace, s.Key)
	case StepLabels:
		keys := slices.Sorted(maps.Keys(s.Labels))
		kv := make([]string, 0, len(keys))
		for _, k := range keys {
			kv = append(kv, k+"="+s.Labels[k])
		}
		return fmt.Sprintf("labels %s {%s}", s.Namespace, strings.Join(kv, ","))
	}
	return fmt.Sprintf("%s %s: %s", s.Kind, s.Namespace, s.Why)
}

// objectSummary is what distinguishes one applied policy from another in
// a sequence log: the PeerAuthentication's mode and cutover record.
func objectSummary(u *unstructured.Unstructured) string {
	if u == nil || u.GetKind() != KindPeerAuthentication {
		return ""
	}
	s := strings.ToUpper(ModeOf(u))
	ann := u.GetAnnotations()
	if v, ok := ann[labels.MeshStrictEdges]; ok && v != "" {
		s += " edges=" + v
	}
	if v := ann[labels.MeshMigratingFrom]; v != "" {
		s += " migratingFrom=" + v
	}
	if ann[labels.MeshStrictReady] != "" {
		s += " strictReady"
	}
	return s
}

// PolicyKey names a managed policy within its namespace: Kind/name.
func PolicyKey(kind, name string) string { return kind + "/" + name }

var (
	keyPeerAuthentication = PolicyKey(KindPeerAuthentication, PeerAuthenticationName)
	keyIsolation          = PolicyKey(KindAuthorizationPolicy, IsolationPolicyName)
	keyBaseline           = PolicyKey(KindAuthorizationPolicy, BaselinePolicyName)
)

// Pass is what every namespace's plan in one pass shares.
type Pass struct {
	Spec v1alpha1.ServiceMeshSpec
	Now  time.Time
	// Ready: the mesh is Ready at its generation. Without it the pass only
	// relaxes (holdOnly in the reconciler): see PlanNamespace.
	Ready bool
	// ControlPlane, Revision: the control plane's namespace and revision.
	ControlPlane, Revision string
	Owner                  metav1.OwnerReference
	// Leaving are the namespaces that leave the mesh in this pass.
	Leaving []string
}

// Namespace is one namespace as the pass observed it.
type Namespace struct {
	Name   string
	Labels map[string]string
	// Owned are the label keys the operator's field manager applies there.
	Owned map[string]bool
	// Paused: the namespace carries the reconcile-paused annotation.
	Paused   bool
	Decision Decision
	// Live are the namespace's policies of this ServiceMesh, by PolicyKey.
	Live map[string]*unstructured.Unstructured
	// Foreign are the namespace-wide PeerAuthentications of others there.
	Foreign []*unstructured.Unstructured
	// Deleting: the namespace is being deleted; it is neither enrolled
	// nor released.
	Deleting bool
}

// policyState is what a namespace's live PeerAuthentication and labels
// say about its cutover, before any Pod is read.
type policyState struct {
	strictReady, migratingFrom string
	migrating                  bool
	edges, accepted, newEdges  []string
	leavingEdge                string
}

func (p Pass) policyState(ns Namespace) policyState {
	var s policyState
	pa := ns.Live[keyPeerAuthentication]
	if pa != nil {
		s.strictReady = pa.GetAnnotations()[labels.MeshStrictReady]
		s.migratingFrom = pa.GetAnnotations()[labels.MeshMigratingFrom]
	}
	// A change of data plane: the namespace was configured for another one.
	// Its cutover, and the edges accepted with it, no longer count: STRICT
	// returns only once its workloads are meshed the new way.
	applied := AppliedDataPlane(ns.Labels, ns.Owned)
	s.migrating = applied != "" && applied != p.Spec.DataPlane
	if s.migrating {
		s.strictReady, s.migratingFrom = "", string(applied)
	}
	// Declared edges hold STRICT back until their Pods are meshed: STRICT
	// would reject the plaintext calls they were declared for. Only edges
	// not yet accepted at a cutover are looked at, so a plaintext Pod that
	// appears later in an accepted edge cannot switch STRICT off.
	state, _ := contract.Parse(ns.Labels)
	s.edges = state.Edges
	s.accepted = AcceptedEdges(pa, state.Edges)
	if s.migrating {
		s.accepted = nil
	}
	// An edge namespace leaving the mesh is accepted no more: its Pods
	// are about to speak plaintext.
	s.accepted, s.leavingEdge = WithoutLeaving(s.accepted, state.Edges, p.Leaving)
	s.newEdges = NewEdges(state.Edges, s.accepted)
	return s
}

// Needs are the reads a namespace's policy plan depends on.
type Needs struct {
	// Workloads: the namespace's own Pods (the cutover signal).
	Workloads bool
	// Edges: the declared edges whose Pods (and namespace) are read.
	Edges []string
}

// PolicyNeeds says what must be read before PlanPolicies: the workloads
// only when the cutover is not recorded yet, the edges only when some are
// new and none is leaving. evaluate: the Pods may be looked at at all (the
// data-plane label is in place; Pods listed before it may have been created
// without injection or capture that is about to apply).
func (p Pass) PolicyNeeds(ns Namespace, evaluate bool) Needs {
	s := p.policyState(ns)
	n := Needs{Workloads: s.strictReady == "" && evaluate}
	if s.leavingEdge == "" && p.Ready && len(s.newEdges) > 0 && evaluate {
		n.Edges = s.newEdges
	}
	return n
}

// Facts are the answers to Needs.
type Facts struct {
	// Evaluate: as for PolicyNeeds.
	Evaluate bool
	// Blocker: the first Pod that holds the cutover back ("" when none).
	Blocker string
	// EdgePods, Redirecting: each needed edge's Pods, and whether the edge
	// namespace carries the ambient data-plane label (EdgeHolder).
	EdgePods    map[string][]corev1.Pod
	Redirecting map[string]bool
}

// PolicyPlan is a namespace's policies' steps and what they come to.
type PolicyPlan struct {
	Mode MTLSDecision
	// MTLSInForce is the mode the state label reports: the decision's,
	// a paused PeerAuthentication's, or a foreign one's.
	MTLSInForce string
	Pending     bool   // still waiting for the STRICT cutover signal
	Blocker     string // what holds the cutover back
	// EdgeHeld: the namespace's own workloads are ready, a declared edge
	// holds STRICT back (Blocker names it).
	EdgeHeld bool
	// Migration: the namespace's progress through a change of data plane.
	Migration string
	// Foreign: "PeerAuthentication ns/name (MODE)" of someone else in force.
	Foreign string
	// BaselineWithheld: isolation strict, but PERMISSIVE in force.
	BaselineWithheld bool
	Steps            []Step
}

// PlanPolicies decides the namespace's mTLS mode and the steps that bring
// its policies there. With p.Ready false only relaxing changes are made:
// the baseline may go and the PeerAuthentication may go PERMISSIVE;
// isolation and the baseline otherwise stay as they are.
func (p Pass) PlanPolicies(ns Namespace, f Facts) PolicyPlan {
	var out PolicyPlan
	dp := p.Spec.DataPlane
	s := p.policyState(ns)
	pa, baseline := ns.Live[keyPeerAuthentication], ns.Live[keyBaseline]
	strictReady := s.strictReady
	if strictReady == "" && f.Evaluate {
		if f.Blocker == "" {
			strictReady = p.Now.UTC().Format(time.RFC3339)
		}
		out.Blocker = f.Blocker
	}
	liveMode := ""
	if pa != nil {
		liveMode = ModeOf(pa)
	}
	accepted, migratingFrom := s.accepted, s.migratingFrom
	edgeHolds := false
	if s.leavingEdge != "" {
		// Relaxing, so even while the control plane is not Ready (the
		// leaving namespace is released in that reconcile too).
		edgeHolds = true
		out.Blocker = fmt.Sprintf("edge %s: leaving the mesh", s.leavingEdge)
	} else if p.Ready && len(s.newEdges) > 0 {
		if !f.Evaluate {
			edgeHolds = true // looked at once the data-plane label is on
		} else if e, who := EdgeHolder(dp, s.newEdges, f.EdgePods, f.Redirecting); e != "" {
			edgeHolds = true
			if strictReady != "" {
				out.Blocker = fmt.Sprintf("edge %s: Pod %s", e, who)
			}
		}
	}
	out.Mode = DecideMTLS(MTLSInputs{Spec: p.Spec.MTLS, Now: p.Now, Ready: p.Ready, Live: liveMode, CutOver: strictReady != "",
		EdgeHolds: edgeHolds, Migrating: s.migrating})
	out.Pending = p.Ready && (out.Mode.Reason == MTLSAwaitingCutover || out.Mode.Reason == MTLSAwaitingEdge || out.Mode.Reason == MTLSMigrating)
	out.EdgeHeld = out.Mode.Reason == MTLSAwaitingEdge
	if p.Ready && out.Mode.Mode == contract.MTLSStrict {
		// Every declared edge was meshed (or accepted before) now, and a
		// migration is over for this namespace.
		accepted = slices.Clone(s.edges)
		migratingFrom = ""
	}
	switch {
	case s.migrating && p.Ready:
		out.Migration = fmt.Sprintf("%s: PERMISSIVE, moving to %s now", ns.Name, dp)
	case s.migrating:
		out.Migration = fmt.Sprintf("%s: PERMISSIVE, moves to %s once the control plane is Ready", ns.Name, dp)
	case migratingFrom != "" && out.Mode.Mode != contract.MTLSStrict:
		who := out.Blocker
		switch {
		case !p.Ready:
			who = "the control plane to be Ready"
		case who == "":
			who = "the next check"
		case !out.EdgeHeld:
			who = "Pod " + who
		}
		out.Migration = fmt.Sprintf("%s: on %s, STRICT once its workloads are meshed that way (waiting for: %s)", ns.Name, dp, who)
	}
	out.MTLSInForce = out.Mode.Mode
	hold := func(u *unstructured.Unstructured, key string) {
		out.Steps = append(out.Steps, Step{Kind: StepHold, Namespace: ns.Name, Key: key, Object: u, Why: "reconcile paused"})
	}
	paPaused := pa != nil && Paused(pa)
	if paPaused {
		hold(pa, keyPeerAuthentication)
		out.MTLSInForce = ModeOf(pa)
		if out.MTLSInForce != out.Mode.Mode {
			out.Mode.Reason = MTLSPaused
		}
		out.Mode.Mode = out.MTLSInForce
	}
	// Istio applies the oldest namespace-wide PeerAuthentication: when that
	// is someone else's, its mode is the one in force, whatever mesh-mtls
	// says. Theirs is never touched; ours is still applied, to take over
	// once theirs is gone, and the baseline follows the mode in force.
	if fpa := ForeignPeerAuthentication(pa, ns.Foreign); fpa != nil {
		out.MTLSInForce = ModeOf(fpa)
		out.Mode = MTLSDecision{Mode: out.MTLSInForce, Reason: MTLSForeign}
		out.Foreign = fmt.Sprintf("%s %s/%s (%s)", KindPeerAuthentication, ns.Name, fpa.GetName(), strings.ToUpper(out.MTLSInForce))
	}
	// The strict baseline exists only while the mode in force is STRICT:
	// it goes before the PeerAuthentication turns PERMISSIVE and comes
	// after it is STRICT, so it never drops plaintext that PERMISSIVE is
	// meant to let through.
	want := PolicySet(PolicyInputs{
		Namespace: ns.Name, Isolation: p.Spec.Isolation, Mode: out.MTLSInForce,
		StrictReady: strictReady, AcceptedEdges: accepted, MigratingFrom: migratingFrom,
		// Isolation admits the control plane and the edges workload
		// operators declared.
		Allowed: AllowedSources(ns.Name, []string{p.ControlPlane}, s.edges),
		Owner:   p.Owner,
	})
	out.BaselineWithheld = p.Spec.Isolation == v1alpha1.IsolationStrict && want.Baseline == nil
	baselinePaused := baseline != nil && Paused(baseline)
	if baselinePaused {
		hold(baseline, keyBaseline)
	} else if want.Baseline == nil && baseline != nil {
		out.Steps = append(out.Steps, Step{Kind: StepDelete, Namespace: ns.Name, Key: keyBaseline, Object: baseline,
			Event: v1alpha1.EventBaselineWithdrawn, Why: fmt.Sprintf("%s mTLS in force, %s", strings.ToUpper(out.MTLSInForce), out.Mode.Reason)})
	}
	if !paPaused {
		out.Steps = append(out.Steps, Step{Kind: StepApply, Namespace: ns.Name, Key: keyPeerAuthentication, Object: want.PeerAuthentication,
			Why: string(out.Mode.Reason)})
	}
	if !p.Ready {
		// Held: isolation and the baseline stay as they are (withdrawing the
		// baseline above was the only change allowed).
		return out
	}
	// Isolation, admitting the edges workload operators declared.
	switch ap := ns.Live[keyIsolation]; {
	case ap != nil && Paused(ap):
		hold(ap, keyIsolation)
	case want.Isolation == nil && ap != nil:
		out.Steps = append(out.Steps, Step{Kind: StepDelete, Namespace: ns.Name, Key: keyIsolation, Object: ap, Why: "isolation " + string(p.Spec.Isolation)})
	case want.Isolation != nil:
		out.Steps = append(out.Steps, Step{Kind: StepApply, Namespace: ns.Name, Key: keyIsolation, Object: want.Isolation})
	}
	// Isolation strict's baseline, once STRICT is in force.
	if want.Baseline != nil && !baselinePaused {
		out.Steps = append(out.Steps, Step{Kind: StepApply, Namespace: ns.Name, Key: keyBaseline, Object: want.Baseline,
			Event: v1alpha1.EventBaselineApplied})
	}
	return out
}

// NamespacePlan is one enrolled (or, held, relaxed) namespace's pass.
type NamespacePlan struct {
	PolicyPlan
	// Steps (PolicyPlan's) end with the namespace's labels.
	// OnConflict are the steps that undo a partial enrollment when a
	// policy's name belongs to someone else's object (only when Ready).
	OnConflict []Step
	// SecondLook: the data-plane label goes on in this pass and the
	// namespace waits for its cutover: the executor looks at it again
	// (PlanSecondLook) once the pass's other writes are done.
	SecondLook bool
	// Base is the namespace's labels besides the state labels (data plane,
	// request), for the second look.
	Base map[string]string
	// StateDataPlane is what the mesh-dataplane state label claims, and
	// HeldBy the Pod that keeps it at ambient ("" when none).
	StateDataPlane v1alpha1.DataPlane
	HeldBy         string
}

// StateNeedsPods says whether the namespace's Pods must be read before
// PlanNamespace, for the data plane its state label may claim: only a
// namespace the operator configured for ambient that now leaves it.
func (p Pass) StateNeedsPods(ns Namespace) bool {
	return p.Ready && p.Spec.DataPlane != v1alpha1.DataPlaneAmbient && AppliedDataPlane(ns.Labels, ns.Owned) == v1alpha1.DataPlaneAmbient
}

// InPlace: the namespace carries the data-plane labels, so its Pods may be
// read for the cutover (Facts.Evaluate of its first look).
func (p Pass) InPlace(ns Namespace) bool {
	return p.Ready && hasLabels(ns.Labels, DataPlaneLabels(p.Spec.DataPlane, p.Revision))
}

// PlanNamespace plans one namespace: its policies first (PeerAuthentication,
// isolation DENY, strict baseline), and only then its labels, the data-plane
// label (with the enrollment request when spec.enrollNamespaces asks for
// it) together with the state labels that describe what is in place. A
// namespace is therefore never captured by the data plane without its
// configuration. heldBy names the running Pod istio-cni still redirects
// (StateNeedsPods; "" when none): a namespace leaving ambient keeps saying
// ambient until it is released, because a fleet closes its HBONE port when
// it reads sidecar, which must not happen while ztunnel still delivers
// there.
//
// With p.Ready false (the control plane is not Ready) it changes only what
// relaxes mTLS: the PeerAuthentication may go PERMISSIVE (the baseline
// first) and the mtls state label follows; nothing else moves.
func (p Pass) PlanNamespace(ns Namespace, heldBy string, f Facts) NamespacePlan {
	dp := p.Spec.DataPlane
	dpLabels := DataPlaneLabels(dp, p.Revision)
	out := NamespacePlan{PolicyPlan: p.PlanPolicies(ns, f), StateDataPlane: dp, HeldBy: heldBy}
	if heldBy != "" {
		out.StateDataPlane = v1alpha1.DataPlaneAmbient
	}
	base := maps.Clone(dpLabels)
	if ns.Decision.WriteRequest {
		base[labels.Mesh] = labels.MeshEnabled
	}
	if !p.Ready {
		// Held: what the operator applied stays, except what relaxes; the
		// mtls state label follows the PeerAuthentication.
		step := map[string]string{}
		for k := range ns.Owned {
			if v, ok := ns.Labels[k]; ok {
				step[k] = v
			}
		}
		if _, ok := step[labels.MeshMTLS]; ok {
			step[labels.MeshMTLS] = out.MTLSInForce
		}
		out.Steps = append(out.Steps, p.labelsStep(ns, step))
		return out
	}
	out.Base = base
	// On a conflict, the state labels and the data-plane label go first
	// (nothing is captured without configuration), then the operator's own
	// policies of the namespace; objects of others are left alone. Only the
	// enrollment request the operator wrote for spec.enrollNamespaces stays:
	// it is still asked for.
	keep := map[string]string{}
	if ns.Decision.WriteRequest {
		keep[labels.Mesh] = labels.MeshEnabled
	}
	out.OnConflict = append(out.OnConflict, Step{Kind: StepLabels, Namespace: ns.Name, Labels: keep, Why: "rolled back: a policy's name is taken"})
	for _, k := range OwnPolicyKeys() {
		kind, name, _ := strings.Cut(k, "/")
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(SecurityGroupVersion.WithKind(kind))
		u.SetNamespace(ns.Name)
		u.SetName(name)
		out.OnConflict = append(out.OnConflict, Step{Kind: StepDelete, Namespace: ns.Name, Key: k, Object: u, Why: "rolled back"})
	}
	out.Steps = append(out.Steps, p.EnrollmentLabels(ns, base, out.StateDataPlane, out.MTLSInForce))
	if heldBy != "" {
		out.Migration = fmt.Sprintf("%s: relabelled for %s, PERMISSIVE; its state label says %s until istio-cni releases Pod %s",
			ns.Name, dp, out.StateDataPlane, heldBy)
	}
	out.SecondLook = !f.Evaluate && out.Pending
	return out
}

// PlanSecondLook is the second look at a namespace whose data-plane label
// went on in this pass (first.SecondLook): ns is the namespace as its labels
// were applied, with the policies as the first look left them; its Pods now
// tell the truth, so a namespace that is ready for STRICT does not wait for
// the next poll.
func (p Pass) PlanSecondLook(ns Namespace, first NamespacePlan, f Facts) PolicyPlan {
	f.Evaluate = true
	out := p.PlanPolicies(ns, f)
	if first.HeldBy != "" {
		out.Migration = first.Migration
	}
	out.Steps = append(out.Steps, p.EnrollmentLabels(ns, first.Base, first.StateDataPlane, out.MTLSInForce))
	return out
}

// EnrollmentLabels is the labels step of an enrolled namespace: base (data
// plane, request) and the state labels describing what is in force. State
// labels the contract refuses make it a wait step that reports why.
func (p Pass) EnrollmentLabels(ns Namespace, base map[string]string, stateDP v1alpha1.DataPlane, mtlsInForce string) Step {
	sl, err := contract.Enrollment{DataPlane: contract.DataPlane(stateDP), MTLS: mtlsInForce, Isolation: string(p.Spec.Isolation),
		ControlPlane: p.ControlPlane}.StateLabels()
	if err != nil {
		return Step{Kind: StepWait, Namespace: ns.Name, Why: err.Error(), Err: err}
	}
	want := maps.Clone(base)
	maps.Copy(want, sl)
	return p.labelsStep(ns, want)
}

// labelsStep applies want on an enrolled namespace, unless it carries the
// reconcile-paused annotation: then the labels the operator owns there are
// held as they are (hand edits included). Leaving the mesh strips them
// regardless, as it deletes paused policies.
func (p Pass) labelsStep(ns Namespace, want map[string]string) Step {
	if ns.Paused {
		return Step{Kind: StepHold, Namespace: ns.Name, Key: "Namespace/" + ns.Name, Why: "reconcile paused"}
	}
	return Step{Kind: StepLabels, Namespace: ns.Name, Labels: want}
}

// OwnPolicyKeys are the operator's per-namespace policies, in the order
// they are removed: the baseline first (it would drop plaintext without
// STRICT), the PeerAuthentication last.
func OwnPolicyKeys() []string {
	return []string{keyBaseline, keyIsolation, keyPeerAuthentication}
}

// RelaxOptedOut is what a namespace an admin opted out with Istio's own
// label (contract.IstioOptOut, a label the operator does not hold) needs
// before anything else of its leave: Istio acts on that label at once
// (istio-cni releases the Pods one by one, new Pods come without their
// sidecar), so while some Pods already speak plaintext and others are
// still meshed, a STRICT PeerAuthentication refuses the plaintext. STRICT
// goes at once: the allow-nothing baseline (which drops plaintext too),
// then the PeerAuthentication; the namespace then has the mesh's default
// (PERMISSIVE unless the root namespace says otherwise, as after any
// leave). The rest of the leave (PlanRelax, PlanLetGo) follows as usual.
// Nothing when the namespace is not STRICT, or the opt-out label is one
// the operator holds itself.
func RelaxOptedOut(ns Namespace) []Step {
	optOut := contract.IstioOptOut(ns.Labels)
	if optOut == "" {
		return nil
	}
	key, _, _ := strings.Cut(optOut, "=")
	pa := ns.Live[keyPeerAuthentication]
	if ns.Owned[key] || pa == nil || ModeOf(pa) != contract.MTLSStrict {
		return nil
	}
	why := "opted out by the admin's " + optOut + ": STRICT goes before the Pods are released"
	var steps []Step
	if b := ns.Live[keyBaseline]; b != nil {
		steps = append(steps, Step{Kind: StepDelete, Namespace: ns.Name, Key: keyBaseline, Object: b, Why: why})
	}
	return append(steps, Step{Kind: StepDelete, Namespace: ns.Name, Key: keyPeerAuthentication, Object: pa, Why: why})
}

// PlanRelax is the first round of leaving the mesh, in the reverse order
// of enrolling: the state labels go first (workload operators stop relying
// on the mesh), then the policies (the namespace stops enforcing mTLS and
// isolation): the baseline before the PeerAuthentication (without it the
// namespace falls back to the mesh default, which may accept plaintext the
// baseline would drop), then any other policy of ours. The data-plane
// label stays, so its Pods keep their mTLS. Labels someone else also holds
// stay (server-side apply).
func PlanRelax(ns Namespace) []Step {
	var steps []Step
	keep := map[string]string{}
	for k := range ns.Owned {
		if v, ok := ns.Labels[k]; ok && !slices.Contains(contract.StateKeys(), k) && k != labels.Mesh {
			keep[k] = v
		}
	}
	if len(keep) != len(ns.Owned) {
		steps = append(steps, Step{Kind: StepLabels, Namespace: ns.Name, Labels: keep, Why: "leaving: state labels first"})
	}
	first := []string{keyBaseline, keyIsolation}
	order := slices.Clone(first)
	for _, k := range slices.Sorted(maps.Keys(ns.Live)) {
		if !slices.Contains(first, k) && k != keyPeerAuthentication {
			order = append(order, k)
		}
	}
	order = append(order, keyPeerAuthentication)
	for _, k := range order {
		if u := ns.Live[k]; u != nil {
			steps = append(steps, Step{Kind: StepDelete, Namespace: ns.Name, Key: k, Object: u, Why: "leaving"})
		}
	}
	return steps
}

// PlanLetGo is the second round of leaving the mesh, once every leaving
// namespace's first round (PlanRelax) was taken: each one's Pods are let go
// (its data-plane label and any request the operator wrote go). A namespace
// that declared another as an edge is thus never STRICT while that edge's
// Pods speak plaintext, whatever the names sort like and in a cycle of
// edges too. stillStrict are the namespaces that may still be STRICT: those
// whose pass failed (outside leaving) and the leaving ones whose first
// round failed; they keep their declared edges' data-plane labels on until
// a later pass. The result has one step per namespace of released (the
// leaving ones whose first round succeeded): the labels to apply, or what
// it waits for.
func PlanLetGo(released []Namespace, stillStrict []Namespace) []Step {
	held := map[string]string{} // edge → a namespace that declared it and may still be STRICT
	for _, ns := range stillStrict {
		state, _ := contract.Parse(ns.Labels)
		for _, e := range state.Edges {
			held[e] = ns.Name
		}
	}
	steps := make([]Step, 0, len(released))
	for _, ns := range released {
		if dependant, ok := held[ns.Name]; ok {
			steps = append(steps, Step{Kind: StepWait, Namespace: ns.Name, Why: fmt.Sprintf(
				"namespace %s keeps its data-plane label for now: %s, which declares it as an edge, may still be STRICT", ns.Name, dependant)})
			continue
		}
		steps = append(steps, Step{Kind: StepLabels, Namespace: ns.Name, Labels: map[string]string{}, Why: "leaving: let go"})
	}
	return steps
}

// Leaves says whether the namespace leaves the mesh in this pass: it is
// not to be enrolled but carries what the operator applied (labels it
// holds, policies).
func Leaves(ns Namespace) bool {
	return !ns.Deleting && !ns.Decision.Enroll && Applied(ns)
}

// Applied says whether the namespace carries anything the operator
// applied (labels it holds, policies): what a teardown releases.
func Applied(ns Namespace) bool {
	return len(ns.Owned) > 0 || len(ns.Live) > 0
}

// Selection is which namespaces a pass works on, before any of them is
// planned.
type Selection struct {
	// Announce are the labels steps of the namespaces announced for
	// ambient (mesh-state=joining), taken first.
	Announce []Step
	// Todo are the namespaces to enroll (or, held, to relax), in the order
	// given.
	Todo []string
	// HeldEnrolled: without p.Ready, the namespaces that stay enrolled as
	// they are (status.enrolledNamespaces lists them).
	HeldEnrolled []string
}

// Select picks the namespaces of a pass. gates are the ambient gates (nil
// outside ambient); enrolled is status.enrolledNamespaces.
//
// A namespace held only by its NetworkPolicies is announced
// (mesh-state=joining): a workload operator, the fleet operator among
// them, opens HBONE and the probe address on seeing it, and the next pass,
// woken by the changed policies, enrolls it. Capture never comes before
// the policies admit it, and a fleet that admits HBONE only where an
// enrollment is in effect is not left waiting for one.
//
// Without p.Ready an enrolled namespace keeps its configuration; only the
// break-glass may relax its mTLS, so only those with a PeerAuthentication
// of ours are worked on.
func (p Pass) Select(nss []Namespace, gates map[string]AmbientGate, enrolled []string) Selection {
	var out Selection
	for _, ns := range nss {
		if g := gates[ns.Name]; ns.Deleting || !ns.Decision.Enroll || !g.Hold || g.Blocked == "" || ns.Paused {
			continue
		}
		want := map[string]string{}
		for k := range ns.Owned {
			if v, ok := ns.Labels[k]; ok {
				want[k] = v
			}
		}
		want[labels.MeshState] = labels.MeshStateJoining
		out.Announce = append(out.Announce, Step{Kind: StepLabels, Namespace: ns.Name, Labels: want, Why: "announced for ambient"})
	}
	for _, ns := range nss {
		if ns.Deleting || !ns.Decision.Enroll || gates[ns.Name].Hold {
			continue
		}
		if !p.Ready {
			if !slices.Contains(enrolled, ns.Name) {
				continue
			}
			out.HeldEnrolled = append(out.HeldEnrolled, ns.Name)
			if ns.Live[keyPeerAuthentication] == nil {
				continue
			}
		}
		out.Todo = append(out.Todo, ns.Name)
	}
	return out
}

// hasLabels: every label of want is on the object with the same value.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
