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

// joiningLabels are the labels the operator applies on a namespace it
// announces for ambient: those it holds already, as they are, and
// mesh-state=joining.
func joiningLabels(ns *corev1.Namespace) map[string]string {
	want := map[string]string{}
	for k := range ownedLabels(ns) {
		if v, ok := ns.Labels[k]; ok {
			want[k] = v
		}
	}
	want[labels.MeshState] = labels.MeshStateJoining
	return want
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

// applyEnrolledLabels applies the labels of an enrolled namespace, unless
// the namespace carries the reconcile-paused annotation: then the labels
// the operator owns there are held as they are (hand edits included).
// Leaving the mesh strips them regardless, as it deletes paused policies.
func (r *ServiceMeshReconciler) applyEnrolledLabels(ctx context.Context, ns *corev1.Namespace, want map[string]string) error {
	if enroll.Paused(ns) {
		return nil
	}
	return r.applyNamespaceLabels(ctx, ns, want)
}

// policyKey names a managed policy within its namespace: Kind/name.
func policyKey(kind, name string) string { return kind + "/" + name }

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
			out[u.GetNamespace()][policyKey(kind, u.GetName())] = u
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
// first: the namespace as its labels were applied, and the labels.
type cutoverStep struct {
	ns   *corev1.Namespace
	base map[string]string
	// foreign: the namespace-wide PeerAuthentications of others there.
	foreign   []*unstructured.Unstructured
	stateDP   v1alpha1.DataPlane
	heldBy    string
	migration string
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

// nsResult is what enrolling one namespace came to.
type nsResult struct {
	mode    enroll.MTLSDecision
	pending bool   // still waiting for the STRICT cutover signal
	blocker string // the first Pod that holds the cutover back
	// edgeHeld: the namespace's own workloads are ready, a declared edge
	// holds STRICT back (blocker names it).
	edgeHeld bool
	// migration is the namespace's progress through a change of data
	// plane ("" when it is not migrating).
	migration string
	paused    []string
	// foreign names someone else's namespace-wide PeerAuthentication that
	// Istio applies instead of mesh-mtls ("" when ours is in force), as
	// "PeerAuthentication ns/name (MODE)".
	foreign string
	// baselineWithheld: isolation strict, but the mode in force is
	// PERMISSIVE, so the allow-nothing baseline is absent.
	baselineWithheld bool
	// policies are the namespace's policies of this ServiceMesh as they
	// stand after applyPolicies (by policyKey), for a second look in the
	// same pass without reading them again.
	policies map[string]*unstructured.Unstructured
}

// reconcileEnrollment enrolls the namespaces asked for and releases the
// others. It enrolls only while meshReady; with holdOnly (the mesh is not
// Ready) it only moves towards plaintext, which is always safe: it releases
// namespaces that are no longer wanted (an opt-out wins at any time) and
// relaxes enrolled ones to PERMISSIVE when the break-glass asks for it (a
// maintenance window, mtls.mode permissive), and otherwise leaves them as
// they are. It returns how soon to look again: at the end of a maintenance
// window, or soon while a cutover is pending.
func (r *ServiceMeshReconciler) reconcileEnrollment(ctx context.Context, mesh *v1alpha1.ServiceMesh, st *status, holdOnly bool) (time.Duration, error) {
	if holdOnly && !controllerutil.ContainsFinalizer(mesh, EnrollFinalizer) {
		return 0, nil // nothing was ever enrolled
	}
	now := st.now
	cp := st.next.ControlPlane
	if cp == nil {
		cp = mesh.Status.ControlPlane
	}
	if cp == nil || cp.Namespace == "" {
		// mode external: the control plane is not visible; the namespace
		// the spec names (Istio's conventional one by default) stands for it.
		c := v1alpha1.ControlPlaneStatus{}
		if cp != nil {
			c = *cp
		}
		c.Namespace = detect.ControlPlaneNamespace(mesh.Spec)
		cp = &c
	}
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList); err != nil {
		return 0, fmt.Errorf("listing namespaces: %w", err)
	}
	policies, foreignPAs, err := r.managedPolicies(ctx, mesh)
	if err != nil {
		return 0, err
	}
	protected := r.protectedNamespaces(cp)
	var enrolled, permissive, heldPermissive, paused, withheld, conflicts, migrating, foreign []string
	var errs []error
	pending, ownWaiting := false, false
	var waiting []string
	// Namespaces leaving the mesh are released after the others are
	// reconciled: a namespace that declared one of them as an edge goes
	// PERMISSIVE first, before istio-cni releases the edge's Pods into
	// plaintext (found by the transition explorer).
	decisions := map[string]enroll.Decision{}
	var leaving []*corev1.Namespace
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		d := enroll.Decide(ns.Name, requestLabels(ns), slices.Contains(mesh.Spec.EnrollNamespaces, ns.Name), protected)
		decisions[ns.Name] = d
		if ns.DeletionTimestamp == nil && !d.Enroll && (len(ownedLabels(ns)) > 0 || len(policies[ns.Name]) > 0) {
			leaving = append(leaving, ns)
		}
	}
	r.reportOptOuts(mesh, st, nsList.Items, decisions)
	leavingNames := make([]string, 0, len(leaving))
	for _, ns := range leaving {
		leavingNames = append(leavingNames, ns.Name)
	}
	// In ambient, a namespace whose NetworkPolicies would cut off its
	// captured Pods is not enrolled (an enrolled one is only reported).
	var gates map[string]enroll.AmbientGate
	if !holdOnly && mesh.Spec.DataPlane == v1alpha1.DataPlaneAmbient {
		var readErr error
		// A failed read holds the namespaces (the gates say so) and fails
		// the pass, so it is retried soon and EnrollmentFailed says why.
		if gates, readErr = r.ambientGates(ctx, mesh, cp, nsList.Items, decisions, policies); readErr != nil {
			errs = append(errs, readErr)
		}
	}
	var ambientBlocked, ambientUnreadable []string
	for _, name := range slices.Sorted(maps.Keys(gates)) {
		g := gates[name]
		if g.Blocked != "" {
			ambientBlocked = append(ambientBlocked, g.Blocked)
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
			ambientUnreadable = append(ambientUnreadable, g.Unreadable)
		}
	}
	// A namespace held only by its NetworkPolicies is announced
	// (mesh-state=joining): a workload operator, the fleet operator among
	// them, opens HBONE and the probe address on seeing it, and the next
	// pass, woken by the changed policies, enrolls it. Capture never comes
	// before the policies admit it, and a fleet that admits HBONE only
	// where an enrollment is in effect is not left waiting for one.
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if g := gates[ns.Name]; ns.DeletionTimestamp != nil || !decisions[ns.Name].Enroll || !g.Hold || g.Blocked == "" || enroll.Paused(ns) {
			continue
		}
		if err := r.applyNamespaceLabels(ctx, ns, joiningLabels(ns)); err != nil {
			errs = append(errs, fmt.Errorf("announcing namespace %s for ambient: %w", ns.Name, err))
		}
	}
	// The namespaces to enroll (or, held, to relax), in name order.
	var todo []*corev1.Namespace
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if ns.DeletionTimestamp != nil || !decisions[ns.Name].Enroll || gates[ns.Name].Hold {
			continue
		}
		if holdOnly {
			// Not Ready: an enrolled namespace keeps its configuration; only
			// the break-glass may relax its mTLS.
			if !slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
				continue
			}
			enrolled = append(enrolled, ns.Name)
			if policies[ns.Name][policyKey(enroll.KindPeerAuthentication, enroll.PeerAuthenticationName)] == nil {
				continue
			}
		}
		todo = append(todo, ns)
	}
	if !holdOnly && len(todo) > 0 {
		if err := r.ensureNamedFinalizer(ctx, mesh, EnrollFinalizer); err != nil {
			return 0, err
		}
	}
	// Namespaces are enrolled concurrently: each one's writes depend only on
	// its own objects and on reads of its declared edges, and a dependant
	// that reads an edge mid-change only holds its STRICT back longer. The
	// leaving namespaces are still released after all of them (below).
	//
	// A namespace whose data-plane label goes on in this pass is looked at
	// again once every namespace's writes are done (cutOver): its Pods are
	// read as of its label apply, and by then the API server's watch cache
	// has usually passed every label of the pass, so the reads are answered
	// at once. Read right after each apply, every read waited for the next
	// progress notification of the cache (up to 100 ms while Pods do not
	// change; docs/benchmark.md).
	outcomes := make([]nsOutcome, len(todo))
	forEach(len(todo), enrollWorkers, func(i int) {
		ns := todo[i]
		res, step, err := r.enrollNamespace(ctx, mesh, cp, ns, decisions[ns.Name], policies[ns.Name], foreignPAs[ns.Name], now, !holdOnly, leavingNames)
		outcomes[i] = nsOutcome{res: res, err: err, cutover: step}
	})
	var second []int
	for i := range outcomes {
		if outcomes[i].err == nil && outcomes[i].cutover != nil {
			second = append(second, i)
		}
	}
	if names := cutoverNames(outcomes, second); wholeClusterPodList(len(names), len(nsList.Items)) {
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
		o.res, o.err = r.cutOver(ctx, mesh, cp, o.res, o.cutover, now, leavingNames)
	})
	for i, ns := range todo {
		d, res, err := decisions[ns.Name], outcomes[i].res, outcomes[i].err
		paused = append(paused, res.paused...)
		if enroll.Paused(ns) {
			paused = append(paused, "Namespace/"+ns.Name)
		}
		var conflict *enrollConflict
		if errors.As(err, &conflict) {
			conflicts = append(conflicts, fmt.Sprintf("%s %s/%s", conflict.err.Kind, conflict.err.Namespace, conflict.err.Name))
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.EventEnrollmentConflict), "Reconcile", "%s", err.Error())
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !holdOnly {
			enrolled = append(enrolled, ns.Name)
		}
		if res.migration != "" {
			migrating = append(migrating, res.migration)
		}
		if !slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventNamespaceEnrolled), "Reconcile",
				"Enrolled namespace %s (requested by %s) at %s mTLS.", ns.Name, d.Reason, strings.ToUpper(res.mode.Mode))
		}
		if res.mode.Mode == contract.MTLSPermissive {
			permissive = append(permissive, ns.Name)
			if !res.pending {
				heldPermissive = append(heldPermissive, fmt.Sprintf("%s (%s)", ns.Name, res.mode.Reason))
			}
		}
		if res.baselineWithheld {
			withheld = append(withheld, fmt.Sprintf("%s (%s)", ns.Name, res.mode.Reason))
		}
		if res.foreign != "" {
			foreign = append(foreign, res.foreign)
			if c := meta.FindStatusCondition(mesh.Status.Conditions, string(v1alpha1.ConditionMTLSCutover)); c == nil ||
				c.Reason != string(v1alpha1.ReasonForeignPeerAuthentication) || !strings.Contains(c.Message, res.foreign) {
				// Once, when it is first reported, not every pass.
				r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonForeignPeerAuthentication), "Reconcile",
					"%s is in force in enrolled namespace %s instead of %s: Istio applies the oldest namespace-wide PeerAuthentication. "+
						"The operator leaves it alone; delete it, or give it a selector, for the operator's mTLS to apply.",
					res.foreign, ns.Name, enroll.PeerAuthenticationName)
			}
		}
		pending = pending || res.pending
		switch {
		case res.pending && res.edgeHeld:
			waiting = append(waiting, fmt.Sprintf("%s (%s)", ns.Name, res.blocker))
		case res.pending:
			ownWaiting = true
			waiting = append(waiting, fmt.Sprintf("%s (Pod %s)", ns.Name, res.blocker))
		}
	}
	var unrelaxed []*corev1.Namespace
	for i, ns := range todo {
		if outcomes[i].err != nil {
			unrelaxed = append(unrelaxed, ns)
		}
	}
	for i, err := range r.releaseNamespaces(ctx, mesh, leaving, policies, unrelaxed) {
		ns := leaving[i]
		if err != nil {
			errs = append(errs, err)
		} else if slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventNamespaceReleased), "Reconcile",
				"Released namespace %s (%s): state labels, policies and data-plane label removed.", ns.Name, decisions[ns.Name].Reason)
		}
	}
	sort.Strings(enrolled)
	sort.Strings(permissive)
	sort.Strings(paused)
	st.next.EnrolledNamespaces, st.next.PermissiveNamespaces, st.next.PausedObjects = enrolled, permissive, paused

	ctrl.LoggerFrom(ctx).V(1).Info("enrollment", "holdOnly", holdOnly, "enrolled", len(enrolled), "permissive", len(permissive),
		"awaitingCutover", len(waiting), "migrating", len(migrating), "conflicts", len(conflicts), "baselineWithheld", len(withheld),
		"paused", len(paused), "errors", len(errs))
	wait := setEnrollmentConditions(st, mesh.Spec, enrollmentTally{
		holdOnly: holdOnly, waiting: waiting, ownWaiting: ownWaiting, heldPermissive: heldPermissive,
		migrating: migrating, conflicts: conflicts, withheld: withheld, foreign: foreign,
		ambientBlocked: ambientBlocked, ambientUnreadable: ambientUnreadable,
	})
	if pending && (wait == 0 || wait > convergingRecheck) {
		wait = convergingRecheck
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.EventEnrollmentFailed), "Reconcile", "%s", err.Error())
		return wait, err
	}
	return wait, nil
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

// enrollNamespace configures one enrolled namespace: its policies first
// (PeerAuthentication, isolation DENY, strict baseline), and only then the
// namespace labels, the data-plane label (with the enrollment request when
// spec.enrollNamespaces asks for it) together with the state labels that
// describe what is in place. A namespace is therefore never captured by the
// data plane without its configuration; when a policy cannot be applied
// because an object of its name belongs to someone else, what the operator
// applied there is rolled back (the data-plane label included) and the
// conflict is returned. When the data-plane label has just gone on and the
// namespace waits for its cutover, the step returned is the second look
// cutOver takes once the pass's other writes are done.
//
// With ready false (the control plane is not Ready) it changes only what
// relaxes mTLS: the PeerAuthentication may go PERMISSIVE (the baseline
// first) and the mtls state label follows; nothing else moves.
func (r *ServiceMeshReconciler) enrollNamespace(ctx context.Context, mesh *v1alpha1.ServiceMesh, cp *v1alpha1.ControlPlaneStatus,
	ns *corev1.Namespace, d enroll.Decision, live map[string]*unstructured.Unstructured, foreign []*unstructured.Unstructured, now time.Time, ready bool, leaving []string) (nsResult, *cutoverStep, error) {
	dp := mesh.Spec.DataPlane
	dpLabels := enroll.DataPlaneLabels(dp, cp.Revision)
	base := maps.Clone(dpLabels)
	if d.WriteRequest {
		base[labels.Mesh] = labels.MeshEnabled
	}
	owned := ownedLabels(ns)
	if !ready {
		// Held: what the operator applied stays, except what relaxes.
		base = map[string]string{}
		for k := range owned {
			if v, ok := ns.Labels[k]; ok && !slices.Contains(contract.StateKeys(), k) {
				base[k] = v
			}
		}
	}
	// The cutover signal is read from Pods only once the data-plane label
	// is on the namespace: Pods listed before it may have been created
	// without injection or capture that is about to apply.
	inPlace := ready && hasLabels(ns.Labels, dpLabels)

	// What the mesh-dataplane state label may claim, read before the labels
	// change: see stateDataPlane.
	stateDP, heldBy := dp, ""
	if ready {
		var err error
		if stateDP, heldBy, err = r.stateDataPlane(ctx, mesh, ns); err != nil {
			return nsResult{}, nil, err
		}
	}
	var workloads workloadsCheck
	if inPlace {
		workloads = r.readWorkloads(ctx, dp, ns)
	}
	res, mtlsInForce, err := r.applyPolicies(ctx, mesh, cp, ns, live, foreign, now, ready, workloads, leaving)
	if err != nil {
		var conflict *apply.ConflictError
		if errors.As(err, &conflict) && ready {
			if rerr := r.rollbackNamespace(ctx, mesh, ns, d); rerr != nil {
				return res, nil, errors.Join(err, rerr)
			}
			return res, nil, &enrollConflict{namespace: ns.Name, err: conflict}
		}
		return res, nil, err
	}
	if !ready {
		// Held: the mtls state label follows the PeerAuthentication.
		step := maps.Clone(base)
		for _, k := range contract.StateKeys() {
			if v, ok := ns.Labels[k]; ok && owned[k] {
				step[k] = v
			}
		}
		if _, ok := step[labels.MeshMTLS]; ok {
			step[labels.MeshMTLS] = mtlsInForce
		}
		return res, nil, r.applyEnrolledLabels(ctx, ns, step)
	}
	if err := r.applyEnrollmentLabels(ctx, mesh, cp, ns, base, stateDP, mtlsInForce); err != nil {
		return res, nil, err
	}
	if heldBy != "" {
		res.migration = fmt.Sprintf("%s: relabelled for %s, PERMISSIVE; its state label says %s until istio-cni releases Pod %s",
			ns.Name, dp, stateDP, heldBy)
	}
	if inPlace || !res.pending {
		return res, nil, nil
	}
	return res, &cutoverStep{ns: ns, base: base, foreign: foreign, stateDP: stateDP, heldBy: heldBy, migration: res.migration}, nil
}

// cutOver is the second look at a namespace whose data-plane label went on
// in this pass: its Pods now tell the truth, so a namespace that is ready
// for STRICT does not wait for the next poll.
func (r *ServiceMeshReconciler) cutOver(ctx context.Context, mesh *v1alpha1.ServiceMesh, cp *v1alpha1.ControlPlaneStatus,
	first nsResult, step *cutoverStep, now time.Time, leaving []string) (nsResult, error) {
	workloads := step.workloads
	if workloads == nil {
		workloads = r.readWorkloads(ctx, mesh.Spec.DataPlane, step.ns)
	}
	res, mtlsInForce, err := r.applyPolicies(ctx, mesh, cp, step.ns, first.policies, step.foreign, now, true, workloads, leaving)
	if err != nil {
		return res, err
	}
	if step.heldBy != "" {
		res.migration = step.migration
	}
	return res, r.applyEnrollmentLabels(ctx, mesh, cp, step.ns, step.base, step.stateDP, mtlsInForce)
}

// stateDataPlane is the data plane the namespace's mesh-dataplane state
// label may claim: spec.dataPlane, except that a namespace leaving ambient
// keeps saying ambient while istio-cni still redirects one of its running
// Pods to ztunnel (named in the second result). The label tells workload
// operators what is in place, and a fleet closes its HBONE port when it
// reads sidecar: that must not happen while ztunnel still delivers there.
func (r *ServiceMeshReconciler) stateDataPlane(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns *corev1.Namespace) (v1alpha1.DataPlane, string, error) {
	dp := mesh.Spec.DataPlane
	if dp == v1alpha1.DataPlaneAmbient || enroll.AppliedDataPlane(ns.Labels, ownedLabels(ns)) != v1alpha1.DataPlaneAmbient {
		return dp, "", nil
	}
	pods := &corev1.PodList{}
	if err := r.Reader.List(ctx, pods, client.InNamespace(ns.Name)); err != nil {
		return dp, "", fmt.Errorf("listing Pods in %s: %w", ns.Name, err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; podmesh.Running(p) && podmesh.Redirected(p) {
			return v1alpha1.DataPlaneAmbient, p.Name, nil
		}
	}
	return dp, "", nil
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

// applyEnrollmentLabels applies the namespace's labels: base (data plane,
// request) and the state labels describing what is in force.
func (r *ServiceMeshReconciler) applyEnrollmentLabels(ctx context.Context, mesh *v1alpha1.ServiceMesh, cp *v1alpha1.ControlPlaneStatus,
	ns *corev1.Namespace, base map[string]string, stateDP v1alpha1.DataPlane, mtlsInForce string) error {
	sl, err := contract.Enrollment{DataPlane: contract.DataPlane(stateDP), MTLS: mtlsInForce, Isolation: string(mesh.Spec.Isolation),
		ControlPlane: cp.Namespace}.StateLabels()
	if err != nil {
		return err
	}
	want := maps.Clone(base)
	maps.Copy(want, sl)
	return r.applyEnrolledLabels(ctx, ns, want)
}

// ownPolicyKeys are the operator's per-namespace policies, in the order
// they are removed: the baseline first (it would drop plaintext without
// STRICT), the PeerAuthentication last.
func ownPolicyKeys() []string {
	return []string{policyKey(enroll.KindAuthorizationPolicy, enroll.BaselinePolicyName),
		policyKey(enroll.KindAuthorizationPolicy, enroll.IsolationPolicyName),
		policyKey(enroll.KindPeerAuthentication, enroll.PeerAuthenticationName)}
}

// rollbackNamespace undoes a partial enrollment after a conflict: the
// state labels and the data-plane label go first (nothing is captured
// without configuration), then the operator's own policies of the
// namespace; objects of others are left alone. Only the enrollment request
// the operator wrote for spec.enrollNamespaces stays: it is still asked for.
func (r *ServiceMeshReconciler) rollbackNamespace(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns *corev1.Namespace, d enroll.Decision) error {
	keep := map[string]string{}
	if d.WriteRequest {
		keep[labels.Mesh] = labels.MeshEnabled
	}
	if err := r.applyNamespaceLabels(ctx, ns, keep); err != nil {
		return err
	}
	for _, k := range ownPolicyKeys() {
		kind, name, _ := strings.Cut(k, "/")
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind))
		u.SetNamespace(ns.Name)
		u.SetName(name)
		var conflict *apply.ConflictError
		if _, err := r.applier().Delete(ctx, u, mesh); err != nil && !errors.As(err, &conflict) {
			return err
		}
	}
	return nil
}

// applyPolicies applies the namespace's policies and returns the mode in
// force. workloads reads the cutover signal (nil: the Pods are not to be
// looked at yet). With ready false only relaxing changes are made.
func (r *ServiceMeshReconciler) applyPolicies(ctx context.Context, mesh *v1alpha1.ServiceMesh, cp *v1alpha1.ControlPlaneStatus,
	ns *corev1.Namespace, live map[string]*unstructured.Unstructured, foreign []*unstructured.Unstructured, now time.Time, ready bool, workloads workloadsCheck, leaving []string) (nsResult, string, error) {
	evaluate := workloads != nil
	res := nsResult{policies: maps.Clone(live)}
	if res.policies == nil {
		res.policies = map[string]*unstructured.Unstructured{}
	}
	dp := mesh.Spec.DataPlane
	// mTLS, PERMISSIVE until the workloads show they can take STRICT.
	owner := enroll.Owner(mesh)
	pa := live[policyKey(enroll.KindPeerAuthentication, enroll.PeerAuthenticationName)]
	baseline := live[policyKey(enroll.KindAuthorizationPolicy, enroll.BaselinePolicyName)]
	strictReady := ""
	if pa != nil {
		strictReady = pa.GetAnnotations()[labels.MeshStrictReady]
	}
	// A change of data plane: the namespace was configured for another one.
	// Its cutover, and the edges accepted with it, no longer count: STRICT
	// returns only once its workloads are meshed the new way.
	applied := enroll.AppliedDataPlane(ns.Labels, ownedLabels(ns))
	migrating := applied != "" && applied != dp
	migratingFrom := ""
	if pa != nil {
		migratingFrom = pa.GetAnnotations()[labels.MeshMigratingFrom]
	}
	if migrating {
		strictReady, migratingFrom = "", string(applied)
	}
	if strictReady == "" && evaluate {
		blocker, err := workloads()
		if err != nil {
			return res, "", err
		}
		if blocker == "" {
			strictReady = now.UTC().Format(time.RFC3339)
		}
		res.blocker = blocker
	}
	liveMode := ""
	if pa != nil {
		liveMode = enroll.ModeOf(pa)
	}
	// Declared edges hold STRICT back until their Pods are meshed: STRICT
	// would reject the plaintext calls they were declared for. Only edges
	// not yet accepted at a cutover are looked at, so a plaintext Pod that
	// appears later in an accepted edge cannot switch STRICT off.
	state, _ := contract.Parse(ns.Labels)
	accepted := enroll.AcceptedEdges(pa, state.Edges)
	if migrating {
		accepted = nil
	}
	// An edge namespace leaving the mesh is accepted no more: its Pods
	// are about to speak plaintext.
	accepted, leavingEdge := enroll.WithoutLeaving(accepted, state.Edges, leaving)
	newEdges := enroll.NewEdges(state.Edges, accepted)
	edgeHolds := false
	if leavingEdge != "" {
		// Relaxing, so even while the control plane is not Ready (the
		// leaving namespace is released in that reconcile too).
		edgeHolds = true
		res.blocker = fmt.Sprintf("edge %s: leaving the mesh", leavingEdge)
	} else if ready && len(newEdges) > 0 {
		if !evaluate {
			edgeHolds = true // looked at once the data-plane label is on
		} else {
			edgePods := map[string][]corev1.Pod{}
			redirecting := map[string]bool{}
			for _, e := range newEdges {
				pods := &corev1.PodList{}
				if err := r.Reader.List(ctx, pods, client.InNamespace(e)); err != nil {
					return res, "", fmt.Errorf("listing Pods in %s (a declared edge of %s): %w", e, ns.Name, err)
				}
				edgePods[e] = pods.Items
				edgeNS := &corev1.Namespace{}
				if err := r.Reader.Get(ctx, client.ObjectKey{Name: e}, edgeNS); client.IgnoreNotFound(err) != nil {
					return res, "", fmt.Errorf("reading namespace %s (a declared edge of %s): %w", e, ns.Name, err)
				}
				redirecting[e] = edgeNS.Labels[labels.IstioDataPlaneMode] == "ambient"
			}
			if e, who := enroll.EdgeHolder(dp, newEdges, edgePods, redirecting); e != "" {
				edgeHolds = true
				if strictReady != "" {
					res.blocker = fmt.Sprintf("edge %s: Pod %s", e, who)
				}
			}
		}
	}
	res.mode = enroll.DecideMTLS(enroll.MTLSInputs{Spec: mesh.Spec.MTLS, Now: now, Ready: ready, Live: liveMode, CutOver: strictReady != "",
		EdgeHolds: edgeHolds, Migrating: migrating})
	res.pending = ready && (res.mode.Reason == enroll.MTLSAwaitingCutover || res.mode.Reason == enroll.MTLSAwaitingEdge || res.mode.Reason == enroll.MTLSMigrating)
	res.edgeHeld = res.mode.Reason == enroll.MTLSAwaitingEdge
	if ready && res.mode.Mode == contract.MTLSStrict {
		// Every declared edge was meshed (or accepted before) now, and a
		// migration is over for this namespace.
		accepted = slices.Clone(state.Edges)
		migratingFrom = ""
	}
	switch {
	case migrating && ready:
		res.migration = fmt.Sprintf("%s: PERMISSIVE, moving to %s now", ns.Name, dp)
	case migrating:
		res.migration = fmt.Sprintf("%s: PERMISSIVE, moves to %s once the control plane is Ready", ns.Name, dp)
	case migratingFrom != "" && res.mode.Mode != contract.MTLSStrict:
		who := res.blocker
		switch {
		case !ready:
			who = "the control plane to be Ready"
		case who == "":
			who = "the next check"
		case !res.edgeHeld:
			who = "Pod " + who
		}
		res.migration = fmt.Sprintf("%s: on %s, STRICT once its workloads are meshed that way (waiting for: %s)", ns.Name, dp, who)
	}
	mtlsInForce := res.mode.Mode
	paPaused := pa != nil && enroll.Paused(pa)
	if paPaused {
		res.paused = append(res.paused, fmt.Sprintf("%s/%s/%s", enroll.KindPeerAuthentication, ns.Name, pa.GetName()))
		mtlsInForce = enroll.ModeOf(pa)
		if mtlsInForce != res.mode.Mode {
			res.mode.Reason = enroll.MTLSPaused
		}
		res.mode.Mode = mtlsInForce
	}
	// Istio applies the oldest namespace-wide PeerAuthentication: when that
	// is someone else's, its mode is the one in force, whatever mesh-mtls
	// says. Theirs is never touched; ours is still applied, to take over
	// once theirs is gone, and the baseline follows the mode in force.
	if f := enroll.ForeignPeerAuthentication(pa, foreign); f != nil {
		mtlsInForce = enroll.ModeOf(f)
		res.mode = enroll.MTLSDecision{Mode: mtlsInForce, Reason: enroll.MTLSForeign}
		res.foreign = fmt.Sprintf("%s %s/%s (%s)", enroll.KindPeerAuthentication, ns.Name, f.GetName(), strings.ToUpper(mtlsInForce))
	}
	// The strict baseline exists only while the mode in force is STRICT:
	// it goes before the PeerAuthentication turns PERMISSIVE and comes
	// after it is STRICT, so it never drops plaintext that PERMISSIVE is
	// meant to let through.
	want := enroll.PolicySet(enroll.PolicyInputs{
		Namespace: ns.Name, Isolation: mesh.Spec.Isolation, Mode: mtlsInForce,
		StrictReady: strictReady, AcceptedEdges: accepted, MigratingFrom: migratingFrom,
		// Isolation admits the control plane and the edges workload
		// operators declared.
		Allowed: enroll.AllowedSources(ns.Name, []string{cp.Namespace}, state.Edges),
		Owner:   owner,
	})
	wantBaseline := want.Baseline
	res.baselineWithheld = mesh.Spec.Isolation == v1alpha1.IsolationStrict && wantBaseline == nil
	baselinePaused := baseline != nil && enroll.Paused(baseline)
	if baselinePaused {
		res.paused = append(res.paused, fmt.Sprintf("%s/%s/%s", enroll.KindAuthorizationPolicy, ns.Name, baseline.GetName()))
	} else if wantBaseline == nil && baseline != nil {
		deleted, err := r.applier().Delete(ctx, baseline, mesh)
		if err != nil {
			return res, mtlsInForce, err
		}
		delete(res.policies, policyKey(enroll.KindAuthorizationPolicy, enroll.BaselinePolicyName))
		if deleted {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventBaselineWithdrawn), "Reconcile",
				"Removed AuthorizationPolicy %s/%s: %s (%s mTLS in force, %s).", ns.Name, enroll.BaselinePolicyName,
				baselineWhy(mesh.Spec.Isolation), strings.ToUpper(mtlsInForce), res.mode.Reason)
		}
	}
	if !paPaused {
		_, after, err := r.applyPolicy(ctx, mesh, pa, want.PeerAuthentication)
		if err != nil {
			return res, mtlsInForce, err
		}
		res.policies[policyKey(enroll.KindPeerAuthentication, enroll.PeerAuthenticationName)] = after
	}
	if !ready {
		// Held: isolation and the baseline stay as they are (withdrawing the
		// baseline above was the only change allowed).
		return res, mtlsInForce, nil
	}

	// Isolation, admitting the edges workload operators declared.
	ap := live[policyKey(enroll.KindAuthorizationPolicy, enroll.IsolationPolicyName)]
	desired := want.Isolation
	switch {
	case ap != nil && enroll.Paused(ap):
		res.paused = append(res.paused, fmt.Sprintf("%s/%s/%s", enroll.KindAuthorizationPolicy, ns.Name, ap.GetName()))
	case desired == nil && ap != nil:
		if _, err := r.applier().Delete(ctx, ap, mesh); err != nil {
			return res, mtlsInForce, err
		}
		delete(res.policies, policyKey(enroll.KindAuthorizationPolicy, enroll.IsolationPolicyName))
	case desired != nil:
		_, after, err := r.applyPolicy(ctx, mesh, ap, desired)
		if err != nil {
			return res, mtlsInForce, err
		}
		res.policies[policyKey(enroll.KindAuthorizationPolicy, enroll.IsolationPolicyName)] = after
	}

	// Isolation strict's baseline, once STRICT is in force.
	if wantBaseline != nil && !baselinePaused {
		result, after, err := r.applyPolicy(ctx, mesh, baseline, wantBaseline)
		if err != nil {
			return res, mtlsInForce, err
		}
		res.policies[policyKey(enroll.KindAuthorizationPolicy, enroll.BaselinePolicyName)] = after
		if result == apply.Created {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventBaselineApplied), "Reconcile",
				"Applied the allow-nothing AuthorizationPolicy %s/%s (isolation strict, STRICT mTLS in force): workloads admit only what their own ALLOW policies admit.",
				ns.Name, enroll.BaselinePolicyName)
		}
	}
	return res, mtlsInForce, nil
}

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
// one stops enforcing (relaxNamespace: state labels, then policies), then
// each one's Pods are let go (its data-plane label and any request the
// operator wrote). A namespace that declared another as an edge is thus
// never STRICT while that edge's Pods speak plaintext, whatever the names
// sort like and in a cycle of edges too; a namespace that stays and
// declared one of them relaxed earlier in the pass (enroll.WithoutLeaving).
// unrelaxed are the namespaces outside leaving that may still be STRICT
// (their pass failed): like a leaving namespace whose first round failed,
// they keep their declared edges' data-plane labels on until a later pass.
// The result holds each leaving namespace's error (nil: released).
func (r *ServiceMeshReconciler) releaseNamespaces(ctx context.Context, mesh *v1alpha1.ServiceMesh, leaving []*corev1.Namespace,
	policies map[string]map[string]*unstructured.Unstructured, unrelaxed []*corev1.Namespace) []error {
	errs := make([]error, len(leaving))
	held := map[string]string{} // edge → a namespace that declared it and may still be STRICT
	hold := func(ns *corev1.Namespace) {
		state, _ := contract.Parse(ns.Labels)
		for _, e := range state.Edges {
			held[e] = ns.Name
		}
	}
	for _, ns := range unrelaxed {
		hold(ns)
	}
	for i, ns := range leaving {
		if errs[i] = r.relaxNamespace(ctx, mesh, ns, policies[ns.Name]); errs[i] != nil {
			hold(ns)
		}
	}
	for i, ns := range leaving {
		if errs[i] != nil {
			continue
		}
		if dependant, ok := held[ns.Name]; ok {
			errs[i] = fmt.Errorf("namespace %s keeps its data-plane label for now: %s, which declares it as an edge, may still be STRICT", ns.Name, dependant)
			continue
		}
		errs[i] = r.applyNamespaceLabels(ctx, ns, map[string]string{})
	}
	return errs
}

// relaxNamespace is the first round of leaving the mesh, in the reverse
// order of enrolling: the state labels go first (workload operators stop
// relying on the mesh), then the policies (the namespace stops enforcing
// mTLS and isolation). The data-plane label stays, so its Pods keep their
// mTLS. Labels someone else also holds stay.
func (r *ServiceMeshReconciler) relaxNamespace(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns *corev1.Namespace, live map[string]*unstructured.Unstructured) error {
	owned := ownedLabels(ns)
	keep := map[string]string{}
	for k := range owned {
		if v, ok := ns.Labels[k]; ok && !slices.Contains(contract.StateKeys(), k) && k != labels.Mesh {
			keep[k] = v
		}
	}
	if len(keep) != len(owned) {
		if err := r.applyNamespaceLabels(ctx, ns, keep); err != nil {
			return err
		}
	}
	// The baseline before the PeerAuthentication (without it the namespace
	// falls back to the mesh default, which may accept plaintext the
	// baseline would drop), then any other policy of ours.
	keys := slices.Sorted(maps.Keys(live))
	first := []string{policyKey(enroll.KindAuthorizationPolicy, enroll.BaselinePolicyName),
		policyKey(enroll.KindAuthorizationPolicy, enroll.IsolationPolicyName)}
	last := policyKey(enroll.KindPeerAuthentication, enroll.PeerAuthenticationName)
	order := slices.Clone(first)
	for _, k := range keys {
		if !slices.Contains(first, k) && k != last {
			order = append(order, k)
		}
	}
	order = append(order, last)
	for _, k := range order {
		if u := live[k]; u != nil {
			if _, err := r.applier().Delete(ctx, u, mesh); err != nil {
				return err
			}
		}
	}
	return nil
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
		if ns := &nsList.Items[i]; len(ownedLabels(ns)) > 0 || len(policies[ns.Name]) > 0 {
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
