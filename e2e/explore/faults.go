package explore

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// API faults (issue 43 section 2): env.fault sets a fault on one
// operator's requests at the bed's fault proxy (harness.FaultProxy) for
// its span (faultSpec.span), env.apiserver restart restarts kube-apiserver.
// While a fault lasts (and faultGrace after) nothing may be released or deleted
// (releasedWhileHeld, fleetPolicyDeleted: the license holds generalised),
// and a fault that keeps an operator's steps failing for longer than
// statusBound must show in the status of what it reconciles
// (checkFaultStatus).

// faultSpec is one fault of the alphabet: whose requests, which ones, how
// they fail.
type faultSpec struct {
	// operator: "fleet" or "mesh".
	operator string
	// resource and verb as the proxy matches them (verb "" is every verb
	// but watch); the fault is a harness.Fault* shape.
	resource, verb, fault string
	// license: the request is the license Secret read (limited to the
	// mesh operator's namespace).
	license bool
}

// span is how long the fault lasts unless env.fault clear ends it first.
func (f faultSpec) span() time.Duration {
	if f.fault == harness.FaultTimeout {
		return timeoutSpan
	}
	return faultSpan
}

// faults are the reads and writes whose failure an operator used to take
// for an answer (a missing license, no policies, no namespace label): the
// license Secret get, the uncached PeerAuthentication and Pod lists of
// enrollment, the namespace label writes, the fleet's NetworkPolicy and
// StatefulSet (every verb: the cached reads never reach the server, the
// applies and uncached reads do).
var faults = map[string]faultSpec{
	"mesh-license-403":             {"mesh", "secrets", "get", harness.Fault403, true},
	"mesh-license-500":             {"mesh", "secrets", "get", harness.Fault500, true},
	"mesh-peerauthentications-500": {"mesh", "peerauthentications", "list", harness.Fault500, false},
	"mesh-pods-timeout":            {"mesh", "pods", "list", harness.FaultTimeout, false},
	"mesh-namespaces-patch-429":    {"mesh", "namespaces", "patch", harness.Fault429, false},
	"fleet-namespaces-patch-403":   {"fleet", "namespaces", "patch", harness.Fault403, false},
	"fleet-networkpolicies-500":    {"fleet", "networkpolicies", "", harness.Fault500, false},
	"fleet-statefulsets-timeout":   {"fleet", "statefulsets", "", harness.FaultTimeout, false},
}

// faultArgs are env.fault's arguments: every fault, and clear.
func faultArgs() []string {
	var out []string
	for name := range faults {
		out = append(out, name)
	}
	sort.Strings(out)
	return append(out, "clear")
}

const (
	// faultSpan: how long a fault lasts unless env.fault clear ends it
	// first: longer than statusBound, so a fault that bites is judged.
	faultSpan = 30 * time.Second
	// timeoutSpan: how long a timeout fault lasts. A hung request fails
	// only after harness.DefaultHang, so in faultSpan an operator fails at
	// most one step (the action comes a pause after the fault, the retry's
	// request is still hanging when the fault ends): statusBound would
	// have nothing to judge. Two hangs, the pause and the retries fit in
	// this, with room for a pass that starts late.
	timeoutSpan = 2*harness.DefaultHang + 15*time.Second
	// faultGrace: after a fault ends (or the API server is back), how long
	// the operator may still act on what the failure left it with: it
	// retries a failed pass after 1 s doubling up to 30 s, and the mesh
	// operator reads an unreadable license again every 10 s, so its next
	// pass may come 30 s after the fault, plus a few seconds. The hold
	// lasts so much longer (nothing released; a relaxation it owes may
	// wait, frozenEdge).
	faultGrace = 35 * time.Second
	// statusBound: a fault that keeps failing an operator's steps for
	// longer than this must show in the status of what the operator
	// reconciles within this much of the first failed step: the poll
	// interval (fleets are read every 10 s, --state-interval; the mesh
	// operator reads an unreadable license every 10 s) plus 2 s. The
	// operators write status in the pass that failed and retry after 1 s,
	// doubling up to 30 s (docs/troubleshooting.md, ReconcileError), so a
	// fault over its whole span fails steps over more than this.
	statusBound = 12 * time.Second
)

// faultRecord is one fault as it was played: the proxy's count of the
// requests it failed (harness.FaultStats) and when it was set and ended.
type faultRecord struct {
	name     string
	spec     faultSpec
	from     time.Time
	until    time.Time
	stats    harness.FaultStats
	timer    *time.Timer
	operator string
}

// why is the hold's name for the fault.
func (f faultRecord) why() string {
	verb := f.spec.verb
	if verb == "" {
		verb = "every request on"
	}
	return fmt.Sprintf("the API server answers the %s operator's %s %s with %s (env.fault %s)", f.spec.operator, verb, f.spec.resource, f.spec.fault, f.name)
}

// apiServerRestart is the hold's name for env.apiserver restart.
const apiServerRestart = "the API server restarts (env.apiserver restart)"

func (r *Runner) proxy(operator string) (*harness.FaultProxy, error) {
	p := r.Bed.Proxies[operator+"-operator"]
	if p == nil {
		return nil, fmt.Errorf("the bed runs no fault proxy for the %s operator (BedOptions.FaultProxies)", operator)
	}
	return p, nil
}

// setFault plays env.fault: name sets that fault for its span, clear ends
// every fault now.
func (r *Runner) setFault(name string) error {
	if name == "clear" {
		r.endFaults()
		return nil
	}
	spec, ok := faults[name]
	if !ok {
		return fmt.Errorf("unknown fault %q", name)
	}
	p, err := r.proxy(spec.operator)
	if err != nil {
		return err
	}
	rule := harness.FaultRule{Resource: spec.resource, Verb: spec.verb, Fault: spec.fault}
	if spec.license {
		rule.Namespace = harness.MeshNamespace
	}
	r.env.mu.Lock()
	if r.env.activeFaults == nil {
		r.env.activeFaults = map[string]*faultRecord{}
	}
	if old := r.env.activeFaults[name]; old != nil {
		r.env.mu.Unlock()
		return nil // already failing: the span set first stands
	}
	rec := &faultRecord{name: name, spec: spec, from: time.Now(), operator: spec.operator}
	r.env.activeFaults[name] = rec
	rec.timer = time.AfterFunc(spec.span(), func() { r.endFault(name) })
	r.env.mu.Unlock()
	p.Set(rule)
	r.env.openHold(rec.why())
	r.env.expiresIn(spec.span() + faultGrace)
	return nil
}

// endFault takes the fault's rule off its proxy, keeps what it did, and
// ends its hold faultGrace later.
func (r *Runner) endFault(name string) {
	r.env.mu.Lock()
	rec := r.env.activeFaults[name]
	delete(r.env.activeFaults, name)
	r.env.mu.Unlock()
	if rec == nil {
		return
	}
	rec.timer.Stop()
	if p, err := r.proxy(rec.spec.operator); err == nil {
		rule := harness.FaultRule{Resource: rec.spec.resource, Verb: rec.spec.verb, Fault: rec.spec.fault}
		rec.stats, _ = p.Remove(rule.String())
	}
	rec.until = time.Now()
	r.env.mu.Lock()
	r.env.playedFaults = append(r.env.playedFaults, *rec)
	r.env.mu.Unlock()
	r.env.closeHold(rec.why(), faultGrace)
}

// endFaults ends every fault set.
func (r *Runner) endFaults() {
	r.env.mu.Lock()
	var names []string
	for n := range r.env.activeFaults {
		names = append(names, n)
	}
	r.env.mu.Unlock()
	for _, n := range names {
		r.endFault(n)
	}
}

// logFaults says what each played fault did, so a run shows which bit.
func logFaults(w io.Writer, played []faultRecord) {
	for _, f := range played {
		fmt.Fprintf(w, "explore: env.fault %s (%s to %s): %d requests failed, %d of them steps", f.name,
			f.from.Format("15:04:05"), f.until.Format("15:04:05"), f.stats.Requests, f.stats.Steps)
		if f.stats.Steps > 0 {
			fmt.Fprintf(w, " from %s to %s", f.stats.StepFirst.Format("15:04:05.000"), f.stats.StepLast.Format("15:04:05.000"))
		}
		fmt.Fprintln(w)
	}
}

// takeFaults returns the faults played since the last call and forgets them.
func (e *environment) takeFaults() []faultRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.playedFaults
	e.playedFaults = nil
	return out
}

// restartAPIServer plays env.apiserver restart: kube-apiserver stops and
// starts again on the same address with the same etcd. An operator that
// lost its leader lease meanwhile exits (controller-runtime does); the bed
// starts it again as the kubelet would restart its container.
func (r *Runner) restartAPIServer(ctx context.Context) error {
	r.env.openHold(apiServerRestart)
	start := time.Now()
	if err := r.Bed.RestartAPIServer(ctx); err != nil {
		return err
	}
	fmt.Fprintf(r.Log, "explore: kube-apiserver restarted in %s\n", time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	for _, p := range []*harness.Process{r.Bed.Fleet, r.Bed.Mesh} {
		if !p.Running() {
			fmt.Fprintf(r.Log, "explore: %s exited while the API server was down (its lease could not be renewed); starting it again\n", p.Name)
			if err := p.Start(); err != nil {
				return err
			}
		}
	}
	r.env.closeHold(apiServerRestart, faultGrace)
	return nil
}

// noteHandEdit: the explorer deleted a fleet's NetworkPolicy itself now
// (env.handedit), which fleetPolicyDeleted does not blame on the operator.
func (e *environment) noteHandEdit() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.handEdits = append(e.handEdits, time.Now())
}

func (e *environment) takeHandEdits() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.handEdits
	e.handEdits = nil
	return out
}

// handEditSlack: how long after env.handedit the deletion it made may be
// seen.
const handEditSlack = 3 * time.Second

// fleetPolicyDeleted: what a fleet operator released from before to now
// while a hold lasts: a fleet that exists and is not being deleted lost
// its NetworkPolicy (the one named after it), and the explorer did not
// delete it by hand just before.
func fleetPolicyDeleted(w world, before, now *snapshot, handEdits []time.Time) []string {
	for _, t := range handEdits {
		if !now.at.Before(t) && now.at.Sub(t) <= handEditSlack {
			return nil
		}
	}
	var out []string
	for _, f := range now.fleets(w.app) {
		if f.DeletionTimestamp != nil || before.objs[gvrFleets][w.app+"/"+f.Name] == nil {
			continue
		}
		k := w.app + "/" + f.Name
		if before.objs[gvrNetpols][k] != nil && now.objs[gvrNetpols][k] == nil {
			out = append(out, fmt.Sprintf("fleet %s's NetworkPolicy %s was deleted", f.Name, k))
		}
	}
	return out
}

// reportsFailure: the object's status says a step fails. Accepted: a
// Ready condition that is not True, a Reconciled condition that is False,
// a failure condition (a type ending in Failed, such as the ServiceMesh's
// EnrollmentFailed, which leaves Ready to the control plane) that is True,
// or kstatus' Stalled or Reconciling True, each with a reason
// docs/troubleshooting.md explains (documented) and a message. The judge
// does not read the message for the fault itself: a fleet or mesh that
// is not Ready for another documented reason meanwhile passes.
func reportsFailure(u *unstructured.Unstructured, documented func(string) bool) string {
	if u == nil {
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		msg, _ := m["message"].(string)
		failing := (typ == "Ready" && status != string(metav1.ConditionTrue)) ||
			(typ == "Reconciled" && status == string(metav1.ConditionFalse)) ||
			(strings.HasSuffix(typ, "Failed") && status == string(metav1.ConditionTrue)) ||
			((typ == "Stalled" || typ == "Reconciling") && status == string(metav1.ConditionTrue))
		if failing && msg != "" && documented != nil && documented(reason) {
			return fmt.Sprintf("%s=%s (%s)", typ, status, reason)
		}
	}
	return ""
}

// faultWatch is what the judge follows of one played fault.
type faultWatch struct {
	faultRecord
	// prev: the state in force before the fault's first failed step said
	// so already (prevHow: how); reported: when the status first said so
	// from the first failed step on (zero: never).
	prev         bool
	prevHow, how string
	reported     time.Time
}

// judged: the fault kept the operator's steps failing for longer than
// statusBound.
func (f *faultWatch) judged() bool {
	return f.stats.Steps > 1 && f.stats.StepLast.Sub(f.stats.StepFirst) > statusBound
}

// affected are the objects the fault's operator reconciles: the
// ServiceMesh, or the fleets of the app namespace that are not being
// deleted (one of them reporting suffices: the proxy does not say whose
// pass a request was).
func affected(w world, s *snapshot, operator string) []*unstructured.Unstructured {
	if operator == "mesh" {
		if u := s.objs[gvrMeshes]["/cluster"]; u != nil && u.GetDeletionTimestamp() == nil {
			return []*unstructured.Unstructured{u}
		}
		return nil
	}
	var out []*unstructured.Unstructured
	for k, u := range s.objs[gvrFleets] {
		if strings.HasPrefix(k, w.app+"/") && u.GetDeletionTimestamp() == nil {
			out = append(out, u)
		}
	}
	return out
}

// checkFaultStatus follows, at each state, whether the objects a fault
// affects say that a step fails (reportsFailure), within the window from
// the fault's first failed step to statusBound after it.
func (j *judgement) checkFaultStatus(s *snapshot) {
	for i := range j.faults {
		f := &j.faults[i]
		if f.stats.Steps == 0 || !f.reported.IsZero() {
			continue
		}
		how := ""
		for _, u := range affected(j.w, s, f.operator) {
			if how = reportsFailure(u, j.documented); how != "" {
				how = u.GetName() + " " + how
				break
			}
		}
		switch {
		case s.at.Before(f.stats.StepFirst):
			f.prev, f.prevHow = how != "", how
		case f.prev:
			f.reported, f.how = f.stats.StepFirst, f.prevHow+", already before the first failed step"
		case how != "":
			f.reported, f.how = s.at, how
		}
	}
}

// faultStatusVerdicts: every fault that kept steps failing for longer than
// statusBound was reported within statusBound of its first failed step.
func (j *judgement) faultStatusVerdicts() []string {
	var out []string
	for _, f := range j.faults {
		if !f.judged() {
			continue
		}
		if f.reported.IsZero() && f.prev {
			f.reported, f.how = f.stats.StepFirst, f.prevHow+", already before the first failed step"
		}
		what := "the ServiceMesh never"
		if f.operator == "fleet" {
			what = "no fleet of " + j.w.app + " ever"
		}
		switch {
		case f.reported.IsZero():
			out = append(out, fmt.Sprintf("env.fault %s failed %d steps of the %s operator from %s to %s, but %s said so in its status (Ready not True, Reconciled False, Stalled or Reconciling True, with a documented reason)",
				f.name, f.stats.Steps, f.operator, f.stats.StepFirst.Format("15:04:05.000"), f.stats.StepLast.Format("15:04:05.000"), what))
		case f.reported.Sub(f.stats.StepFirst) > statusBound:
			out = append(out, fmt.Sprintf("env.fault %s failed steps of the %s operator from %s on, but its status said so only %s later (%s), beyond %s",
				f.name, f.operator, f.stats.StepFirst.Format("15:04:05.000"), f.reported.Sub(f.stats.StepFirst).Round(time.Second), f.how, statusBound))
		}
	}
	return out
}

// documentedReasons reads docs/troubleshooting.md: a reason is documented
// when it appears there in backticks.
func documentedReasons(root string) func(string) bool {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		return func(string) bool { return false }
	}
	return func(reason string) bool { return reason != "" && strings.Contains(string(doc), "`"+reason+"`") }
}

// freezesMesh: the hold keeps the mesh operator from changing anything
// (its license cannot be known, one of its requests fails, or the API
// server restarts): it neither releases nor relaxes meanwhile.
func (h hold) freezesMesh() bool {
	switch h.why {
	case licenseUnreadable, licenseDeleted, licenseRenewing, apiServerRestart:
		return true
	}
	return strings.Contains(h.why, "the mesh operator's")
}

// frozenEdge: a required connection from another namespace (the routing
// source's edge) into a STRICT namespace that has not accepted that edge
// (labels.MeshStrictEdges on its mesh-mtls) may be refused while a hold
// freezes the mesh operator: accepting a newly declared plaintext edge
// relaxes the namespace, which it does not do while it cannot read its
// license (docs/troubleshooting.md, LicenseUnreadable: "nothing is changed
// in the cluster until it can be read") or while its requests fail. Once
// the hold is over the connection is judged again (LOST if it stays
// refused), and at rest as always.
func (j *judgement) frozenEdge(s *snapshot, src caller, dst *corev1.Pod) bool {
	if src.namespace == dst.Namespace {
		return false
	}
	frozen := false
	for _, h := range j.holds {
		frozen = frozen || (h.covers(s.at) && h.freezesMesh())
	}
	pa := namespaceStrict(s, dst.Namespace)
	if !frozen || pa == nil {
		return false
	}
	return !slices.Contains(strings.Split(pa.GetAnnotations()[labels.MeshStrictEdges], ","), src.namespace)
}
