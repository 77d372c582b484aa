package explore

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// world names the namespaces and Pods of one sequence.
type world struct {
	app, edge, other string
	// operator is the fleet operator as a caller (see caller).
	operator caller
}

// Pods the runner creates at the start of every sequence, so the access
// table has real callers (their meshing is what the cluster makes of them).
const (
	bystanderPod = "bystander"  // app namespace, no client label
	edgePod      = "edge-proxy" // edge namespace: the routing source's Pod
	foreignPod   = "lookalike"  // other namespace, wearing every label a fleet admits
	edgeApp      = "edge-proxy" // the routing source's Pod label app=
)

func clientPod(fleet string) string { return "client-" + fleet }

// judgement keeps what the invariants need to remember between states.
type judgement struct {
	w world
	// established: required connections seen allowed while required; a
	// later denial while still required is a lost edge.
	established map[string]bool
	// lastAllowed: the required connections of the latest state, allowed or not.
	lastAllowed map[string]verdict
	pvcUIDs     map[string]types.UID
	// upOnce: per fleet (UID), the member ordinals seen up (checkAvailability)
	// since they were last outside spec.replicas.
	upOnce map[types.UID]map[int]bool
	// hadPolicy: fleets (UID) whose NetworkPolicy has existed; policyGone:
	// since when it has been missing after that (checkPolicy).
	hadPolicy  map[types.UID]bool
	policyGone map[types.UID]goneSince
	violations []string
	seen       map[string]bool
	// wasStrict: namespaces whose mesh-mtls was STRICT in the previous state;
	// relaxedAfterCutover: those whose mesh-mtls was relaxed then but
	// carried its recorded cutover (labels.MeshStrictReady).
	wasStrict, relaxedAfterCutover map[string]bool
	// last is the latest state judged.
	last *snapshot
	// atRest: the state judged is the one the cluster came to rest in, where
	// no grace applies.
	atRest bool
	// holds: when the license could not be known (checkHeld).
	holds []hold
	// before: the mesh part of the state judged before (snapshot.meshPart).
	before *snapshot
	// optOuts: the Istio opt-out labels an admin set during the sequence
	// (checkTenants); optOutSeen, optOutRelaxed: per opt-out (index),
	// the first state it stood in, and the first one after that in which
	// its namespace was not STRICT (optOutRelaxing).
	optOuts                   []optOut
	optOutSeen, optOutRelaxed map[int]time.Time
	// faults: the API faults played (checkFaultStatus); handEdits: when
	// the explorer deleted a fleet's NetworkPolicy itself; documented:
	// the reasons docs/troubleshooting.md explains (faults.go).
	faults     []faultWatch
	handEdits  []time.Time
	documented func(string) bool
	// adv: the policies, and what admins and tenants set (checkAdversaries).
	adv *advJudge
}

func newJudgement(w world) *judgement {
	return &judgement{w: w, established: map[string]bool{}, pvcUIDs: map[string]types.UID{}, upOnce: map[types.UID]map[int]bool{},
		hadPolicy: map[types.UID]bool{}, policyGone: map[types.UID]goneSince{}, seen: map[string]bool{}}
}

func (j *judgement) fail(key, format string, args ...any) {
	if j.seen[key] {
		return
	}
	j.seen[key] = true
	j.violations = append(j.violations, fmt.Sprintf(format, args...))
}

// row is one connection of the access table.
type row struct {
	src      caller
	port     int
	required bool
	why      string
}

// check judges one observed state: the access table of every fleet
// (required edges never lost once they held, forbidden ones never open),
// STRICT only over meshed workloads and edges, at most one member of a
// fleet unavailable, disks never replaced, nothing released while the
// license cannot be known.
func (j *judgement) check(s *snapshot, step int) {
	ambient := len(s.objs[gvrZTunnels]) > 0
	j.trackOptOuts(s)
	j.lastAllowed = map[string]verdict{}
	required := map[string]bool{}
	byName := map[string]*corev1.Pod{}
	for _, ns := range []string{j.w.app, j.w.edge, j.w.other} {
		for _, p := range s.pods(ns) {
			byName[ns+"/"+p.Name] = &p
		}
	}
	podAs := func(ns, name string) (caller, bool) {
		p := byName[ns+"/"+name]
		if p == nil {
			return caller{}, false
		}
		return podCaller(p, ambient), true
	}
	for _, f := range s.fleets(j.w.app) {
		if f.DeletionTimestamp != nil {
			continue
		}
		members := j.members(s, f)
		grace := j.checkPolicy(s, f, len(members) > 0, step)
		var rows []row
		if c, ok := podAs(j.w.app, clientPod(f.Name)); ok {
			// applicationAccess Policies leaves 8080 to the user's own
			// AuthorizationPolicies (none here), so the row is not the
			// operators' to keep.
			// A client Pod whose label was taken away is an unlabelled Pod.
			labelled := c.labels[labels.ClientOf] == f.Name
			required := labelled && (f.Spec.Mesh == nil || f.Spec.Mesh.Istio == nil || f.Spec.Mesh.Istio.ApplicationAccess != fleetv1.Policies)
			why := "labelled client on 8080"
			if !labelled {
				why = "a client Pod without its label"
			}
			rows = append(rows, row{c, 8080, required, why}, row{c, 8081, false, "a client on the peer port"})
		}
		if c, ok := podAs(j.w.app, bystanderPod); ok {
			rows = append(rows, row{c, 8080, false, "unlabelled Pod of the namespace"}, row{c, 8081, false, "unlabelled Pod on the peer port"})
		}
		if c, ok := podAs(j.w.edge, edgePod); ok {
			routed := f.Spec.Routing != nil && f.Spec.Routing.Source.Namespace == j.w.edge
			rows = append(rows, row{c, 8080, routed, "the routing source on 8080"}, row{c, 8081, false, "the routing source on the peer port"})
		}
		if c, ok := podAs(j.w.other, foreignPod); ok {
			rows = append(rows, row{c, 8080, false, "another namespace with every label"}, row{c, 8081, false, "another namespace on the peer port"})
		}
		rows = append(rows, row{j.w.operator, 8081, true, "the operator's /state reads"}, row{j.w.operator, 8080, false, "the operator only reads /state"})
		for i := range members {
			dst := &members[i]
			all := rows
			for k := range members {
				if k != i {
					peer := podCaller(&members[k], ambient)
					all = append(all, row{peer, 8081, true, "peers on 8081"}, row{peer, 8080, false, "members are not clients of their own fleet"})
				}
			}
			for _, r := range all {
				v := s.judge(r.src, dst, r.port, ambient)
				key := fmt.Sprintf("%s/%s %s -> %s(%s):%d", j.w.app, f.Name, r.src, dst.Name, dst.UID, r.port)
				switch {
				case r.required:
					required[key] = true
					j.lastAllowed[key] = v
					if v.allowed {
						j.established[key] = true
					} else if j.established[key] && !j.frozenEdge(s, r.src, dst) && !j.optOutRelaxing(s, dst, v) {
						j.fail("lost "+key, "step %d, after %s: required connection LOST (%s): %s -> %s:%d: %s", step, s.last, r.why, r.src, dst.Name, r.port, v.why)
					}
				case v.allowed && !grace && !(v.hbone && !j.atRest && s.istioPoliciesMissing()) && (r.why != "labelled client on 8080"):
					// Within handEditGrace of a hand deletion of the fleet's
					// NetworkPolicy the members are open until the operator
					// restores it; that window is the editor's doing, not the
					// operator's (checkPolicy bounds it). With Istio's CRDs
					// removed every Istio policy is gone with them, and a
					// captured member is as open as its NetworkPolicy's HBONE
					// rule, which cannot see the port inside the tunnel
					// (docs/development.md, "Known limitations"): only a
					// connection the NetworkPolicy admitted as HBONE is
					// excused then; one it admitted on the port itself is a
					// NetworkPolicy leak. The labelled client's 8080 is
					// never forbidden, only not required under Policies.
					j.fail("opened "+key, "step %d, after %s: forbidden connection OPEN (%s): %s -> %s:%d: %s", step, s.last, r.why, r.src, dst.Name, r.port, v.why)
				}
			}
		}
		j.checkAvailability(s, f, step)
	}
	for k := range j.established {
		if !required[k] {
			delete(j.established, k)
		}
	}
	j.checkStrict(s, step, ambient)
	j.checkDisks(s, step)
	j.checkHeld(s, step)
	j.checkTenants(s, step)
	j.checkFaultStatus(s)
	j.checkAdversaries(s, step)
	j.last = s
}

// members are the fleet's member Pods that take part in traffic.
func (j *judgement) members(s *snapshot, f fleetv1.CelldFleet) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range s.pods(j.w.app) {
		if p.Labels[labels.Instance] == f.Name && p.Labels[labels.Fleet] == f.Name {
			out = append(out, p)
		}
	}
	return out
}

// handEditGrace bounds how long a fleet may be without its NetworkPolicy
// after it was deleted (env.handedit): the operator watches the policies
// it owns and puts one back on the reconcile the deletion triggers. Within
// it forbidden connections are not reported (the editor opened them);
// beyond it the missing policy is itself a violation and forbidden
// connections are judged as always. At rest a fleet without its policy is a
// violation, and a fleet whose policy never existed gets no grace at all
// (the operator applies it before the StatefulSet).
const handEditGrace = 15 * time.Second

// goneSince: when and after which event a fleet's policy went missing.
type goneSince struct {
	at   time.Time
	step int
	by   string
}

// checkPolicy judges the presence of fleet f's NetworkPolicy and reports
// whether the state is within handEditGrace of its deletion (forbidden
// connections excused).
func (j *judgement) checkPolicy(s *snapshot, f fleetv1.CelldFleet, members bool, step int) bool {
	_, has := s.objs[gvrNetpols][j.w.app+"/"+f.Name]
	gone, wasGone := j.policyGone[f.UID]
	key := "nopolicy " + string(f.UID)
	switch {
	case has:
		if wasGone && s.at.Sub(gone.at) > handEditGrace {
			j.fail(key, "step %d, after %s: fleet %s's NetworkPolicy came back only %s after it went missing (step %d, after %s), beyond the %s grace",
				step, s.last, f.Name, s.at.Sub(gone.at).Round(time.Second), gone.step, gone.by, handEditGrace)
		}
		delete(j.policyGone, f.UID)
		j.hadPolicy[f.UID] = true
		return false
	case j.atRest:
		j.fail(key, "at rest, fleet %s has no NetworkPolicy %s/%s", f.Name, j.w.app, f.Name)
		return false
	case !j.hadPolicy[f.UID]:
		return false // never had one: its members are judged as they are
	case !wasGone:
		gone = goneSince{at: s.at, step: step, by: s.last}
		j.policyGone[f.UID] = gone
	}
	if s.at.Sub(gone.at) <= handEditGrace {
		return true
	}
	if members {
		j.fail(key, "step %d, after %s: fleet %s has run without its NetworkPolicy for more than %s (missing since step %d, after %s)",
			step, s.last, f.Name, handEditGrace, gone.step, gone.by)
	}
	return false
}

// checkAvailability: at most one member the fleet wants is down. Members
// are counted by ordinal below spec.replicas: a member is down when its Pod
// is missing, terminating, not running with an address, or not Ready. An
// ordinal counts once it has been up (a fleet being created or scaled up is
// not failed for members it never had) and is forgotten while it is outside
// spec.replicas; a fleet being deleted is not judged (check skips it).
func (j *judgement) checkAvailability(s *snapshot, f fleetv1.CelldFleet, step int) {
	want := 1
	if f.Spec.Replicas != nil {
		want = int(*f.Spec.Replicas)
	}
	seen := j.upOnce[f.UID]
	if seen == nil {
		seen = map[int]bool{}
		j.upOnce[f.UID] = seen
	}
	for o := range seen {
		if o >= want {
			delete(seen, o)
		}
	}
	var down []string
	for o := range want {
		name := fmt.Sprintf("%s-%d", f.Name, o)
		why := memberDown(s.objs[gvrPods][j.w.app+"/"+name], f.Name)
		if why == "" {
			seen[o] = true
		} else if seen[o] {
			down = append(down, name+" ("+why+")")
		}
	}
	if len(down) > 1 {
		j.fail(fmt.Sprintf("down %s %d", f.Name, step), "step %d, after %s: %d members of fleet %s unavailable at once: %s",
			step, s.last, len(down), f.Name, strings.Join(down, ", "))
	}
}

// memberDown says why the member Pod u of fleet is down ("" when it is up).
func memberDown(u *unstructured.Unstructured, fleet string) string {
	if u == nil || u.GetLabels()[labels.Instance] != fleet {
		return "missing"
	}
	p := corev1.Pod{}
	if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil {
		return "unreadable"
	}
	switch {
	case p.DeletionTimestamp != nil:
		return "terminating"
	case p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "":
		return "not running: " + string(p.Status.Phase)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			if c.Status == corev1.ConditionTrue {
				return ""
			}
			return "not Ready"
		}
	}
	return "not Ready"
}

// checkStrict: STRICT never precedes meshed workloads. When a namespace's
// mesh-mtls turns STRICT, every running Pod in it and in its declared edge
// namespaces is meshed (a return to STRICT on the recorded cutover is no
// new cutover). Pods that appear later are istio-cni's to capture,
// and a plaintext Pod appearing later in an accepted edge does not switch
// STRICT off (by design, docs/servicemesh.md); an edge declared later must
// relax the namespace, which the check at rest (strictAtRest) holds.
func (j *judgement) checkStrict(s *snapshot, step int, ambient bool) {
	dp := podmesh.DataPlaneSidecar
	if ambient {
		dp = podmesh.DataPlaneAmbient
	}
	if j.wasStrict == nil {
		j.wasStrict, j.relaxedAfterCutover = map[string]bool{}, map[string]bool{}
	}
	for _, ns := range []string{j.w.app, j.w.edge, j.w.other} {
		strict := namespaceStrict(s, ns) != nil
		turned := strict && !j.wasStrict[ns]
		// A return to STRICT on the recorded cutover (after a maintenance
		// window, or an edge declared later) is no new cutover: the
		// operator keeps a cut-over namespace's cutover by design, and a
		// Pod started while it was relaxed is istio-cni's to capture, as
		// in a namespace that stayed STRICT.
		returned := turned && j.relaxedAfterCutover[ns]
		pa := s.objs[gvrPAs][ns+"/"+meshMTLSPolicy]
		j.wasStrict[ns] = strict
		j.relaxedAfterCutover[ns] = !strict && pa != nil && pa.GetAnnotations()[labels.MeshStrictReady] != ""
		if !turned || returned {
			continue
		}
		state, _ := contract.Parse(s.nsLabels(ns))
		for _, from := range append([]string{ns}, state.Edges...) {
			for _, p := range s.pods(from) {
				if !podmesh.MeshedIn(dp, &p) {
					j.fail("strict "+ns+"/"+from+"/"+p.Name, "step %d, after %s: namespace %s turned STRICT while Pod %s/%s is not meshed", step, s.last, ns, from, p.Name)
				}
			}
		}
	}
}

// namespaceStrict is the namespace-wide PeerAuthentication in STRICT mode,
// nil when there is none.
func namespaceStrict(s *snapshot, ns string) *unstructured.Unstructured {
	for _, pa := range s.in(gvrPAs, ns) {
		mode, _, _ := unstructured.NestedString(pa.Object, "spec", "mtls", "mode")
		sel, _, _ := unstructured.NestedMap(pa.Object, "spec", "selector")
		if mode == "STRICT" && len(sel) == 0 {
			return &pa
		}
	}
	return nil
}

// strictAtRest: in the last state, a STRICT namespace's declared edges are
// all accepted (recorded on its mesh-mtls) or meshed: an edge declared after
// the cutover, with plaintext Pods, must have relaxed the namespace.
func (j *judgement) strictAtRest(s *snapshot) []string {
	ambient := len(s.objs[gvrZTunnels]) > 0
	dp := podmesh.DataPlaneSidecar
	if ambient {
		dp = podmesh.DataPlaneAmbient
	}
	var out []string
	for _, ns := range []string{j.w.app, j.w.edge, j.w.other} {
		pa := namespaceStrict(s, ns)
		if pa == nil {
			continue
		}
		for _, e := range unacceptedPlaintextEdges(s, s.nsLabels(ns), pa, dp) {
			out = append(out, fmt.Sprintf("at rest, namespace %s is STRICT although its edge %s, declared after the cutover, runs the plaintext Pod %s", ns, e.namespace, e.pod))
		}
	}
	return out
}

// plaintextPod is a Pod of an edge namespace that is not meshed.
type plaintextPod struct{ namespace, pod string }

// unacceptedPlaintextEdges are the Pods not meshed in dp of the edges
// nsLabels declare that the STRICT mesh-mtls pa has not accepted
// (labels.MeshStrictEdges): what a namespace must relax for, since STRICT
// would refuse the plaintext calls its edges were declared for.
func unacceptedPlaintextEdges(s *snapshot, nsLabels map[string]string, pa *unstructured.Unstructured, dp podmesh.DataPlane) []plaintextPod {
	accepted := strings.Split(pa.GetAnnotations()[labels.MeshStrictEdges], ",")
	state, _ := contract.Parse(nsLabels)
	var out []plaintextPod
	for _, e := range state.Edges {
		if slices.Contains(accepted, e) {
			continue
		}
		for _, p := range s.pods(e) {
			if !podmesh.MeshedIn(dp, &p) {
				out = append(out, plaintextPod{e, p.Name})
			}
		}
	}
	return out
}

// honestAtRest: in the last state, what the namespace labels say is what
// the policies do: mesh-mtls=strict exactly when a namespace-wide STRICT
// PeerAuthentication is there (while Istio's API is served).
func (j *judgement) honestAtRest(s *snapshot) []string {
	if s == nil || s.absent[gvrPAs] {
		return nil
	}
	var out []string
	for _, ns := range []string{j.w.app, j.w.edge, j.w.other} {
		said := s.nsLabels(ns)[labels.MeshMTLS] == contract.MTLSStrict
		if is := namespaceStrict(s, ns) != nil; said != is {
			out = append(out, fmt.Sprintf("at rest, namespace %s says %s=%q but a namespace-wide STRICT PeerAuthentication is there: %t",
				ns, labels.MeshMTLS, s.nsLabels(ns)[labels.MeshMTLS], is))
		}
	}
	return out
}

// checkDisks: a member's claim keeps its UID for the whole sequence.
func (j *judgement) checkDisks(s *snapshot, step int) {
	for _, u := range s.in(gvrPVCs, j.w.app) {
		if old, ok := j.pvcUIDs[u.GetName()]; ok && old != u.GetUID() {
			j.fail("disk "+u.GetName(), "step %d, after %s: claim %s was replaced (uid %s -> %s): a member's disk was dropped", step, s.last, u.GetName(), old, u.GetUID())
		}
		j.pvcUIDs[u.GetName()] = u.GetUID()
	}
}

// missing lists the required connections that did not hold in the last
// state judged (at quiescence: a required edge never established).
func (j *judgement) missing() []string {
	var out []string
	for k, v := range j.lastAllowed {
		if !v.allowed {
			out = append(out, fmt.Sprintf("at rest, required connection missing: %s: %s", k, v.why))
		}
	}
	sort.Strings(out)
	return out
}

// checkHeld: while a hold lasts (a license that was valid could not be
// read, or its Secret was missing for a moment), nothing is released
// (releasedWhileHeld, from the state before to this one).
func (j *judgement) checkHeld(s *snapshot, step int) {
	if j.before != nil {
		for _, h := range j.holds {
			if !h.covers(s.at) {
				continue
			}
			for _, v := range append(releasedWhileHeld(j.w, j.before, s), fleetPolicyDeleted(j.w, j.before, s, j.handEdits)...) {
				j.fail("held "+v, "step %d, after %s: while %s: %s", step, s.last, h.why, v)
			}
			break
		}
	}
	j.before = s.meshPart()
}

// heldLabels are the mesh state labels an enrolled namespace keeps while
// the license cannot be known; dataPlaneLabels are Istio's, of which it
// keeps the one it has.
var (
	heldLabels      = []string{labels.MeshState, labels.MeshMTLS, labels.MeshDataPlane}
	dataPlaneLabels = []string{labels.IstioDataPlaneMode, labels.IstioInjection, labels.IstioRevision}
)

// maintenanceSlack: a relaxation the operator decided just before a
// maintenance window ended may be seen just after.
const maintenanceSlack = 5 * time.Second

// releasedWhileHeld is what went, from before to now, that releases or
// relaxes one of the world's enrolled namespaces without the spec asking:
// a mesh state or data-plane label removed, its mesh-mtls
// PeerAuthentication or mesh-isolation AuthorizationPolicy deleted,
// mesh-mtls strict turned permissive. Unknown is not absent: an operator
// that cannot know its license holds the mesh as it is. The spec asks when
// the ServiceMesh is deleted, mtls.mode is permissive, a maintenance
// window is open, isolation is off, the data plane is being switched, or
// the namespace was opted out; states while Istio's API is not served are
// left out (its policies go with it).
func releasedWhileHeld(w world, before, now *snapshot) []string {
	mesh, meshBefore := now.serviceMesh(), before.serviceMesh()
	if mesh == nil || meshBefore == nil || mesh.DeletionTimestamp != nil || before.istioPoliciesMissing() || now.istioPoliciesMissing() {
		return nil
	}
	relaxAsked := mesh.Spec.MTLS.Mode == meshv1.MTLSPermissive ||
		(mesh.Spec.MTLS.MaintenanceUntil != nil && now.at.Before(mesh.Spec.MTLS.MaintenanceUntil.Add(maintenanceSlack)))
	var out []string
	for _, name := range []string{w.app, w.edge, w.other} {
		was, is := before.objs[gvrNamespaces]["/"+name], now.objs[gvrNamespaces]["/"+name]
		if was == nil || is == nil || is.GetDeletionTimestamp() != nil || optedOut(meshBefore, was) || optedOut(mesh, is) {
			continue
		}
		wasLabels, isLabels := was.GetLabels(), is.GetLabels()
		if dp := wasLabels[labels.MeshDataPlane]; dp != "" && dp != string(mesh.Spec.DataPlane) {
			continue // a data plane switch relaxes the namespace first
		}
		for _, k := range heldLabels {
			if v, had := wasLabels[k]; had {
				if _, has := isLabels[k]; !has {
					out = append(out, fmt.Sprintf("namespace %s lost %s=%s", name, k, v))
				}
			}
		}
		if had, has := anyOf(wasLabels, dataPlaneLabels), anyOf(isLabels, dataPlaneLabels); had != "" && has == "" {
			out = append(out, fmt.Sprintf("namespace %s lost its data-plane label %s", name, had))
		}
		policies := []struct {
			gvr  schema.GroupVersionResource
			kind string
			name string
		}{{gvrPAs, "PeerAuthentication", meshMTLSPolicy}, {gvrAPs, "AuthorizationPolicy", meshIsolationPolicy}}
		for _, p := range policies {
			if p.name == meshIsolationPolicy && mesh.Spec.Isolation == meshv1.IsolationOff {
				continue
			}
			k := name + "/" + p.name
			if before.objs[p.gvr][k] != nil && now.objs[p.gvr][k] == nil {
				out = append(out, fmt.Sprintf("%s %s was deleted", p.kind, k))
			}
		}
		if relaxAsked || owesEdgeRelaxation(before, now, name, wasLabels, isLabels, meshBefore) {
			continue
		}
		// The label records the mode in force after the PeerAuthentication
		// moved: a relaxation is judged where that moved.
		paBefore := before.objs[gvrPAs][name+"/"+meshMTLSPolicy]
		labelLags := paBefore != nil && mtlsMode(paBefore) != "STRICT"
		if v, has := isLabels[labels.MeshMTLS]; wasLabels[labels.MeshMTLS] == contract.MTLSStrict && has && v != contract.MTLSStrict && !labelLags {
			out = append(out, fmt.Sprintf("namespace %s went from %s=strict to %q without the spec asking", name, labels.MeshMTLS, v))
		}
		if pa := now.objs[gvrPAs][name+"/"+meshMTLSPolicy]; pa != nil && mtlsMode(paBefore) == "STRICT" && mtlsMode(pa) != "STRICT" {
			out = append(out, fmt.Sprintf("PeerAuthentication %s/%s went from STRICT to %s without the spec asking", name, meshMTLSPolicy, mtlsMode(pa)))
		}
	}
	return out
}

// owesEdgeRelaxation: the namespace was STRICT and declares (before or
// now: the fleet operator may withdraw an edge in the same moment) an edge
// it has not accepted, with a plaintext Pod in it. The mesh operator
// relaxes such a namespace from what it read (the declaration, the edge's
// Pods), whatever failed before: the fleet asked for it.
func owesEdgeRelaxation(before, now *snapshot, name string, wasLabels, isLabels map[string]string, mesh *meshv1.ServiceMesh) bool {
	pa := before.objs[gvrPAs][name+"/"+meshMTLSPolicy]
	if pa == nil || mtlsMode(pa) != "STRICT" {
		return false
	}
	dp := podmesh.DataPlaneSidecar
	if mesh.Spec.DataPlane == meshv1.DataPlaneAmbient {
		dp = podmesh.DataPlaneAmbient
	}
	return len(unacceptedPlaintextEdges(now, wasLabels, pa, dp)) > 0 || len(unacceptedPlaintextEdges(now, isLabels, pa, dp)) > 0
}

// The mesh operator's per-namespace policies (enroll.PeerAuthenticationName
// and enroll.IsolationPolicyName, internal to the mesh operator).
const (
	meshMTLSPolicy      = "mesh-mtls"
	meshIsolationPolicy = "mesh-isolation"
)

// optedOut: the namespace is not asking to be enrolled: an opt-out label
// (the admin's core.navique.com/mesh=disabled or Istio's own, isOptOut),
// or neither the label nor spec.enrollNamespaces asks.
func optedOut(mesh *meshv1.ServiceMesh, ns *unstructured.Unstructured) bool {
	if optedOutByLabel(ns.GetLabels()) {
		return true
	}
	if ns.GetLabels()[labels.Mesh] == labels.MeshEnabled {
		return false
	}
	return !slices.Contains(mesh.Spec.EnrollNamespaces, ns.GetName())
}

// anyOf is the first of keys set in l, "" when none is.
func anyOf(l map[string]string, keys []string) string {
	for _, k := range keys {
		if _, ok := l[k]; ok {
			return k
		}
	}
	return ""
}

func mtlsMode(pa *unstructured.Unstructured) string {
	if pa == nil {
		return ""
	}
	mode, _, _ := unstructured.NestedString(pa.Object, "spec", "mtls", "mode")
	return mode
}

// optOut is an Istio opt-out label an admin set on a namespace (admin.optout,
// field manager explore-admin), from the resourceVersion the admin's write
// returned until the one of the write that took it away (0: it stands to
// the end of the sequence).
type optOut struct {
	namespace, key, value string
	from, until           int64
}

// stands: the admin's label is in force in the state at resourceVersion rv.
func (o optOut) stands(rv int64) bool {
	return rv >= o.from && (o.until == 0 || rv < o.until)
}

// istioOptOuts are Istio's own namespace opt-outs: the label and the value
// that keeps the namespace's workloads out of the mesh.
var istioOptOuts = map[string]string{
	labels.IstioInjection:     "disabled",
	labels.IstioDataPlaneMode: "none",
}

// isOptOut: the label key=value keeps a namespace out of the mesh, by
// Istio's own labels or the admin's core.navique.com/mesh=disabled.
func isOptOut(key, value string) bool {
	if key == labels.Mesh {
		return value == labels.MeshDisabled
	}
	v, ok := istioOptOuts[key]
	return ok && v == value
}

// optedOutByLabel: one of the namespace's labels opts it out (isOptOut).
func optedOutByLabel(l map[string]string) bool {
	for k, v := range l {
		if isOptOut(k, v) {
			return true
		}
	}
	return false
}

// tenantPrincipal is a workload identity of the tenant's namespace.
func tenantPrincipal(ns string) string { return "cluster.local/ns/" + ns + "/sa/default" }

// checkTenants: what a tenant (the world's other namespace, edited by a
// user with namespace-edit rights only) does never reaches past its
// namespace, and no admin's opt-out label is taken:
//   - the tenant's namespace is never taken as the control plane: not the
//     ServiceMesh's status.controlPlane.namespace, not any namespace's
//     mesh-control-plane label, not a fleet's istio-control-plane
//     annotation (a Deployment labelled app=istiod is all a tenant can
//     make; a control plane is recognised where a tenant cannot fake it);
//   - another namespace's access does not change for the tenant: its
//     mesh-isolation DENY still refuses a meshed caller of the tenant's
//     namespace (shared/authzeval), none of its NetworkPolicies or other
//     AuthorizationPolicies names the tenant's namespace (an istiod egress,
//     an allowed source), and it declares no edge from it (the access
//     table's look-alike rows judge the connections themselves);
//   - an admin's Istio opt-out label reads exactly as the admin set it
//     while it stands: not overwritten, not deleted.
func (j *judgement) checkTenants(s *snapshot, step int) {
	tenant := j.w.other
	if tenant == "" {
		return
	}
	if m := s.serviceMesh(); m != nil && m.Status.ControlPlane != nil && m.Status.ControlPlane.Namespace == tenant {
		j.fail("tenant cp status", "step %d, after %s: the tenant's namespace %s is taken as the control plane: ServiceMesh status.controlPlane.namespace=%s (%s)",
			step, s.last, tenant, tenant, m.Status.ControlPlane.Management)
	}
	var names []string
	for k := range s.objs[gvrNamespaces] {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ns := s.objs[gvrNamespaces][k]
		if ns.GetLabels()[labels.MeshControlPlane] == tenant {
			j.fail("tenant cp label "+ns.GetName(), "step %d, after %s: the tenant's namespace %s is taken as the control plane: namespace %s has %s=%s",
				step, s.last, tenant, ns.GetName(), labels.MeshControlPlane, tenant)
		}
	}
	for _, f := range s.fleets(j.w.app) {
		if f.Annotations[labels.IstioControlPlane] == tenant {
			j.fail("tenant cp fleet "+f.Name, "step %d, after %s: the tenant's namespace %s is taken as the control plane: fleet %s/%s has %s=%s",
				step, s.last, tenant, j.w.app, f.Name, labels.IstioControlPlane, tenant)
		}
	}
	for _, ns := range []string{j.w.app, j.w.edge} {
		if _, ok := s.nsLabels(ns)[labels.AllowFromPrefix+tenant]; ok {
			j.fail("tenant edge "+ns, "step %d, after %s: namespace %s declares the tenant's namespace %s as an edge (%s%s)",
				step, s.last, ns, tenant, labels.AllowFromPrefix, tenant)
		}
		for _, ap := range s.in(gvrAPs, ns) {
			if ap.GetName() == meshIsolationPolicy {
				d := authzeval.Evaluate("PERMISSIVE", []authzeval.Policy{authzeval.FromUnstructured(&ap, nil)},
					authzeval.Request{MTLS: true, Principal: tenantPrincipal(tenant), Namespace: tenant, Port: 8080})
				if d.Allowed {
					j.fail("tenant isolation "+ns, "step %d, after %s: the mesh-isolation of namespace %s lets the tenant's namespace %s in: %s",
						step, s.last, ns, tenant, d.Why)
				}
				continue
			}
			if namesNamespace(ap.Object["spec"], tenant) {
				j.fail("tenant ap "+ns+"/"+ap.GetName(), "step %d, after %s: AuthorizationPolicy %s/%s names the tenant's namespace %s",
					step, s.last, ns, ap.GetName(), tenant)
			}
		}
		for _, np := range s.in(gvrNetpols, ns) {
			if namesNamespace(np.Object["spec"], tenant) {
				j.fail("tenant np "+ns+"/"+np.GetName(), "step %d, after %s: NetworkPolicy %s/%s names the tenant's namespace %s",
					step, s.last, ns, np.GetName(), tenant)
			}
		}
	}
	for i, o := range j.optOuts {
		ns := s.objs[gvrNamespaces]["/"+o.namespace]
		if !o.stands(s.rv) || ns == nil || ns.GetDeletionTimestamp() != nil {
			continue
		}
		got, ok := ns.GetLabels()[o.key]
		switch {
		case !ok:
			j.fail(fmt.Sprintf("optout %d", i), "step %d, after %s: the admin's %s=%s on namespace %s was deleted",
				step, s.last, o.key, o.value, o.namespace)
		case got != o.value:
			j.fail(fmt.Sprintf("optout %d", i), "step %d, after %s: the admin's %s=%s on namespace %s was overwritten: it reads %q",
				step, s.last, o.key, o.value, o.namespace, got)
		}
	}
}

// namesNamespace: somewhere in a policy's spec, the namespace ns is named:
// as a value (a namespaceSelector's kubernetes.io/metadata.name, an
// AuthorizationPolicy's namespaces) or inside a principal
// (cluster.local/ns/<ns>/sa/...).
func namesNamespace(v any, ns string) bool {
	switch t := v.(type) {
	case map[string]any:
		for _, x := range t {
			if namesNamespace(x, ns) {
				return true
			}
		}
	case []any:
		for _, x := range t {
			if namesNamespace(x, ns) {
				return true
			}
		}
	case string:
		return t == ns || strings.Contains(t, "/ns/"+ns+"/")
	}
	return false
}

// optOutGrace and optOutRelaxBound bound the excuse for an admin's Istio
// opt-out on a STRICT namespace (optOutRelaxing): the relaxation observed,
// plus optOutGrace for Istio to push it to ztunnel and the sidecars (the
// judge reads the PeerAuthentication, the data plane follows it within
// about a second); and when no relaxation is observed, optOutRelaxBound
// after the admin's label, the mesh operator's reaction on a loaded bed
// (it relaxes in the pass the label's watch event starts).
const (
	optOutGrace      = 2 * time.Second
	optOutRelaxBound = 10 * time.Second
)

// trackOptOuts records, for each of the admin's Istio opt-outs, the first
// state in which it stands and the first one after that in which its
// namespace has no STRICT PeerAuthentication.
func (j *judgement) trackOptOuts(s *snapshot) {
	for i, o := range j.optOuts {
		if _, istio := istioOptOuts[o.key]; !istio || !o.stands(s.rv) {
			continue
		}
		if j.optOutSeen == nil {
			j.optOutSeen, j.optOutRelaxed = map[int]time.Time{}, map[int]time.Time{}
		}
		if _, ok := j.optOutSeen[i]; !ok {
			j.optOutSeen[i] = s.at
		}
		if _, ok := j.optOutRelaxed[i]; !ok && namespaceStrict(s, o.namespace) == nil {
			j.optOutRelaxed[i] = s.at
		}
	}
}

// optOutRelaxing: a required connection to dst refused by STRICT mTLS
// (verdict v) is excused while an admin's Istio opt-out on dst's namespace
// (istio.io/dataplane-mode=none, istio-injection=disabled) has the data
// plane release its Pods before the mesh operator can relax STRICT
// (issue 43, seed 7039: a released member's plaintext to a still captured
// peer): from the admin's write until the relaxation is observed, plus
// optOutGrace, and at most optOutRelaxBound without one. Never at rest,
// and never for another reason of refusal.
func (j *judgement) optOutRelaxing(s *snapshot, dst *corev1.Pod, v verdict) bool {
	if j.atRest || !strings.Contains(v.why, "rejected by STRICT mTLS") {
		return false
	}
	for i, o := range j.optOuts {
		if o.namespace != dst.Namespace || !o.stands(s.rv) {
			continue
		}
		seen, ok := j.optOutSeen[i]
		if !ok {
			continue
		}
		if relaxed, ok := j.optOutRelaxed[i]; ok {
			if s.at.Sub(relaxed) <= optOutGrace {
				return true
			}
			continue
		}
		if s.at.Sub(seen) <= optOutRelaxBound {
			return true
		}
	}
	return false
}
