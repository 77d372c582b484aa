package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/detect"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/netpol"
	"github.com/ericdev/fleetmesh/shared/podmesh"
	"github.com/ericdev/fleetmesh/shared/policy"
)

// EnrollFinalizer holds a ServiceMesh that has enrolled namespaces until it
// has stripped its labels from them and deleted its policies.
const EnrollFinalizer = labels.MeshGroup + "/enrollment"

func cutoverSignal(dp v1alpha1.DataPlane) string {
	if dp == v1alpha1.DataPlaneAmbient {
		return "captured by ztunnel (annotation " + labels.IstioAmbientRedirection + "=enabled) or an " + enroll.ProxyContainer + " sidecar"
	}
	return "an " + enroll.ProxyContainer + " sidecar"
}

func baselineWhy(iso v1alpha1.Isolation) string {
	if iso != v1alpha1.IsolationStrict {
		return "isolation is " + string(iso)
	}
	return "an allow-nothing ALLOW would drop plaintext"
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=list;watch
// +kubebuilder:rbac:groups=security.istio.io,resources=peerauthentications;authorizationpolicies,verbs=get;list;create;patch;delete

// meshReady: the ServiceMesh is Ready for its current generation, the only
// state in which namespaces are enrolled or STRICT applied.
func meshReady(mesh *v1alpha1.ServiceMesh, st *status) bool {
	c := meta.FindStatusCondition(st.next.Conditions, string(v1alpha1.ConditionReady))
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == mesh.Generation &&
		st.next.Phase == PhaseReady && st.next.ControlPlane != nil
}

// protectedNamespaces are never enrolled: the system namespaces, the
// control plane's, the Sail Operator's and the operator's own.
func (r *ServiceMeshReconciler) protectedNamespaces(cp *v1alpha1.ControlPlaneStatus) []string {
	extra := []string{r.Config.OperatorNamespace, r.Config.SailNamespace, DefaultSailNamespace,
		sail.IstioNamespace, sail.ZTunnelNamespace, sail.CNINamespace}
	if cp != nil {
		extra = append(extra, cp.Namespace)
	}
	return enroll.Protected(extra...)
}

// ownedLabels are the namespace label keys the operator's field manager
// holds through server-side apply (counted by shared/contract, as the fleet
// operator counts its own).
func ownedLabels(ns metav1.Object) map[string]bool {
	return contract.LabelsAppliedBy(ns, FieldManager)
}

// requestLabels are the namespace's labels as enrollment reads them: an
// enrollment request that only the operator itself holds (it wrote it for
// spec.enrollNamespaces) is not a request of anyone else, so it does not
// keep the namespace enrolled once the name leaves the list.
func requestLabels(ns *corev1.Namespace) map[string]string {
	if ns.Labels[labels.Mesh] != labels.MeshEnabled || !ownedLabels(ns)[labels.Mesh] {
		return ns.Labels
	}
	if contract.LabelsHeldByOthers(ns, FieldManager)[labels.Mesh] {
		return ns.Labels
	}
	out := maps.Clone(ns.Labels)
	delete(out, labels.Mesh)
	return out
}

// enrollingLabels: the operator holds a label on ns that it writes only
// as it enrolls the namespace (not the request, not the announcement).
func enrollingLabels(ns *corev1.Namespace) bool {
	for k := range ownedLabels(ns) {
		if k == labels.Mesh || (k == labels.MeshState && ns.Labels[k] == labels.MeshStateJoining) {
			continue
		}
		return true
	}
	return false
}

// applyNamespaceLabels makes want exactly the set of labels the operator
// applies on ns (server-side apply: keys it stops applying are removed
// unless someone else also holds them). It goes through the contract's one
// writer, contract.ApplyLabels, as the fleet operator does: values outside
// what the contract lets the mesh operator write are refused, an admin's
// core.navique.com/mesh=disabled is never replaced by the enrollment
// request written for spec.enrollNamespaces (even one set between the read
// and the write), and nothing is written when the labels already stand. ns
// becomes the namespace as the apply answered, for the next apply of this
// reconcile.
func (r *ServiceMeshReconciler) applyNamespaceLabels(ctx context.Context, ns *corev1.Namespace, want map[string]string) error {
	_, err := contract.ApplyLabels(ctx, r.Client, r.Reader, contract.MeshOperator, FieldManager, ns, want)
	return err
}

// managedPolicies lists the policies the operator owns, by namespace and
// policyKey, and the namespace-wide PeerAuthentications it does not own, by
// namespace: Istio applies only the oldest namespace-wide one, which may be
// someone else's (enroll.ForeignPeerAuthentication). The PeerAuthentications
// are read with the one list the pass makes of them anyway. A cluster
// without the Istio security API has none.
func (r *ServiceMeshReconciler) managedPolicies(ctx context.Context, mesh *v1alpha1.ServiceMesh) (map[string]map[string]*unstructured.Unstructured, map[string][]*unstructured.Unstructured, error) {
	out := map[string]map[string]*unstructured.Unstructured{}
	foreign := map[string][]*unstructured.Unstructured{}
	for _, kind := range []string{enroll.KindPeerAuthentication, enroll.KindAuthorizationPolicy} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind + "List"))
		var opts []client.ListOption
		if kind != enroll.KindPeerAuthentication {
			opts = append(opts, client.MatchingLabels{labels.ManagedBy: enroll.ManagedBy})
		}
		err := r.Reader.List(ctx, list, opts...)
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("listing %ss: %w", kind, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			if u.GetLabels()[labels.ManagedBy] != enroll.ManagedBy || !metav1.IsControlledBy(u, mesh) {
				if kind == enroll.KindPeerAuthentication && enroll.NamespaceWide(u) {
					foreign[u.GetNamespace()] = append(foreign[u.GetNamespace()], u)
				}
				continue
			}
			if out[u.GetNamespace()] == nil {
				out[u.GetNamespace()] = map[string]*unstructured.Unstructured{}
			}
			out[u.GetNamespace()][enroll.PolicyKey(kind, u.GetName())] = u
		}
	}
	return out, foreign, nil
}

// enrollWorkers is how many namespaces one enrollment pass works on at
// once. Enrolling is a handful of requests per namespace with nothing to
// compute, so a pass over many namespaces is bound by round trips; 8 is
// what the benchmark's floor uses (docs/benchmark.md).
const enrollWorkers = 8

// forEach calls f(0..n-1) on at most workers goroutines and returns when
// all calls have.
func forEach(n, workers int, f func(i int)) {
	var g errgroup.Group
	g.SetLimit(workers)
	for i := range n {
		g.Go(func() error { f(i); return nil })
	}
	_ = g.Wait()
}

// nsOutcome is one namespace's enrollment result and error.
type nsOutcome struct {
	res nsResult
	err error
	// cutover is the second look a namespace whose data-plane label has
	// just gone on still needs (nil: none).
	cutover *cutoverStep
}

// cutoverStep is what the second look at a namespace needs from the
// first: the namespace as its labels were applied, and the first plan.
type cutoverStep struct {
	ns    *corev1.Namespace
	world enroll.Namespace
	first enroll.NamespacePlan
	// workloads answers from a list of the whole pass (cutoverBlockers);
	// nil: the namespace's Pods are listed on their own.
	workloads workloadsCheck
}

// workloadsCheck reads whether a namespace's workloads can take STRICT:
// "" when they can, otherwise the Pod that holds the cutover back.
type workloadsCheck func() (blocker string, err error)

// readWorkloads lists the namespace's Pods for its cutover (podsSinceLabels).
func (r *ServiceMeshReconciler) readWorkloads(ctx context.Context, dp v1alpha1.DataPlane, ns *corev1.Namespace) workloadsCheck {
	return func() (string, error) {
		pods, err := r.podsSinceLabels(ctx, ns)
		if err != nil {
			return "", err
		}
		_, blocker := enroll.WorkloadsReady(dp, pods)
		return blocker, nil
	}
}

// nsResult is what enrolling one namespace came to: the plan's verdict,
// and what taking its steps established.
type nsResult struct {
	enroll.PolicyPlan
	// paused are the paused objects the steps taken held.
	paused []string
	// policies are the namespace's policies of this ServiceMesh as they
	// stand after the steps taken (by policy key), for a second look in
	// the same pass without reading them again.
	policies map[string]*unstructured.Unstructured
}

// observedNamespace is a namespace as the planner reads it.
func observedNamespace(ns *corev1.Namespace, d enroll.Decision, live map[string]*unstructured.Unstructured, foreign []*unstructured.Unstructured) enroll.Namespace {
	return enroll.Namespace{Name: ns.Name, Labels: ns.Labels, Owned: ownedLabels(ns), Paused: enroll.Paused(ns), Decision: d,
		Live: live, Foreign: foreign, Deleting: ns.DeletionTimestamp != nil}
}

// enrollWorld is what a pass over the namespaces observed before any
// Pod is read: the namespaces, the policies, and each one's decision.
type enrollWorld struct {
	cp         *v1alpha1.ControlPlaneStatus
	namespaces []corev1.Namespace
	byName     map[string]*corev1.Namespace
	decisions  map[string]enroll.Decision
	// observed are the namespaces as the planner reads them, in list order.
	observed []enroll.Namespace
	policies map[string]map[string]*unstructured.Unstructured
	foreign  map[string][]*unstructured.Unstructured
	// leaving are the namespaces that leave the mesh in this pass
	// (enroll.Leaves). They are released after the others are reconciled:
	// a namespace that declared one of them as an edge goes PERMISSIVE
	// first, before istio-cni releases the edge's Pods into plaintext
	// (found by the transition explorer).
	leaving []*corev1.Namespace
}

// enrollmentControlPlane is the control plane the enrolled namespaces are
// configured for. In mode external it is not visible; the namespace the
// spec names (Istio's conventional one by default) stands for it.
func enrollmentControlPlane(mesh *v1alpha1.ServiceMesh, st *status) *v1alpha1.ControlPlaneStatus {
	cp := st.next.ControlPlane
	if cp == nil {
		cp = mesh.Status.ControlPlane
	}
	if cp == nil || cp.Namespace == "" {
		c := v1alpha1.ControlPlaneStatus{}
		if cp != nil {
			c = *cp
		}
		c.Namespace = detect.ControlPlaneNamespace(mesh.Spec)
		cp = &c
	}
	return cp
}

// observeEnrollment reads the namespaces and the policies, and decides
// which namespaces are asked for.
func (r *ServiceMeshReconciler) observeEnrollment(ctx context.Context, mesh *v1alpha1.ServiceMesh, st *status) (*enrollWorld, error) {
	w := &enrollWorld{cp: enrollmentControlPlane(mesh, st), byName: map[string]*corev1.Namespace{}, decisions: map[string]enroll.Decision{}}
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	w.namespaces = nsList.Items
	var err error
	if w.policies, w.foreign, err = r.managedPolicies(ctx, mesh); err != nil {
		return nil, err
	}
	protected := r.protectedNamespaces(w.cp)
	w.observed = make([]enroll.Namespace, len(w.namespaces))
	for i := range w.namespaces {
		ns := &w.namespaces[i]
		d := enroll.Decide(ns.Name, requestLabels(ns), slices.Contains(mesh.Spec.EnrollNamespaces, ns.Name), protected)
		w.decisions[ns.Name] = d
		w.observed[i] = observedNamespace(ns, d, w.policies[ns.Name], w.foreign[ns.Name])
		w.byName[ns.Name] = ns
		if enroll.Leaves(w.observed[i]) {
			w.leaving = append(w.leaving, ns)
		}
	}
	return w, nil
}

// reconcileEnrollment enrolls the namespaces asked for and releases the
// others: it reads the world, lets the planner (enroll.Pass) decide, takes
// the planned steps and sets status from what they came to. It enrolls
// only while meshReady; with holdOnly (the mesh is not Ready) it only moves
// towards plaintext, which is always safe: it releases namespaces that are
// no longer wanted (an opt-out wins at any time) and relaxes enrolled ones
// to PERMISSIVE when the break-glass asks for it (a maintenance window,
// mtls.mode permissive), and otherwise leaves them as they are. It returns
// how soon to look again: at the end of a maintenance window, or soon
// while a cutover is pending.
func (r *ServiceMeshReconciler) reconcileEnrollment(ctx context.Context, mesh *v1alpha1.ServiceMesh, st *status, holdOnly bool) (time.Duration, error) {
	if holdOnly && !controllerutil.ContainsFinalizer(mesh, EnrollFinalizer) {
		return 0, nil // nothing was ever enrolled
	}
	w, err := r.observeEnrollment(ctx, mesh, st)
	if err != nil {
		return 0, err
	}
	r.reportOptOuts(mesh, st, w.namespaces, w.decisions)
	var errs []error
	// An admin's Istio opt-out acts in the data plane at once: STRICT goes
	// before anything else of this pass (enroll.RelaxOptedOut).
	for _, ns := range w.leaving {
		steps := enroll.RelaxOptedOut(observedNamespace(ns, enroll.Decision{}, w.policies[ns.Name], nil))
		if _, err := r.takeSteps(ctx, mesh, ns, steps, nil); err != nil {
			errs = append(errs, fmt.Errorf("relaxing namespace %s, opted out: %w", ns.Name, err))
			continue
		}
		for _, s := range steps {
			delete(w.policies[ns.Name], s.Key)
		}
	}
	pass := enroll.Pass{Spec: mesh.Spec, Now: st.now, Ready: !holdOnly, ControlPlane: w.cp.Namespace, Revision: w.cp.Revision,
		Owner: enroll.Owner(mesh), Leaving: make([]string, 0, len(w.leaving))}
	for _, ns := range w.leaving {
		pass.Leaving = append(pass.Leaving, ns.Name)
	}
	// In ambient, a namespace whose NetworkPolicies would cut off its
	// captured Pods is not enrolled (an enrolled one is only reported).
	var gates map[string]enroll.AmbientGate
	if !holdOnly && mesh.Spec.DataPlane == v1alpha1.DataPlaneAmbient {
		var readErr error
		// A failed read holds the namespaces (the gates say so) and fails
		// the pass, so it is retried soon and EnrollmentFailed says why.
		if gates, readErr = r.ambientGates(ctx, mesh, w.cp, w.namespaces, w.decisions, w.policies); readErr != nil {
			errs = append(errs, readErr)
		}
	}
	tally := enrollmentTally{holdOnly: holdOnly}
	tally.ambientBlocked, tally.ambientUnreadable = r.reportAmbientGates(mesh, gates)
	sel := pass.Select(w.observed, gates, mesh.Status.EnrolledNamespaces)
	for _, s := range sel.Announce {
		if err := r.applyNamespaceLabels(ctx, w.byName[s.Namespace], s.Labels); err != nil {
			errs = append(errs, fmt.Errorf("announcing namespace %s for ambient: %w", s.Namespace, err))
		}
	}
	todo := make([]*corev1.Namespace, 0, len(sel.Todo))
	for _, name := range sel.Todo {
		todo = append(todo, w.byName[name])
	}
	if !holdOnly && len(todo) > 0 {
		if err := r.ensureNamedFinalizer(ctx, mesh, EnrollFinalizer); err != nil {
			return 0, err
		}
	}
	outcomes := r.enrollNamespaces(ctx, mesh, pass, todo, w)
	enrolled, paused, nsErrs := r.recordOutcomes(mesh, todo, outcomes, w.decisions, &tally, sel.HeldEnrolled)
	errs = append(errs, nsErrs...)
	var unrelaxed []*corev1.Namespace
	for i, ns := range todo {
		if outcomes[i].err != nil {
			unrelaxed = append(unrelaxed, ns)
		}
	}
	for i, err := range r.releaseNamespaces(ctx, mesh, w.leaving, w.policies, unrelaxed) {
		ns := w.leaving[i]
		if err != nil {
			errs = append(errs, err)
		} else if slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventNamespaceReleased), "Reconcile",
				"Released namespace %s (%s): state labels, policies and data-plane label removed.", ns.Name, w.decisions[ns.Name].Reason)
		}
	}
	sort.Strings(tally.permissive)
	st.next.EnrolledNamespaces, st.next.PermissiveNamespaces, st.next.PausedObjects = enrolled, tally.permissive, paused

	ctrl.LoggerFrom(ctx).V(1).Info("enrollment", "holdOnly", holdOnly, "enrolled", len(enrolled), "permissive", len(tally.permissive),
		"awaitingCutover", len(tally.waiting), "migrating", len(tally.migrating), "conflicts", len(tally.conflicts), "baselineWithheld", len(tally.withheld),
		"paused", len(paused), "errors", len(errs))
	wait := setEnrollmentConditions(st, mesh.Spec, tally)
	if tally.pending && (wait == 0 || wait > convergingRecheck) {
		wait = convergingRecheck
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.EventEnrollmentFailed), "Reconcile", "%s", err.Error())
		return wait, err
	}
	return wait, nil
}

// recordOutcomes counts what the namespaces' steps came to into tally,
// raises the events a human wants to see (a namespace enrolled, a conflict,
// a foreign PeerAuthentication in force, once when first reported), and
// returns the enrolled namespaces and the paused objects (sorted), and each
// failed namespace's error in todo's order. heldEnrolled: without Ready,
// the namespaces that stay enrolled as they are.
func (r *ServiceMeshReconciler) recordOutcomes(mesh *v1alpha1.ServiceMesh, todo []*corev1.Namespace, outcomes []nsOutcome,
	decisions map[string]enroll.Decision, tally *enrollmentTally, heldEnrolled []string) (enrolled, paused []string, errs []error) {
	enrolled = slices.Clone(heldEnrolled)
	for i, ns := range todo {
		d, res, err := decisions[ns.Name], outcomes[i].res, outcomes[i].err
		paused = append(paused, res.paused...)
		if enroll.Paused(ns) {
			paused = append(paused, "Namespace/"+ns.Name)
		}
		var conflict *enrollConflict
		if errors.As(err, &conflict) {
			tally.conflicts = append(tally.conflicts, fmt.Sprintf("%s %s/%s", conflict.err.Kind, conflict.err.Namespace, conflict.err.Name))
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.EventEnrollmentConflict), "Reconcile", "%s", err.Error())
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !tally.holdOnly {
			enrolled = append(enrolled, ns.Name)
		}
		if !slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventNamespaceEnrolled), "Reconcile",
				"Enrolled namespace %s (requested by %s) at %s mTLS.", ns.Name, d.Reason, strings.ToUpper(res.Mode.Mode))
		}
		if res.Foreign != "" {
			if c := meta.FindStatusCondition(mesh.Status.Conditions, string(v1alpha1.ConditionMTLSCutover)); c == nil ||
				c.Reason != string(v1alpha1.ReasonForeignPeerAuthentication) || !strings.Contains(c.Message, res.Foreign) {
				// Once, when it is first reported, not every pass.
				r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonForeignPeerAuthentication), "Reconcile",
					"%s is in force in enrolled namespace %s instead of %s: Istio applies the oldest namespace-wide PeerAuthentication. "+
						"The operator leaves it alone; delete it, or give it a selector, for the operator's mTLS to apply.",
					res.Foreign, ns.Name, enroll.PeerAuthenticationName)
			}
		}
		tally.add(ns.Name, res.PolicyPlan)
	}
	sort.Strings(enrolled)
	sort.Strings(paused)
	return enrolled, paused, errs
}

// reportAmbientGates raises a Warning event for each namespace whose
// NetworkPolicies block ambient, when it is first reported, and returns
// the blocked and the unreadable namespaces as the conditions list them.
func (r *ServiceMeshReconciler) reportAmbientGates(mesh *v1alpha1.ServiceMesh, gates map[string]enroll.AmbientGate) (blocked, unreadable []string) {
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		g := gates[name]
		if g.Blocked != "" {
			blocked = append(blocked, g.Blocked)
			if c := meta.FindStatusCondition(mesh.Status.Conditions, string(v1alpha1.ConditionAmbientNetworkPolicy)); c == nil ||
				c.Reason != string(v1alpha1.ReasonNetworkPolicyBlocksAmbient) || !strings.Contains(c.Message, g.Blocked) {
				// Once, when it is first reported, not every pass.
				held := "is not enrolled in ambient until they admit what capture needs"
				if !g.Hold {
					held = "is enrolled already and stays enrolled, but its Pods are cut off where they are captured"
				}
				r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonNetworkPolicyBlocksAmbient), "Reconcile",
					"Namespace %s. Namespace %s %s. %s", g.Blocked, name, held, ambientAdvice)
			}
		}
		if g.Unreadable != "" {
			unreadable = append(unreadable, g.Unreadable)
		}
	}
	return blocked, unreadable
}

// enrollNamespaces takes the steps of every namespace in todo and returns
// each one's outcome, in todo's order.
//
// Namespaces are enrolled concurrently: each one's writes depend only on
// its own objects and on reads of its declared edges, and a dependant
// that reads an edge mid-change only holds its STRICT back longer. The
// leaving namespaces are still released after all of them.
//
// A namespace whose data-plane label goes on in this pass is looked at
// again once every namespace's writes are done (cutOver): its Pods are
// read as of its label apply, and by then the API server's watch cache
// has usually passed every label of the pass, so the reads are answered
// at once. Read right after each apply, every read waited for the next
// progress notification of the cache (up to 100 ms while Pods do not
// change; docs/benchmark.md).
func (r *ServiceMeshReconciler) enrollNamespaces(ctx context.Context, mesh *v1alpha1.ServiceMesh, pass enroll.Pass, todo []*corev1.Namespace,
	w *enrollWorld) []nsOutcome {
	outcomes := make([]nsOutcome, len(todo))
	forEach(len(todo), enrollWorkers, func(i int) {
		ns := todo[i]
		res, step, err := r.enrollNamespace(ctx, mesh, pass, ns, observedNamespace(ns, w.decisions[ns.Name], w.policies[ns.Name], w.foreign[ns.Name]))
		outcomes[i] = nsOutcome{res: res, err: err, cutover: step}
	})
	var second []int
	for i := range outcomes {
		if outcomes[i].err == nil && outcomes[i].cutover != nil {
			second = append(second, i)
		}
	}
	if names := cutoverNames(outcomes, second); wholeClusterPodList(len(names), len(w.namespaces)) {
		if blockers, err := r.cutoverBlockers(ctx, mesh.Spec.DataPlane, names); err != nil {
			// Each namespace lists its own Pods instead.
			ctrl.LoggerFrom(ctx).Info("listing the cluster's Pods for the cutover failed; listing them by namespace", "error", err.Error())
		} else {
			for _, i := range second {
				blocker := blockers[outcomes[i].cutover.ns.Name]
				outcomes[i].cutover.workloads = func() (string, error) { return blocker, nil }
			}
		}
	}
	forEach(len(second), enrollWorkers, func(j int) {
		o := &outcomes[second[j]]
		o.res, o.err = r.cutOver(ctx, mesh, pass, o.res, o.cutover)
	})
	return outcomes
}

// reportOptOuts sets NamespaceOptOut from the namespaces asked for that an
// admin's label keeps out, and raises a Warning event for each one when it
// is first reported.
func (r *ServiceMeshReconciler) reportOptOuts(mesh *v1alpha1.ServiceMesh, st *status, nss []corev1.Namespace, decisions map[string]enroll.Decision) {
	var out []string
	prev := meta.FindStatusCondition(mesh.Status.Conditions, string(v1alpha1.ConditionNamespaceOptOut))
	for i := range nss {
		ns := &nss[i]
		d := decisions[ns.Name]
		if ns.DeletionTimestamp != nil || d.OptedOut == "" || !d.Asked {
			continue
		}
		entry := fmt.Sprintf("%s (%s)", ns.Name, d.OptedOut)
		out = append(out, entry)
		if prev == nil || !strings.Contains(prev.Message, entry) {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonNamespaceOptedOut), "Reconcile",
				"Namespace %s is asked for but an admin opted it out with %s: it is not enrolled (an enrolled one leaves), and the operator never replaces or deletes that label. "+
					"Remove the label to enroll it, or stop asking for it.", ns.Name, d.OptedOut)
		}
	}
	setOptOutCondition(st, out)
}

// setOptOutCondition: NamespaceOptOut True naming the opted-out
// namespaces asked for ("ns (label)"), absent when there is none.
func setOptOutCondition(st *status, optedOut []string) {
	if len(optedOut) == 0 {
		meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionNamespaceOptOut))
		return
	}
	slices.Sort(optedOut)
	st.set(v1alpha1.ConditionNamespaceOptOut, metav1.ConditionTrue, v1alpha1.ReasonNamespaceOptedOut, fmt.Sprintf(
		"These namespaces are asked for but an admin opted them out; they are not enrolled and their labels stand (the operator never replaces or deletes them): %s.",
		strings.Join(truncated(optedOut, 10), ", ")))
}

// enrollmentTally is what one pass over the namespaces found, as the
// enrollment conditions need it.
type enrollmentTally struct {
	// holdOnly: the mesh is not Ready; Pods were not looked at and nothing
	// was enrolled, so the conditions that describe only those (conflicts,
	// the migration's end) stay as they were. The enrolled namespaces' mTLS
	// was read (and maybe relaxed), so MTLSCutover is still decided.
	holdOnly bool
	// waiting: namespaces held at PERMISSIVE, each with what holds it
	// ("ns (Pod p)", or "ns (edge ...)"); ownWaiting: at least one of them
	// is held by its own Pods rather than only by a declared edge.
	waiting    []string
	ownWaiting bool
	// heldPermissive: the enrolled namespaces at PERMISSIVE that are not
	// waiting, each with the reason of its mode ("ns (Maintenance)"): the
	// break-glass, a migration, a control plane not Ready, a paused policy.
	heldPermissive []string
	// migrating: per-namespace progress of a dataPlane change.
	migrating []string
	// conflicts: objects of someone else with a policy's name ("Kind ns/name").
	conflicts []string
	// withheld: namespaces without the strict baseline ("ns (mtls reason)").
	withheld []string
	// foreign: someone else's namespace-wide PeerAuthentications in force
	// instead of the operator's ("PeerAuthentication ns/name (MODE)").
	foreign []string
	// ambientBlocked: namespaces whose NetworkPolicies would cut off their
	// Pods in ambient ("ns: NetworkPolicy ns/name ..."); ambientUnreadable:
	// namespaces whose NetworkPolicies could not be read ("ns (error)").
	ambientBlocked, ambientUnreadable []string
	// permissive: the enrolled namespaces at PERMISSIVE; pending: at least
	// one waits for its cutover (looked at again soon).
	permissive []string
	pending    bool
}

// add counts one enrolled namespace's plan.
func (t *enrollmentTally) add(ns string, res enroll.PolicyPlan) {
	if res.Migration != "" {
		t.migrating = append(t.migrating, res.Migration)
	}
	if res.Mode.Mode == contract.MTLSPermissive {
		t.permissive = append(t.permissive, ns)
		if !res.Pending {
			t.heldPermissive = append(t.heldPermissive, fmt.Sprintf("%s (%s)", ns, res.Mode.Reason))
		}
	}
	if res.BaselineWithheld {
		t.withheld = append(t.withheld, fmt.Sprintf("%s (%s)", ns, res.Mode.Reason))
	}
	if res.Foreign != "" {
		t.foreign = append(t.foreign, res.Foreign)
	}
	t.pending = t.pending || res.Pending
	switch {
	case res.Pending && res.EdgeHeld:
		t.waiting = append(t.waiting, fmt.Sprintf("%s (%s)", ns, res.Blocker))
	case res.Pending:
		t.ownWaiting = true
		t.waiting = append(t.waiting, fmt.Sprintf("%s (Pod %s)", ns, res.Blocker))
	}
}

// setEnrollmentConditions decides MTLSCutover, DataPlaneMigration,
// EnrollmentConflict, StrictIsolation and MaintenanceWindow (and
// status.maintenanceUntil) from the spec and the tally, and returns how
// soon a maintenance window asks to look again (0: it does not). It reads
// nothing but its arguments (st.now, st.oldDataPlane included).
func setEnrollmentConditions(st *status, spec v1alpha1.ServiceMeshSpec, t enrollmentTally) time.Duration {
	setMTLSCutoverCondition(st, spec, t)
	setDataPlaneMigrationCondition(st, spec, t)
	setEnrollmentConflictCondition(st, t)
	setStrictIsolationCondition(st, spec, t)
	setAmbientNetworkPolicyCondition(st, spec, t)
	return setMaintenanceWindowCondition(st, spec)
}

// truncated keeps the first n entries and says how many more there are.
func truncated(list []string, n int) []string {
	if len(list) <= n {
		return list
	}
	return append(list[:n:n], fmt.Sprintf("and %d more", len(list)-n))
}

func setMTLSCutoverCondition(st *status, spec v1alpha1.ServiceMeshSpec, t enrollmentTally) {
	waiting := slices.Sorted(slices.Values(t.waiting))
	held := slices.Sorted(slices.Values(t.heldPermissive))
	switch {
	case len(t.foreign) > 0:
		// Whatever else holds: no namespace may be claimed cut over (or
		// held by the operator) where another policy sets the mode.
		msg := fmt.Sprintf("The mTLS mode in force in some enrolled namespaces is not the operator's: Istio applies the oldest namespace-wide PeerAuthentication, and there it is one the operator does not own, older than %s: %s. "+
			"The operator never edits or deletes it; delete it or give it a selector for the operator's mTLS (and its cutover) to apply.",
			enroll.PeerAuthenticationName, strings.Join(truncated(slices.Sorted(slices.Values(t.foreign)), 5), ", "))
		if len(waiting) > 0 {
			msg += " Also held at PERMISSIVE: " + strings.Join(truncated(waiting, 5), ", ") + "."
		}
		st.set(v1alpha1.ConditionMTLSCutover, metav1.ConditionFalse, v1alpha1.ReasonForeignPeerAuthentication, msg)
	case len(waiting) > 0 && !t.ownWaiting:
		st.set(v1alpha1.ConditionMTLSCutover, metav1.ConditionFalse, v1alpha1.ReasonAwaitingEdge, fmt.Sprintf(
			"Held at PERMISSIVE: the workloads are meshed, but a declared edge namespace (allow-from label) still has a Pod that would call in plaintext, which STRICT would reject; mesh these callers (enroll their namespace, or give them a sidecar): %s.",
			strings.Join(truncated(waiting, 5), ", ")))
	case len(waiting) > 0:
		st.set(v1alpha1.ConditionMTLSCutover, metav1.ConditionFalse, v1alpha1.ReasonAwaitingCutover, fmt.Sprintf(
			"Held at PERMISSIVE until every running Pod can take STRICT mTLS (%s); roll these workloads into the mesh: %s.",
			cutoverSignal(spec.DataPlane), strings.Join(truncated(waiting, 5), ", ")))
	case len(held) > 0:
		msg := fmt.Sprintf("These enrolled namespaces are at PERMISSIVE, not STRICT (why, per namespace): %s.", strings.Join(truncated(held, 5), ", "))
		if t.holdOnly {
			msg += " The control plane is not Ready: until it is, mTLS is only relaxed, never tightened, and the workloads' cutover is not evaluated."
		}
		st.set(v1alpha1.ConditionMTLSCutover, metav1.ConditionFalse, v1alpha1.ReasonHeldPermissive, msg)
	default:
		st.set(v1alpha1.ConditionMTLSCutover, metav1.ConditionTrue, v1alpha1.ReasonCutOver, "Every enrolled namespace has passed the PERMISSIVE→STRICT cutover.")
	}
}

func setDataPlaneMigrationCondition(st *status, spec v1alpha1.ServiceMeshSpec, t enrollmentTally) {
	migrating := slices.Sorted(slices.Values(t.migrating))
	switch {
	case len(migrating) > 0:
		msg := fmt.Sprintf("Moving the enrolled namespaces to dataPlane %s: %s.", spec.DataPlane, strings.Join(truncated(migrating, 10), "; "))
		if st.oldDataPlane != "" {
			msg += " " + st.oldDataPlane
		}
		st.set(v1alpha1.ConditionDataPlaneMigration, metav1.ConditionTrue, v1alpha1.ReasonMigrating, msg)
	case st.oldDataPlane != "":
		st.set(v1alpha1.ConditionDataPlaneMigration, metav1.ConditionTrue, v1alpha1.ReasonReleasingOldDataPlane, fmt.Sprintf(
			"Every enrolled namespace is on dataPlane %s. %s", spec.DataPlane, st.oldDataPlane))
	case !t.holdOnly:
		st.set(v1alpha1.ConditionDataPlaneMigration, metav1.ConditionFalse, v1alpha1.ReasonSettled, fmt.Sprintf(
			"No data-plane migration in progress: every enrolled namespace is configured for %s.", spec.DataPlane))
	}
}

func setEnrollmentConflictCondition(st *status, t enrollmentTally) {
	conflicts := slices.Sorted(slices.Values(t.conflicts))
	switch {
	case len(conflicts) > 0:
		st.set(v1alpha1.ConditionEnrollmentConflict, metav1.ConditionTrue, v1alpha1.ReasonPolicyConflict, fmt.Sprintf(
			"These objects have the names of the operator's per-namespace policies but belong to someone else, so their namespaces are not enrolled (their data-plane label was not applied, or was rolled back): %s. Rename or delete them, or opt the namespace out.",
			strings.Join(conflicts, ", ")))
	case !t.holdOnly:
		st.set(v1alpha1.ConditionEnrollmentConflict, metav1.ConditionFalse, v1alpha1.ReasonNoConflict, "No object of someone else stands in the way of an enrolled namespace's policies.")
	}
}

// ambientAdvice is what to add to a NetworkPolicy that blocks ambient
// (docs/servicemesh.md, "Ambient and NetworkPolicies", has the YAML).
const ambientAdvice = "Add ingress rules admitting TCP 15008 (HBONE) from the peers the policy admits (for instance namespaces labelled " +
	labels.IstioDataPlaneMode + "=ambient) and the kubelet's probe address " + policy.AmbientProbeSourceCIDR +
	" (docs/servicemesh.md, Ambient and NetworkPolicies)."

func setAmbientNetworkPolicyCondition(st *status, spec v1alpha1.ServiceMeshSpec, t enrollmentTally) {
	blocked := slices.Sorted(slices.Values(t.ambientBlocked))
	unreadable := slices.Sorted(slices.Values(t.ambientUnreadable))
	switch {
	case spec.DataPlane != v1alpha1.DataPlaneAmbient:
		meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionAmbientNetworkPolicy))
	case t.holdOnly:
	case len(blocked) > 0:
		msg := "These namespaces' NetworkPolicies would cut off their Pods once ztunnel captures them; a namespace not enrolled yet is held out of the mesh, " +
			"an enrolled one stays enrolled: " + strings.Join(truncated(blocked, 5), "; ") + ". " + ambientAdvice
		if len(unreadable) > 0 {
			msg += " NetworkPolicies unreadable, held as they are: " + strings.Join(truncated(unreadable, 5), ", ") + "."
		}
		st.set(v1alpha1.ConditionAmbientNetworkPolicy, metav1.ConditionTrue, v1alpha1.ReasonNetworkPolicyBlocksAmbient, msg)
	case len(unreadable) > 0:
		st.set(v1alpha1.ConditionAmbientNetworkPolicy, metav1.ConditionUnknown, v1alpha1.ReasonNetworkPolicyUnreadable,
			"The NetworkPolicies of these namespaces could not be read, so they are held as they are (not enrolled if they were not): "+
				strings.Join(truncated(unreadable, 5), ", ")+".")
	default:
		st.set(v1alpha1.ConditionAmbientNetworkPolicy, metav1.ConditionFalse, v1alpha1.ReasonNetworkPoliciesAdmitAmbient,
			"No NetworkPolicy of a namespace asked for refuses HBONE (TCP 15008) from the peers it admits or the probe address 169.254.7.127.")
	}
}

// ambientGates reads the cluster's NetworkPolicies once and gates each
// namespace asked for (GateAmbient). A failed read holds every namespace
// not enrolled yet, and is returned too.
func (r *ServiceMeshReconciler) ambientGates(ctx context.Context, mesh *v1alpha1.ServiceMesh, cp *v1alpha1.ControlPlaneStatus,
	namespaces []corev1.Namespace, decisions map[string]enroll.Decision, policies map[string]map[string]*unstructured.Unstructured) (map[string]enroll.AmbientGate, error) {
	list := &networkingv1.NetworkPolicyList{}
	readErr := r.Client.List(ctx, list)
	if readErr != nil {
		readErr = fmt.Errorf("listing NetworkPolicies: %w", readErr)
	}
	byNamespace := map[string][]networkingv1.NetworkPolicy{}
	for _, np := range list.Items {
		byNamespace[np.Namespace] = append(byNamespace[np.Namespace], np)
	}
	var meshed []netpol.Namespace
	for i := range namespaces {
		ns := &namespaces[i]
		if decisions[ns.Name].Enroll && ns.DeletionTimestamp == nil {
			meshed = append(meshed, netpol.Namespace{Name: ns.Name, Labels: enroll.MeshedLabels(ns.Labels, mesh.Spec.DataPlane, cp.Revision)})
		}
	}
	gates := map[string]enroll.AmbientGate{}
	for _, m := range meshed {
		ns := &corev1.Namespace{}
		for i := range namespaces {
			if namespaces[i].Name == m.Name {
				ns = &namespaces[i]
			}
		}
		// Enrolled: listed so, or carrying what the operator writes only
		// when it enrolls (state labels, policies); a namespace half-way is
		// held where it is rather than withdrawn. The enrollment request it
		// writes for spec.enrollNamespaces and its announcement (joining)
		// come before enrolling.
		enrolled := slices.Contains(mesh.Status.EnrolledNamespaces, m.Name) || enrollingLabels(ns) || len(policies[m.Name]) > 0
		gates[m.Name] = enroll.GateAmbient(m, enrolled, byNamespace[m.Name], readErr, meshed)
	}
	return gates, readErr
}

// setEnrollmentFailedCondition reports the enrollment step's errors of
// this pass (nil: none).
func setEnrollmentFailedCondition(st *status, err error) {
	if err != nil {
		msg := err.Error()
		if len(msg) > 1024 {
			msg = msg[:1024] + "…"
		}
		st.set(v1alpha1.ConditionEnrollmentFailed, metav1.ConditionTrue, v1alpha1.ReasonEnrollmentStepFailed, fmt.Sprintf(
			"The last pass over the namespaces failed; it is retried within %s, or sooner at a maintenance window's end or a cutover's next look: %s",
			maxFailureBackoff, msg))
		return
	}
	st.set(v1alpha1.ConditionEnrollmentFailed, metav1.ConditionFalse, v1alpha1.ReasonEnrollmentStepsSucceeded, "Every step of the last pass over the namespaces succeeded.")
}

func setStrictIsolationCondition(st *status, spec v1alpha1.ServiceMeshSpec, t enrollmentTally) {
	withheld := slices.Sorted(slices.Values(t.withheld))
	switch {
	case spec.Isolation != v1alpha1.IsolationStrict:
		meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionStrictIsolation))
	case len(withheld) > 0:
		st.set(v1alpha1.ConditionStrictIsolation, metav1.ConditionFalse, v1alpha1.ReasonBaselineWithheld, fmt.Sprintf(
			"The allow-nothing baseline %s exists only at STRICT mTLS (it would drop plaintext); these namespaces are at PERMISSIVE and have namespace isolation only: %s.",
			enroll.BaselinePolicyName, strings.Join(truncated(withheld, 5), ", ")))
	default:
		st.set(v1alpha1.ConditionStrictIsolation, metav1.ConditionTrue, v1alpha1.ReasonBaselineInForce, fmt.Sprintf(
			"Every enrolled namespace is STRICT with the allow-nothing baseline %s: a workload admits only what its own ALLOW policies admit.",
			enroll.BaselinePolicyName))
	}
}

// setMaintenanceWindowCondition sets MaintenanceWindow and
// status.maintenanceUntil, and returns how long the window still holds.
func setMaintenanceWindowCondition(st *status, spec v1alpha1.ServiceMeshSpec) time.Duration {
	st.next.MaintenanceUntil = nil
	switch open, left := enroll.Window(spec.MTLS, st.now); {
	case open:
		st.next.MaintenanceUntil = spec.MTLS.MaintenanceUntil.DeepCopy()
		st.set(v1alpha1.ConditionMaintenanceWindow, metav1.ConditionTrue, v1alpha1.ReasonWindowOpen, fmt.Sprintf(
			"spec.mtls.maintenanceUntil holds enrolled namespaces at PERMISSIVE until %s; STRICT is restored then without further action.",
			spec.MTLS.MaintenanceUntil.UTC().Format(time.RFC3339)))
		return left
	case spec.MTLS.MaintenanceUntil != nil:
		st.set(v1alpha1.ConditionMaintenanceWindow, metav1.ConditionFalse, v1alpha1.ReasonWindowEnded, fmt.Sprintf(
			"The maintenance window ended at %s; STRICT is restored where the workloads are ready for it.",
			spec.MTLS.MaintenanceUntil.UTC().Format(time.RFC3339)))
	default:
		st.set(v1alpha1.ConditionMaintenanceWindow, metav1.ConditionFalse, v1alpha1.ReasonNoWindow, "No maintenance window is set.")
	}
	return 0
}

// enrollNamespace takes one namespace's pass: it reads what the planner
// needs (the Pods istio-cni still redirects when the namespace leaves
// ambient, its workloads once the data-plane label is on, its new edges),
// plans (enroll.Pass.PlanNamespace) and takes the steps in order, stopping
// at the first that fails. When a policy cannot be applied because an
// object of its name belongs to someone else, the plan's rollback is taken
// (the data-plane label included) and the conflict is returned. When the
// data-plane label has just gone on and the namespace waits for its
// cutover, the step returned is the second look cutOver takes once the
// pass's other writes are done.
func (r *ServiceMeshReconciler) enrollNamespace(ctx context.Context, mesh *v1alpha1.ServiceMesh, pass enroll.Pass,
	ns *corev1.Namespace, world enroll.Namespace) (nsResult, *cutoverStep, error) {
	heldBy := ""
	if pass.StateNeedsPods(world) {
		var err error
		if heldBy, err = r.ambientHolder(ctx, ns); err != nil {
			return nsResult{}, nil, err
		}
	}
	// The cutover signal is read from Pods only once the data-plane label
	// is on the namespace: Pods listed before it may have been created
	// without injection or capture that is about to apply.
	var workloads workloadsCheck
	if pass.InPlace(world) {
		workloads = r.readWorkloads(ctx, mesh.Spec.DataPlane, ns)
	}
	res := nsResult{policies: maps.Clone(world.Live)}
	if res.policies == nil {
		res.policies = map[string]*unstructured.Unstructured{}
	}
	facts, err := r.readFacts(ctx, pass, world, ns, workloads)
	if err != nil {
		return res, nil, err
	}
	plan := pass.PlanNamespace(world, heldBy, facts)
	res.PolicyPlan = plan.PolicyPlan
	if failed, err := r.takeSteps(ctx, mesh, ns, plan.Steps, &res); err != nil {
		var conflict *apply.ConflictError
		if failed.Kind != enroll.StepLabels && errors.As(err, &conflict) && len(plan.OnConflict) > 0 {
			if rerr := r.rollBack(ctx, mesh, ns, plan.OnConflict); rerr != nil {
				return res, nil, errors.Join(err, rerr)
			}
			return res, nil, &enrollConflict{namespace: ns.Name, err: conflict}
		}
		return res, nil, err
	}
	if !plan.SecondLook {
		return res, nil, nil
	}
	return res, &cutoverStep{ns: ns, world: world, first: plan}, nil
}

// cutOver is the second look at a namespace whose data-plane label went on
// in this pass (enroll.Pass.PlanSecondLook): its Pods now tell the truth,
// so a namespace that is ready for STRICT does not wait for the next poll.
func (r *ServiceMeshReconciler) cutOver(ctx context.Context, mesh *v1alpha1.ServiceMesh, pass enroll.Pass, first nsResult, step *cutoverStep) (nsResult, error) {
	workloads := step.workloads
	if workloads == nil {
		workloads = r.readWorkloads(ctx, mesh.Spec.DataPlane, step.ns)
	}
	// The namespace as its labels were applied, with the policies as the
	// first look left them.
	world := observedNamespace(step.ns, step.world.Decision, first.policies, step.world.Foreign)
	res := nsResult{policies: maps.Clone(first.policies)}
	facts, err := r.readFacts(ctx, pass, world, step.ns, workloads)
	if err != nil {
		return res, err
	}
	plan := pass.PlanSecondLook(world, step.first, facts)
	res.PolicyPlan = plan
	_, err = r.takeSteps(ctx, mesh, step.ns, plan.Steps, &res)
	return res, err
}

// readFacts reads what the namespace's policy plan needs
// (enroll.Pass.PolicyNeeds): its workloads' verdict, then each new edge's
// Pods and namespace. workloads nil: the Pods are not to be looked at yet.
func (r *ServiceMeshReconciler) readFacts(ctx context.Context, pass enroll.Pass, world enroll.Namespace, ns *corev1.Namespace, workloads workloadsCheck) (enroll.Facts, error) {
	f := enroll.Facts{Evaluate: workloads != nil}
	needs := pass.PolicyNeeds(world, f.Evaluate)
	if needs.Workloads {
		blocker, err := workloads()
		if err != nil {
			return f, err
		}
		f.Blocker = blocker
	}
	if len(needs.Edges) > 0 {
		f.EdgePods, f.Redirecting = map[string][]corev1.Pod{}, map[string]bool{}
	}
	for _, e := range needs.Edges {
		pods := &corev1.PodList{}
		if err := r.Reader.List(ctx, pods, client.InNamespace(e)); err != nil {
			return f, fmt.Errorf("listing Pods in %s (a declared edge of %s): %w", e, ns.Name, err)
		}
		f.EdgePods[e] = pods.Items
		edgeNS := &corev1.Namespace{}
		if err := r.Reader.Get(ctx, client.ObjectKey{Name: e}, edgeNS); client.IgnoreNotFound(err) != nil {
			return f, fmt.Errorf("reading namespace %s (a declared edge of %s): %w", e, ns.Name, err)
		}
		f.Redirecting[e] = edgeNS.Labels[labels.IstioDataPlaneMode] == "ambient"
	}
	return f, nil
}

// takeSteps takes a namespace's steps in order and stops at the first
// that fails, returning it and its error. res (nil for a release) records
// the paused objects held and the policies as they stand.
func (r *ServiceMeshReconciler) takeSteps(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns *corev1.Namespace, steps []enroll.Step, res *nsResult) (enroll.Step, error) {
	for _, s := range steps {
		if err := r.takeStep(ctx, mesh, ns, s, res); err != nil {
			return s, err
		}
	}
	return enroll.Step{}, nil
}

func (r *ServiceMeshReconciler) takeStep(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns *corev1.Namespace, s enroll.Step, res *nsResult) error {
	switch s.Kind {
	case enroll.StepLabels:
		return r.applyNamespaceLabels(ctx, ns, s.Labels)
	case enroll.StepHold:
		// A paused policy is reported; a paused namespace is reported
		// by the pass (its labels are simply not applied).
		if kind, name, _ := strings.Cut(s.Key, "/"); res != nil && kind != "Namespace" {
			res.paused = append(res.paused, fmt.Sprintf("%s/%s/%s", kind, s.Namespace, name))
		}
	case enroll.StepWait:
		if s.Err != nil {
			return s.Err
		}
		return errors.New(s.Why)
	case enroll.StepDelete:
		deleted, err := r.applier().Delete(ctx, s.Object, mesh)
		if err != nil {
			return err
		}
		if res != nil {
			delete(res.policies, s.Key)
		}
		if deleted && s.Event == v1alpha1.EventBaselineWithdrawn {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventBaselineWithdrawn), "Reconcile",
				"Removed AuthorizationPolicy %s/%s: %s (%s).", s.Namespace, enroll.BaselinePolicyName, baselineWhy(mesh.Spec.Isolation), s.Why)
		}
	case enroll.StepApply:
		result, after, err := r.applyPolicy(ctx, mesh, res.policies[s.Key], s.Object)
		if err != nil {
			return err
		}
		res.policies[s.Key] = after
		if result == apply.Created && s.Event == v1alpha1.EventBaselineApplied {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventBaselineApplied), "Reconcile",
				"Applied the allow-nothing AuthorizationPolicy %s/%s (isolation strict, STRICT mTLS in force): workloads admit only what their own ALLOW policies admit.",
				s.Namespace, enroll.BaselinePolicyName)
		}
	default:
		return fmt.Errorf("unknown enrollment step %q", s.Kind)
	}
	return nil
}

// rollBack takes a plan's rollback steps (NamespacePlan.OnConflict): the
// labels, then the operator's own policies; an object of someone else
// with a policy's name is left alone.
func (r *ServiceMeshReconciler) rollBack(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns *corev1.Namespace, steps []enroll.Step) error {
	for _, s := range steps {
		var conflict *apply.ConflictError
		if err := r.takeStep(ctx, mesh, ns, s, nil); err != nil && (s.Kind != enroll.StepDelete || !errors.As(err, &conflict)) {
			return err
		}
	}
	return nil
}

// ambientHolder is a running Pod of the namespace that istio-cni still
// redirects to ztunnel ("" when none): while there is one, a namespace
// leaving ambient keeps saying ambient in its state label
// (enroll.Pass.PlanNamespace).
func (r *ServiceMeshReconciler) ambientHolder(ctx context.Context, ns *corev1.Namespace) (string, error) {
	pods := &corev1.PodList{}
	if err := r.Reader.List(ctx, pods, client.InNamespace(ns.Name)); err != nil {
		return "", fmt.Errorf("listing Pods in %s: %w", ns.Name, err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; podmesh.Running(p) && podmesh.Redirected(p) {
			return p.Name, nil
		}
	}
	return "", nil
}

// enrollConflict is a namespace whose policies could not be applied
// because an object of the same name belongs to someone else.
type enrollConflict struct {
	namespace string
	err       *apply.ConflictError
}

func (e *enrollConflict) Error() string {
	return fmt.Sprintf("namespace %s is not enrolled: %s", e.namespace, e.err.Error())
}
func (e *enrollConflict) Unwrap() error { return e.err }

// migrationPending: some namespace the operator configured is configured
// for another data plane than spec.dataPlane.
func (r *ServiceMeshReconciler) migrationPending(ctx context.Context, mesh *v1alpha1.ServiceMesh) (bool, error) {
	if !controllerutil.ContainsFinalizer(mesh, EnrollFinalizer) {
		return false, nil
	}
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList, client.HasLabels{labels.MeshDataPlane}); err != nil {
		return false, fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if dp := enroll.AppliedDataPlane(ns.Labels, ownedLabels(ns)); dp != "" && dp != mesh.Spec.DataPlane {
			return true, nil
		}
	}
	return false, nil
}

// applyPolicy applies a managed policy. Server-side apply alone would keep
// a field someone added by hand (it belongs to their field manager): a rule
// added to the allow-nothing baseline, or a selector that narrows a
// namespace-wide policy, would silently widen what is admitted. So a live
// policy of ours whose spec differs from the desired one while another
// writer holds part of it first gets the desired spec back whole (a JSON
// patch replacing spec, guarded by its resourceVersion), then the apply
// runs as usual. A spec only the operator's applies hold (its own
// PERMISSIVE → STRICT) needs no patch: the apply alone replaces it.
func (r *ServiceMeshReconciler) applyPolicy(ctx context.Context, mesh *v1alpha1.ServiceMesh, live, desired *unstructured.Unstructured) (apply.Result, *unstructured.Unstructured, error) {
	if live != nil && metav1.IsControlledBy(live, mesh) && !enroll.Paused(live) && !sameJSON(live.Object["spec"], desired.Object["spec"]) &&
		apply.OthersHold(live, FieldManager, "spec") {
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": live.GetResourceVersion()},
			{"op": "replace", "path": "/spec", "value": desired.Object["spec"]},
		})
		if err != nil {
			return "", nil, err
		}
		if err := r.Client.Patch(ctx, live.DeepCopy(), client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldManager)); err != nil {
			return "", nil, fmt.Errorf("restoring the spec of %s %s/%s: %w", live.GetKind(), live.GetNamespace(), live.GetName(), err)
		}
	}
	// The live policy, when there is one, was read in this pass already.
	return r.applier().ApplyOver(ctx, desired, mesh, live)
}

func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// releaseNamespaces takes namespaces out of the mesh, on deletion of the
// ServiceMesh as when they stop being asked for, in two rounds: first each
// one stops enforcing (enroll.PlanRelax: state labels, then policies), then
// each one's Pods are let go (enroll.PlanLetGo: its data-plane label and any
// request the operator wrote). A namespace that stays and declared one of
// them relaxed earlier in the pass (enroll.WithoutLeaving). unrelaxed are
// the namespaces outside leaving that may still be STRICT (their pass
// failed): like a leaving namespace whose first round failed, they keep
// their declared edges' data-plane labels on until a later pass. The result
// holds each leaving namespace's error (nil: released).
func (r *ServiceMeshReconciler) releaseNamespaces(ctx context.Context, mesh *v1alpha1.ServiceMesh, leaving []*corev1.Namespace,
	policies map[string]map[string]*unstructured.Unstructured, unrelaxed []*corev1.Namespace) []error {
	errs := make([]error, len(leaving))
	// Read as they stand now: a failed step may have changed them.
	var stillStrict []enroll.Namespace
	for _, ns := range unrelaxed {
		stillStrict = append(stillStrict, enroll.Namespace{Name: ns.Name, Labels: ns.Labels})
	}
	var relaxed []enroll.Namespace
	var relaxedNS []int
	for i, ns := range leaving {
		if _, errs[i] = r.takeSteps(ctx, mesh, ns, enroll.PlanRelax(observedNamespace(ns, enroll.Decision{}, policies[ns.Name], nil)), nil); errs[i] != nil {
			stillStrict = append(stillStrict, enroll.Namespace{Name: ns.Name, Labels: ns.Labels})
			continue
		}
		relaxed = append(relaxed, enroll.Namespace{Name: ns.Name})
		relaxedNS = append(relaxedNS, i)
	}
	for j, s := range enroll.PlanLetGo(relaxed, stillStrict) {
		i := relaxedNS[j]
		errs[i] = r.takeStep(ctx, mesh, leaving[i], s, nil)
	}
	return errs
}

// teardownEnrollment releases every namespace: on deletion of the
// ServiceMesh and when its license is lost. Only what the operator applied
// goes; user labels, and labels others hold too, stay.
func (r *ServiceMeshReconciler) teardownEnrollment(ctx context.Context, mesh *v1alpha1.ServiceMesh, st *status) error {
	if !controllerutil.ContainsFinalizer(mesh, EnrollFinalizer) {
		return nil
	}
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList); err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	policies, _, err := r.managedPolicies(ctx, mesh)
	if err != nil {
		return err
	}
	var leaving []*corev1.Namespace
	for i := range nsList.Items {
		if ns := &nsList.Items[i]; enroll.Applied(observedNamespace(ns, enroll.Decision{}, policies[ns.Name], nil)) {
			leaving = append(leaving, ns)
		}
	}
	if err := errors.Join(r.releaseNamespaces(ctx, mesh, leaving, policies, nil)...); err != nil {
		return err
	}
	st.next.EnrolledNamespaces, st.next.PermissiveNamespaces, st.next.PausedObjects, st.next.MaintenanceUntil = nil, nil, nil, nil
	meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionMaintenanceWindow))
	meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionMTLSCutover))
	meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionStrictIsolation))
	meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionEnrollmentConflict))
	meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionDataPlaneMigration))
	meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionAmbientNetworkPolicy))
	meta.RemoveStatusCondition(&st.next.Conditions, string(v1alpha1.ConditionNamespaceOptOut))
	if err := apply.RemoveFinalizer(ctx, r.Client, mesh, EnrollFinalizer); !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// ensureNamedFinalizer adds the finalizer; the write is recorded in the
// gate, so the next reconcile waits for the cache to show it.
func (r *ServiceMeshReconciler) ensureNamedFinalizer(ctx context.Context, mesh *v1alpha1.ServiceMesh, name string) error {
	had := controllerutil.ContainsFinalizer(mesh, name)
	if err := apply.AddFinalizer(ctx, r.Client, mesh, name); err != nil {
		return err
	}
	if !had {
		r.gate.Wrote(client.ObjectKeyFromObject(mesh), mesh)
	}
	return nil
}

// wholeClusterPodList says whether a pass's cutovers read the Pods with one
// list of the whole cluster (cutoverBlockers) instead of one list per
// namespace: when at least wholeClusterPodListMin namespaces cut over in
// the pass and they are at least half of the cluster's namespaces, so that
// most Pods the list reads are Pods the cutovers need. At 1,000 namespaces
// the per-namespace lists were the only requests the operator sent beyond
// the writes every implementation makes (docs/benchmark.md, fifteenth
// round). A pass that cuts over a few namespaces of a large cluster keeps
// the per-namespace lists, which read only those namespaces' Pods.
func wholeClusterPodList(cutovers, namespaces int) bool {
	return cutovers >= wholeClusterPodListMin && 2*cutovers >= namespaces
}

const wholeClusterPodListMin = 50

// podListPage bounds what one page of the cluster-wide Pod list holds in
// the operator's memory (and the API server's answer).
var podListPage int64 = 500

// cutoverNames are the namespaces of the outcomes at second.
func cutoverNames(outcomes []nsOutcome, second []int) []string {
	names := make([]string, 0, len(second))
	for _, i := range second {
		names = append(names, outcomes[i].cutover.ns.Name)
	}
	return names
}

// cutoverBlockers reads every Pod of the cluster once, a page at a time,
// and returns each named namespace's cutover verdict (enroll.Blockers),
// keeping no Pod beyond its page. The list is a consistent read sent after
// every label apply of the pass has returned, so it holds every Pod
// created before those labels (what podsSinceLabels asks of each
// namespace's own list); the later pages are read at the first one's
// revision.
func (r *ServiceMeshReconciler) cutoverBlockers(ctx context.Context, dp v1alpha1.DataPlane, names []string) (enroll.Blockers, error) {
	blockers := enroll.NewBlockers(names)
	opts := &client.ListOptions{Limit: podListPage}
	for {
		page := &corev1.PodList{}
		if err := r.Reader.List(ctx, page, opts); err != nil {
			return nil, fmt.Errorf("listing the cluster's Pods: %w", err)
		}
		for i := range page.Items {
			blockers.Add(dp, &page.Items[i])
		}
		if page.Continue == "" {
			return blockers, nil
		}
		opts.Continue = page.Continue
	}
}

// podsSinceLabels lists the namespace's Pods as of a state no older than
// ns, the namespace as last read or applied, which carries the data-plane
// label: every Pod created before that label is in the answer, and every
// Pod created after it was admitted under the label, which is all the
// cutover needs. A consistent list would wait for the API server's watch
// cache to reach the newest revision of all, which the pass's own writes
// keep moving (see reconcileEnrollment). Without a resourceVersion, or when
// the cache does not catch up in time, the list is a consistent one.
func (r *ServiceMeshReconciler) podsSinceLabels(ctx context.Context, ns *corev1.Namespace) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	opts := &client.ListOptions{Namespace: ns.Name}
	if ns.ResourceVersion != "" {
		opts.Raw = &metav1.ListOptions{ResourceVersion: ns.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
	}
	err := r.Reader.List(ctx, pods, opts)
	if opts.Raw != nil && apierrors.IsTimeout(err) {
		err = r.Reader.List(ctx, pods, client.InNamespace(ns.Name))
	}
	if err != nil {
		return nil, fmt.Errorf("listing Pods in %s: %w", ns.Name, err)
	}
	return pods.Items, nil
}
