// Package enroll holds the pure builders of namespace enrollment: which
// namespaces are enrolled, the data-plane labels, the namespace-wide
// PeerAuthentication, the isolation AuthorizationPolicy, the STRICT cutover
// signal and the mTLS mode in force. The ServiceMesh reconciler applies what
// they build; nothing here talks to the API server.
package enroll

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/netpol"
	"github.com/ericdev/fleetmesh/shared/podmesh"
	"github.com/ericdev/fleetmesh/shared/policy"
)

// Names and kinds of the per-namespace policies.
const (
	PeerAuthenticationName = "mesh-mtls"
	IsolationPolicyName    = "mesh-isolation"
	// BaselinePolicyName is isolation strict's namespace-wide allow-nothing
	// AuthorizationPolicy.
	BaselinePolicyName      = "mesh-baseline"
	KindPeerAuthentication  = policy.KindPeerAuthentication
	KindAuthorizationPolicy = policy.KindAuthorizationPolicy
	// ManagedBy is the app.kubernetes.io/managed-by value on the policies.
	ManagedBy = "mesh-operator"
	// ProxyContainer is the name of Istio's sidecar container.
	ProxyContainer = podmesh.ProxyContainer
)

// SecurityGroupVersion is the Istio security API the policies use.
var SecurityGroupVersion = policy.IstioSecurity

// SystemNamespaces are never enrolled.
var SystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// Decision says whether a namespace is enrolled and why.
type Decision struct {
	Enroll bool
	// WriteRequest: the operator itself writes core.navique.com/mesh=enabled
	// (the namespace is in spec.enrollNamespaces and nothing forbids it).
	WriteRequest bool
	Reason       string
	// OptedOut is the admin's label that keeps the namespace out
	// ("core.navique.com/mesh=disabled", "istio-injection=disabled",
	// "istio.io/dataplane-mode=none"); "" when none does.
	OptedOut string
	// Asked: the namespace is asked for (labelled for enrollment by
	// someone, or listed in spec.enrollNamespaces) although it is opted
	// out, which the ServiceMesh reports.
	Asked bool
}

// Decide enrolls a namespace that asks for it by label or is listed in
// spec.enrollNamespaces. An admin's opt-out wins over both:
// core.navique.com/mesh=disabled, or Istio's own opt-out labels
// (contract.IstioOptOut: istio-injection=disabled,
// istio.io/dataplane-mode=none), which the operator never writes and so
// never replaces. Protected namespaces (system, control plane, the
// operators') are never enrolled.
func Decide(name string, nsLabels map[string]string, listed bool, protected []string) Decision {
	if slices.Contains(protected, name) {
		return Decision{Reason: "protected"}
	}
	if nsLabels[labels.Mesh] == labels.MeshDisabled {
		return Decision{Reason: "disabled", OptedOut: labels.Mesh + "=" + labels.MeshDisabled, Asked: listed}
	}
	if o := contract.IstioOptOut(nsLabels); o != "" {
		return Decision{Reason: "opted out by " + o, OptedOut: o, Asked: listed || nsLabels[labels.Mesh] == labels.MeshEnabled}
	}
	switch nsLabels[labels.Mesh] {
	case labels.MeshEnabled:
		return Decision{Enroll: true, WriteRequest: listed, Reason: "label"}
	}
	if listed {
		return Decision{Enroll: true, WriteRequest: true, Reason: "enrollNamespaces"}
	}
	return Decision{Reason: "not requested"}
}

// Protected lists the namespaces that are never enrolled: the system ones,
// the control plane's, and the operators' own. Empty names are dropped.
func Protected(extra ...string) []string {
	out := slices.Clone(SystemNamespaces)
	for _, n := range extra {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// DataPlaneLabels are the Istio labels that put a namespace's workloads in
// the mesh: ambient capture by ztunnel, or sidecar injection by the default
// revision (istio-injection) or a named one (istio.io/rev).
func DataPlaneLabels(dp v1alpha1.DataPlane, revision string) map[string]string {
	if dp == v1alpha1.DataPlaneAmbient {
		return map[string]string{labels.IstioDataPlaneMode: "ambient"}
	}
	if revision == "" || revision == "default" {
		return map[string]string{labels.IstioInjection: "enabled"}
	}
	return map[string]string{labels.IstioRevision: revision}
}

// WorkloadsReady is the STRICT cutover signal: every Pod of the namespace
// that has not finished can already speak mTLS in data plane dp, as
// shared/podmesh judges it (the fleet operator judges its members with the
// same function): a Pod running Istio's proxy (native sidecar or regular
// container) in either data plane, or, in ambient, a Pod istio-cni marked
// redirected to ztunnel. A namespace without Pods is ready. The second
// result names the first Pod that is not, for status and events.
func WorkloadsReady(dp v1alpha1.DataPlane, pods []corev1.Pod) (bool, string) {
	blocker := ""
	for i := range pods {
		blocker = firstBlocker(dp, &pods[i], blocker)
	}
	return blocker == "", blocker
}

// firstBlocker is the Pod that holds a namespace's cutover back once p is
// seen too, given the one that held it before p (""): the first by name of
// its running Pods that cannot speak mTLS in data plane dp. It does not
// depend on the order the Pods are seen in.
func firstBlocker(dp v1alpha1.DataPlane, p *corev1.Pod, before string) string {
	if !podmesh.Running(p) || podmesh.MeshedIn(podmesh.DataPlane(dp), p) {
		return before
	}
	if before == "" || p.Name < before {
		return p.Name
	}
	return before
}

// Blockers is WorkloadsReady for many namespaces at once, over Pods seen
// one at a time in any order (a cluster-wide list, page by page), keeping
// only the verdicts: namespace → the Pod that holds its cutover back ("":
// none). Only the namespaces it was made for are kept.
type Blockers map[string]string

// NewBlockers starts every namespace of names ready (no Pod seen).
func NewBlockers(names []string) Blockers {
	b := make(Blockers, len(names))
	for _, n := range names {
		b[n] = ""
	}
	return b
}

// Add takes one Pod into its namespace's verdict.
func (b Blockers) Add(dp v1alpha1.DataPlane, p *corev1.Pod) {
	if before, ok := b[p.Namespace]; ok {
		b[p.Namespace] = firstBlocker(dp, p, before)
	}
}

// MTLSDecision is the namespace-wide mode in force and why.
type MTLSDecision struct {
	// Mode is contract.MTLSStrict or contract.MTLSPermissive.
	Mode string
	// Reason says why (one of the MTLS* reasons).
	Reason MTLSReason
}

// MTLSReason says why a namespace has the mTLS mode it has. It is not a
// condition reason itself: StrictIsolation's BaselineWithheld message lists
// it per namespace (docs/troubleshooting.md explains each value there); the
// three that hold a cutover back are also the reasons of MTLSCutover and
// DataPlaneMigration, hence their values come from the API.
type MTLSReason string

const (
	MTLSStrict          MTLSReason = "Strict"
	MTLSConfigured      MTLSReason = "Configured" // spec.mtls.mode permissive
	MTLSMaintenance     MTLSReason = "Maintenance"
	MTLSMigrating                  = MTLSReason(v1alpha1.ReasonMigrating)
	MTLSAwaitingCutover            = MTLSReason(v1alpha1.ReasonAwaitingCutover)
	MTLSAwaitingEdge               = MTLSReason(v1alpha1.ReasonAwaitingEdge)
	MTLSAwaitingReady   MTLSReason = "AwaitingReady"
	// MTLSPaused: a paused mesh-mtls policy, not the decision, is in force.
	MTLSPaused MTLSReason = "Paused"
	// MTLSForeign: someone else's namespace-wide PeerAuthentication, not
	// the operator's mesh-mtls, is in force (ForeignPeerAuthentication).
	MTLSForeign = MTLSReason(v1alpha1.ReasonForeignPeerAuthentication)
)

// Window reports whether the maintenance window holds PERMISSIVE at now,
// and for how long still.
func Window(m v1alpha1.MTLS, now time.Time) (bool, time.Duration) {
	if m.MaintenanceUntil == nil || !now.Before(m.MaintenanceUntil.Time) {
		return false, 0
	}
	return true, m.MaintenanceUntil.Sub(now)
}

// MTLSMode decides the mode: STRICT is the resting state of a namespace once
// its workloads have cut over (cutOver), unless spec.mtls.mode is
// permissive or a maintenance window is open.
func MTLSMode(m v1alpha1.MTLS, now time.Time, cutOver bool) MTLSDecision {
	return DecideMTLS(MTLSInputs{Spec: m, Now: now, Ready: true, CutOver: cutOver})
}

// MTLSInputs is everything the mode of one enrolled namespace depends on.
type MTLSInputs struct {
	Spec v1alpha1.MTLS
	Now  time.Time
	// Ready: the control plane is Ready at the ServiceMesh's generation.
	// Without it the mode may only relax (the safe direction): a namespace
	// is never made STRICT where it is not already.
	Ready bool
	// Live is the mode of the live PeerAuthentication (a contract value;
	// "" when there is none).
	Live string
	// CutOver: the namespace's own workloads met the cutover signal.
	CutOver bool
	// EdgeHolds: a declared edge namespace not yet accepted still has a
	// Pod that would call in plaintext (see EdgeHolder).
	EdgeHolds bool
	// Migrating: the data plane the namespace was configured for is not
	// the ServiceMesh's dataPlane any more. Its workloads must be meshed
	// the new way before STRICT returns, so it goes PERMISSIVE first
	// (relaxing: allowed even while the control plane is not Ready).
	Migrating bool
}

// DecideMTLS decides the mode in force. Relaxing wins: the escape hatch
// (mtls.mode permissive) and a maintenance window are honoured whatever
// state the control plane is in; only the way back to STRICT waits for it
// to be Ready.
func DecideMTLS(in MTLSInputs) MTLSDecision {
	switch open, _ := Window(in.Spec, in.Now); {
	case in.Spec.Mode == v1alpha1.MTLSPermissive:
		return MTLSDecision{contract.MTLSPermissive, MTLSConfigured}
	case open:
		return MTLSDecision{contract.MTLSPermissive, MTLSMaintenance}
	case in.Migrating:
		return MTLSDecision{contract.MTLSPermissive, MTLSMigrating}
	case !in.CutOver:
		return MTLSDecision{contract.MTLSPermissive, MTLSAwaitingCutover}
	case in.EdgeHolds:
		return MTLSDecision{contract.MTLSPermissive, MTLSAwaitingEdge}
	case !in.Ready && in.Live != contract.MTLSStrict:
		return MTLSDecision{contract.MTLSPermissive, MTLSAwaitingReady}
	}
	return MTLSDecision{contract.MTLSStrict, MTLSStrict}
}

// NewEdges are the declared edges (sorted) that were not accepted when the
// namespace last went STRICT: only those may hold STRICT back.
func NewEdges(declared, accepted []string) []string {
	var out []string
	for _, e := range declared {
		if !slices.Contains(accepted, e) {
			out = append(out, e)
		}
	}
	sort.Strings(out)
	return out
}

// WithoutLeaving drops from the accepted edges those namespaces that are
// leaving the mesh, and names the first declared edge that is leaving ("" if
// none): STRICT holds only over edges whose Pods stay meshed, and an edge
// released from the mesh goes back to plaintext.
func WithoutLeaving(accepted, declared, leaving []string) ([]string, string) {
	var kept []string
	for _, e := range accepted {
		if !slices.Contains(leaving, e) {
			kept = append(kept, e)
		}
	}
	first := ""
	for _, e := range declared {
		if slices.Contains(leaving, e) && (first == "" || e < first) {
			first = e
		}
	}
	return kept, first
}

// EdgeHolder is the first of the given edge namespaces that still has a
// running Pod not meshed in data plane dp (podmesh's judgement, as for the
// namespace's own Pods), and that Pod; "" when every edge is meshed.
// STRICT would reject such a Pod's plaintext calls, which the edge was
// declared for, so the cutover waits for it. pods holds each edge's Pods.
//
// redirecting says which edge namespaces carry the ambient data-plane
// label. In any other, a Pod still marked redirected without asking for
// ambient itself (its own istio.io/dataplane-mode=ambient) is about to be
// released by istio-cni, its namespace having just left the mesh: it
// counts as plaintext.
func EdgeHolder(dp v1alpha1.DataPlane, edges []string, pods map[string][]corev1.Pod, redirecting map[string]bool) (string, string) {
	for _, e := range edges {
		judged := pods[e]
		if !redirecting[e] {
			judged = make([]corev1.Pod, 0, len(pods[e]))
			for _, p := range pods[e] {
				if p.Labels[labels.IstioDataPlaneMode] != "ambient" && p.Annotations[labels.IstioAmbientRedirection] != "" {
					p = *p.DeepCopy()
					delete(p.Annotations, labels.IstioAmbientRedirection)
				}
				judged = append(judged, p)
			}
		}
		if ok, who := WorkloadsReady(dp, judged); !ok {
			return e, who
		}
	}
	return "", ""
}

// AppliedDataPlane is the data plane the operator last configured the
// namespace for: its mesh-dataplane state label, when the operator holds it
// (owned: the label keys its field manager applies). "" when none.
func AppliedDataPlane(nsLabels map[string]string, owned map[string]bool) v1alpha1.DataPlane {
	if !owned[labels.MeshDataPlane] {
		return ""
	}
	switch dp := v1alpha1.DataPlane(nsLabels[labels.MeshDataPlane]); dp {
	case v1alpha1.DataPlaneAmbient, v1alpha1.DataPlaneSidecar:
		return dp
	}
	return ""
}

// AcceptedEdges are the edges accepted when the namespace last went STRICT,
// as recorded on its live PeerAuthentication. A PeerAuthentication cut over
// by a release that did not record edges yet (strict-ready set, no
// strict-edges annotation at all) went STRICT with every edge then
// declared: the edges declared now are taken as accepted, so upgrading the
// operator never relaxes a STRICT namespace (the record is written with the
// next apply).
func AcceptedEdges(pa *unstructured.Unstructured, declared []string) []string {
	if pa == nil {
		return nil
	}
	ann := pa.GetAnnotations()
	v, recorded := ann[labels.MeshStrictEdges]
	switch {
	case !recorded && ann[labels.MeshStrictReady] != "":
		return slices.Clone(declared)
	case v == "":
		return nil
	}
	return strings.Split(v, ",")
}

// Owner is the controller reference every policy carries: the
// cluster-scoped ServiceMesh (a namespaced object may have a cluster-scoped
// owner), so deleting the ServiceMesh garbage-collects them.
func Owner(mesh *v1alpha1.ServiceMesh) metav1.OwnerReference {
	return *metav1.NewControllerRef(mesh, v1alpha1.GroupVersion.WithKind("ServiceMesh"))
}

func object(namespace, name string, owner metav1.OwnerReference) policy.Object {
	return policy.Object{Namespace: namespace, Name: name, Owner: owner,
		Labels: map[string]string{labels.ManagedBy: ManagedBy, labels.PartOf: "servicemesh"}}
}

// PeerAuthentication is the namespace-wide mTLS policy (no selector).
// strictReady, when set, is recorded in the labels.MeshStrictReady
// annotation: the time the namespace first met the cutover signal.
// Once strictReady is set, acceptedEdges are recorded in
// labels.MeshStrictEdges, empty when there are none: its absence marks a
// PeerAuthentication of a release that did not record them (AcceptedEdges).
func PeerAuthentication(namespace, mode, strictReady string, owner metav1.OwnerReference, acceptedEdges ...string) *unstructured.Unstructured {
	istioMode := policy.Permissive
	if mode == contract.MTLSStrict {
		istioMode = policy.Strict
	}
	u := policy.PeerAuthentication(object(namespace, PeerAuthenticationName, owner), nil, istioMode, nil)
	ann := map[string]string{}
	if strictReady != "" {
		ann[labels.MeshStrictReady] = strictReady
	}
	if strictReady != "" || len(acceptedEdges) > 0 {
		ann[labels.MeshStrictEdges] = strings.Join(acceptedEdges, ",")
	}
	if len(ann) > 0 {
		u.SetAnnotations(ann)
	}
	return u
}

// ModeOf reads the mode of a live PeerAuthentication as a contract value.
func ModeOf(pa *unstructured.Unstructured) string {
	m, _, _ := unstructured.NestedString(pa.Object, "spec", "mtls", "mode")
	if m == policy.Strict {
		return contract.MTLSStrict
	}
	return contract.MTLSPermissive
}

// NamespaceWide reports whether a PeerAuthentication applies to its whole
// namespace: it selects no workload (no selector, or one without labels).
func NamespaceWide(pa *unstructured.Unstructured) bool {
	matchLabels, _, _ := unstructured.NestedStringMap(pa.Object, "spec", "selector", "matchLabels")
	return len(matchLabels) == 0
}

// ForeignPeerAuthentication is the PeerAuthentication of someone else that
// Istio applies to the whole namespace instead of ours, or nil when ours
// (the operator's mesh-mtls, nil before it exists) is the one in force or
// there is no other. Of several namespace-wide PeerAuthentications Istio
// applies only the oldest, by creation time and then by name (creation
// times have whole seconds, so ties are common); others are the
// namespace's PeerAuthentications the operator does not own.
func ForeignPeerAuthentication(ours *unstructured.Unstructured, others []*unstructured.Unstructured) *unstructured.Unstructured {
	var inForce *unstructured.Unstructured
	for _, pa := range append(slices.Clone(others), ours) {
		if pa == nil || !NamespaceWide(pa) {
			continue
		}
		if inForce == nil || olderThan(pa, inForce) {
			inForce = pa
		}
	}
	if inForce == ours {
		return nil
	}
	return inForce
}

func olderThan(a, b *unstructured.Unstructured) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

// AllowedSources are the namespaces namespace isolation admits
// authenticated traffic from: the namespace itself, the control plane's,
// and the declared edges. Sorted and without duplicates.
func AllowedSources(namespace string, controlPlane []string, edges []string) []string {
	set := map[string]bool{namespace: true}
	for _, n := range append(slices.Clone(controlPlane), edges...) {
		if n != "" {
			set[n] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// IsolationPolicy is the namespace isolation AuthorizationPolicy, or nil for
// isolation off. It is a DENY for authenticated sources (principals ["*"]
// matches only mTLS peers) outside the allowed namespaces: plaintext is
// never matched (that is the PeerAuthentication's business), and no ALLOW is
// added, so a workload's own ALLOW policies stay exactly as narrow as they
// are. Only L4 attributes are used, which ztunnel enforces without
// waypoints. Isolation strict uses the same DENY and adds BaselinePolicy.
func IsolationPolicy(namespace string, isolation v1alpha1.Isolation, allowed []string, owner metav1.OwnerReference) *unstructured.Unstructured {
	if isolation == v1alpha1.IsolationOff {
		return nil
	}
	return policy.AuthorizationPolicy(object(namespace, IsolationPolicyName, owner), nil, policy.Deny,
		policy.Rule{From: []policy.Source{{Principals: []string{"*"}, NotNamespaces: allowed}}})
}

// BaselinePolicy is isolation strict's namespace-wide "allow-nothing"
// AuthorizationPolicy (action ALLOW without rules), or nil. Because an ALLOW
// policy now selects every workload of the namespace, a request is admitted
// only when some ALLOW policy of the workload's own matches it: per-service
// least privilege at L4. Declared edges are deliberately not turned into a
// namespace-wide ALLOW rule here, which would widen every workload's own
// ALLOW; they only let a cross-namespace source past the isolation DENY, so
// the workload's own ALLOW still has to admit it.
//
// An ALLOW that matches nothing also drops plaintext, so the baseline exists
// only while the namespace's mTLS mode in force (mtlsInForce, a contract
// value) is STRICT: while PERMISSIVE (awaiting the cutover, a maintenance
// window, mtls.mode permissive) un-meshed clients keep working.
func BaselinePolicy(namespace string, isolation v1alpha1.Isolation, mtlsInForce string, owner metav1.OwnerReference) *unstructured.Unstructured {
	if isolation != v1alpha1.IsolationStrict || mtlsInForce != contract.MTLSStrict {
		return nil
	}
	return policy.AuthorizationPolicy(object(namespace, BaselinePolicyName, owner), nil, policy.Allow)
}

// PolicyInputs is everything one namespace's policies depend on.
type PolicyInputs struct {
	Namespace string
	Isolation v1alpha1.Isolation
	// Mode is the mTLS mode in force (a contract value).
	Mode string
	// StrictReady, AcceptedEdges: the cutover record on the
	// PeerAuthentication (see PeerAuthentication).
	StrictReady   string
	AcceptedEdges []string
	// MigratingFrom: the data plane a namespace is leaving ("" when none),
	// recorded on the PeerAuthentication until STRICT returns.
	MigratingFrom string
	// Allowed: the sources isolation admits (AllowedSources).
	Allowed []string
	Owner   metav1.OwnerReference
}

// Policies is one namespace's policy set; Isolation and Baseline are nil
// where they must not exist.
type Policies struct {
	PeerAuthentication *unstructured.Unstructured
	Isolation          *unstructured.Unstructured
	Baseline           *unstructured.Unstructured
}

// All lists the set in the order it is applied: PeerAuthentication, then
// the isolation DENY and the strict baseline when they exist.
func (p Policies) All() []*unstructured.Unstructured {
	out := []*unstructured.Unstructured{p.PeerAuthentication}
	for _, u := range []*unstructured.Unstructured{p.Isolation, p.Baseline} {
		if u != nil {
			out = append(out, u)
		}
	}
	return out
}

// PolicySet is the whole per-namespace policy set for a mode in force. The
// controller applies what it returns, and the truth tables and golden
// files judge the same function.
func PolicySet(in PolicyInputs) Policies {
	pa := PeerAuthentication(in.Namespace, in.Mode, in.StrictReady, in.Owner, in.AcceptedEdges...)
	if in.MigratingFrom != "" {
		ann := pa.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[labels.MeshMigratingFrom] = in.MigratingFrom
		pa.SetAnnotations(ann)
	}
	return Policies{
		PeerAuthentication: pa,
		Isolation:          IsolationPolicy(in.Namespace, in.Isolation, in.Allowed, in.Owner),
		Baseline:           BaselinePolicy(in.Namespace, in.Isolation, in.Mode, in.Owner),
	}
}

// Paused reports whether a managed object carries the reconcile-paused
// annotation (any value but "false").
func Paused(obj metav1.Object) bool {
	v, ok := obj.GetAnnotations()[labels.ReconcilePaused]
	return ok && v != "false"
}

// AmbientGate is what a namespace's NetworkPolicies mean for its ambient
// enrollment.
type AmbientGate struct {
	// Hold: do not enroll the namespace (it is not enrolled yet). An
	// enrolled namespace is never withdrawn for its policies: its Pods are
	// captured already, and releasing them would change their traffic
	// again; it is only reported.
	Hold bool
	// Blocked ("ns: what") and Unreadable ("ns (error)") report the
	// namespace; both are empty when nothing stands in the way.
	Blocked, Unreadable string
}

// GateAmbient decides from a namespace's NetworkPolicies (readErr: they
// could not be read) whether it may be enrolled in ambient now; enrolled
// says it already is. A failed read is not an absence of policies: the
// namespace is held as it is and reported. meshed are the namespaces
// enrolled in the mesh with the labels they carry once enrolled (see
// netpol.Ambient for the rule).
func GateAmbient(ns netpol.Namespace, enrolled bool, policies []networkingv1.NetworkPolicy, readErr error, meshed []netpol.Namespace) AmbientGate {
	if readErr == nil {
		refusals, err := netpol.Ambient(ns, policies, meshed)
		if err != nil {
			readErr = err
		} else if len(refusals) > 0 {
			what := make([]string, 0, len(refusals))
			for _, r := range refusals {
				what = append(what, r.String())
			}
			return AmbientGate{Hold: !enrolled, Blocked: ns.Name + ": " + strings.Join(what, "; ")}
		}
	}
	if readErr != nil {
		return AmbientGate{Hold: !enrolled, Unreadable: fmt.Sprintf("%s (%v)", ns.Name, readErr)}
	}
	return AmbientGate{}
}

// MeshedLabels are a namespace's labels as they stand once it is enrolled
// in data plane dp: a namespaceSelector that admits meshed namespaces
// selects them by these.
func MeshedLabels(nsLabels map[string]string, dp v1alpha1.DataPlane, revision string) map[string]string {
	out := maps.Clone(nsLabels)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, DataPlaneLabels(dp, revision))
	return out
}
