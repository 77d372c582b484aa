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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// EnrollFinalizer holds a ServiceMesh that has enrolled namespaces until it
// has stripped its labels from them and deleted its policies.
const EnrollFinalizer = labels.MeshGroup + "/enrollment"

// ConditionMTLSCutover is True once every enrolled namespace has passed
// the PERMISSIVE→STRICT cutover; False lists those still waiting and the
// Pod holding each back.
const ConditionMTLSCutover = "MTLSCutover"

func cutoverSignal(dp v1alpha1.DataPlane) string {
	if dp == v1alpha1.DataPlaneAmbient {
		return "captured by ztunnel: annotation " + labels.IstioAmbientRedirection + "=enabled"
	}
	return "an " + enroll.ProxyContainer + " sidecar"
}

func baselineWhy(iso v1alpha1.Isolation) string {
	if iso != v1alpha1.IsolationStrict {
		return "isolation is " + string(iso)
	}
	return "an allow-nothing ALLOW would drop plaintext"
}

// ConditionMaintenanceWindow is True while spec.mtls.maintenanceUntil holds
// enrolled namespaces at PERMISSIVE.
const ConditionMaintenanceWindow = "MaintenanceWindow"

// ConditionStrictIsolation exists only while spec.isolation is strict: True
// when every enrolled namespace has its allow-nothing baseline in force,
// False while some are at PERMISSIVE mTLS and the baseline is withheld there
// (it would drop plaintext).
const ConditionStrictIsolation = "StrictIsolation"

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=security.istio.io,resources=peerauthentications;authorizationpolicies,verbs=get;list;create;patch;delete

// meshReady: the ServiceMesh is Ready for its current generation, the only
// state in which namespaces are enrolled or STRICT applied.
func meshReady(mesh *v1alpha1.ServiceMesh, st *status) bool {
	c := meta.FindStatusCondition(st.next.Conditions, ConditionReady)
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
// holds through server-side apply.
func ownedLabels(ns metav1.Object) map[string]bool {
	return labelsHeld(ns, func(mf metav1.ManagedFieldsEntry) bool {
		return mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply
	})
}

// requestLabels are the namespace's labels as enrollment reads them: an
// enrollment request that only the operator itself holds (it wrote it for
// spec.enrollNamespaces) is not a request of anyone else, so it does not
// keep the namespace enrolled once the name leaves the list.
func requestLabels(ns *corev1.Namespace) map[string]string {
	if ns.Labels[labels.Mesh] != labels.MeshEnabled || !ownedLabels(ns)[labels.Mesh] {
		return ns.Labels
	}
	others := labelsHeld(ns, func(mf metav1.ManagedFieldsEntry) bool {
		return mf.Manager != FieldManager || mf.Operation != metav1.ManagedFieldsOperationApply
	})
	if others[labels.Mesh] {
		return ns.Labels
	}
	out := maps.Clone(ns.Labels)
	delete(out, labels.Mesh)
	return out
}

// labelsHeld are the label keys held by the managedFields entries that match.
func labelsHeld(ns metav1.Object, match func(metav1.ManagedFieldsEntry) bool) map[string]bool {
	out := map[string]bool{}
	for _, mf := range ns.GetManagedFields() {
		if !match(mf) || mf.FieldsV1 == nil {
			continue
		}
		var f struct {
			Metadata struct {
				Labels map[string]any `json:"f:labels"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &f) != nil {
			continue
		}
		for k := range f.Metadata.Labels {
			if key, ok := strings.CutPrefix(k, "f:"); ok {
				out[key] = true
			}
		}
	}
	return out
}

// applyNamespaceLabels makes want exactly the set of labels the operator
// applies on ns (server-side apply: keys it stops applying are removed
// unless someone else also holds them). It writes nothing when that is
// already so.
func (r *ServiceMeshReconciler) applyNamespaceLabels(ctx context.Context, ns *corev1.Namespace, want map[string]string) error {
	owned := ownedLabels(ns)
	same := len(owned) == len(want)
	for k, v := range want {
		same = same && owned[k] && ns.Labels[k] == v
	}
	if same {
		return nil
	}
	ac := corev1ac.Namespace(ns.Name)
	if len(want) > 0 {
		ac.WithLabels(want)
	}
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying labels on namespace %s: %w", ns.Name, err)
	}
	// Read back what the API server made of it (labels and managedFields)
	// for the next apply of this reconcile.
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
		return fmt.Errorf("reading namespace %s: %w", ns.Name, err)
	}
	return nil
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
// policyKey. A cluster without the Istio security API has none.
func (r *ServiceMeshReconciler) managedPolicies(ctx context.Context, mesh *v1alpha1.ServiceMesh) (map[string]map[string]*unstructured.Unstructured, error) {
	out := map[string]map[string]*unstructured.Unstructured{}
	for _, kind := range []string{enroll.KindPeerAuthentication, enroll.KindAuthorizationPolicy} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind + "List"))
		err := r.Reader.List(ctx, list, client.MatchingLabels{labels.ManagedBy: enroll.ManagedBy})
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %ss: %w", kind, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			if !controlledBy(u, mesh) {
				continue
			}
			if out[u.GetNamespace()] == nil {
				out[u.GetNamespace()] = map[string]*unstructured.Unstructured{}
			}
			out[u.GetNamespace()][policyKey(kind, u.GetName())] = u
		}
	}
	return out, nil
}

// nsResult is what enrolling one namespace came to.
type nsResult struct {
	mode    enroll.MTLSDecision
	pending bool   // still waiting for the STRICT cutover signal
	blocker string // the first Pod that holds the cutover back
	paused  []string
	// baselineWithheld: isolation strict, but the mode in force is
	// PERMISSIVE, so the allow-nothing baseline is absent.
	baselineWithheld bool
}

// reconcileEnrollment enrolls the namespaces asked for and releases the
// others. It enrolls only while meshReady; with holdOnly (the mesh is not
// Ready) it only releases namespaces that are no longer wanted (an opt-out
// wins at any time; releasing moves towards plaintext, which is always
// safe) and leaves the enrolled ones as they are. It returns how soon to
// look again: at the end of a maintenance window, or soon while a cutover
// is pending.
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
		// mode external: the control plane is not visible; Istio's
		// conventional namespace stands for it.
		c := v1alpha1.ControlPlaneStatus{}
		if cp != nil {
			c = *cp
		}
		c.Namespace = sail.IstioNamespace
		cp = &c
	}
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList); err != nil {
		return 0, fmt.Errorf("listing namespaces: %w", err)
	}
	policies, err := r.managedPolicies(ctx, mesh)
	if err != nil {
		return 0, err
	}
	protected := r.protectedNamespaces(cp)
	var enrolled, permissive, paused, withheld []string
	var errs []error
	pending := false
	var waiting []string
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if ns.DeletionTimestamp != nil {
			continue
		}
		d := enroll.Decide(ns.Name, requestLabels(ns), slices.Contains(mesh.Spec.EnrollNamespaces, ns.Name), protected)
		if !d.Enroll {
			if len(ownedLabels(ns)) > 0 || len(policies[ns.Name]) > 0 {
				if err := r.leaveNamespace(ctx, mesh, ns, policies[ns.Name]); err != nil {
					errs = append(errs, err)
				} else if slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
					r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, "NamespaceReleased", "Reconcile",
						"Released namespace %s (%s): state labels, policies and data-plane label removed.", ns.Name, d.Reason)
				}
			}
			continue
		}
		if holdOnly {
			// Not Ready: an enrolled namespace stays as it is.
			if slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
				enrolled = append(enrolled, ns.Name)
			}
			continue
		}
		if err := r.ensureNamedFinalizer(ctx, mesh, EnrollFinalizer); err != nil {
			return 0, err
		}
		res, err := r.enrollNamespace(ctx, mesh, cp, ns, d, policies[ns.Name], now)
		paused = append(paused, res.paused...)
		if enroll.Paused(ns) {
			paused = append(paused, "Namespace/"+ns.Name)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		enrolled = append(enrolled, ns.Name)
		if !slices.Contains(mesh.Status.EnrolledNamespaces, ns.Name) {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, "NamespaceEnrolled", "Reconcile",
				"Enrolled namespace %s (requested by %s) at %s mTLS.", ns.Name, d.Reason, strings.ToUpper(res.mode.Mode))
		}
		if res.mode.Mode == contract.MTLSPermissive {
			permissive = append(permissive, ns.Name)
		}
		if res.baselineWithheld {
			withheld = append(withheld, fmt.Sprintf("%s (%s)", ns.Name, res.mode.Reason))
		}
		pending = pending || res.pending
		if res.pending {
			waiting = append(waiting, fmt.Sprintf("%s (Pod %s)", ns.Name, res.blocker))
		}
	}
	sort.Strings(enrolled)
	sort.Strings(permissive)
	sort.Strings(paused)
	if holdOnly {
		st.next.EnrolledNamespaces = enrolled
		if len(errs) > 0 {
			return 0, errors.Join(errs...)
		}
		return 0, nil
	}
	st.next.EnrolledNamespaces, st.next.PermissiveNamespaces, st.next.PausedObjects = enrolled, permissive, paused

	sort.Strings(waiting)
	switch {
	case len(waiting) > 0:
		if len(waiting) > 5 {
			waiting = append(waiting[:5], fmt.Sprintf("and %d more", len(waiting)-5))
		}
		st.set(ConditionMTLSCutover, metav1.ConditionFalse, "AwaitingCutover", fmt.Sprintf(
			"Held at PERMISSIVE until every running Pod can take STRICT mTLS (%s); roll these workloads into the mesh: %s.",
			cutoverSignal(mesh.Spec.DataPlane), strings.Join(waiting, ", ")))
	default:
		st.set(ConditionMTLSCutover, metav1.ConditionTrue, "CutOver", "Every enrolled namespace has passed the PERMISSIVE→STRICT cutover.")
	}

	sort.Strings(withheld)
	switch {
	case mesh.Spec.Isolation != v1alpha1.IsolationStrict:
		meta.RemoveStatusCondition(&st.next.Conditions, ConditionStrictIsolation)
	case len(withheld) > 0:
		if len(withheld) > 5 {
			withheld = append(withheld[:5], fmt.Sprintf("and %d more", len(withheld)-5))
		}
		st.set(ConditionStrictIsolation, metav1.ConditionFalse, "BaselineWithheld", fmt.Sprintf(
			"The allow-nothing baseline %s exists only at STRICT mTLS (it would drop plaintext); these namespaces are at PERMISSIVE and have namespace isolation only: %s.",
			enroll.BaselinePolicyName, strings.Join(withheld, ", ")))
	default:
		st.set(ConditionStrictIsolation, metav1.ConditionTrue, "BaselineInForce", fmt.Sprintf(
			"Every enrolled namespace is STRICT with the allow-nothing baseline %s: a workload admits only what its own ALLOW policies admit.",
			enroll.BaselinePolicyName))
	}

	var wait time.Duration
	st.next.MaintenanceUntil = nil
	switch open, left := enroll.Window(mesh.Spec.MTLS, now); {
	case open:
		st.next.MaintenanceUntil = mesh.Spec.MTLS.MaintenanceUntil.DeepCopy()
		st.set(ConditionMaintenanceWindow, metav1.ConditionTrue, "Open", fmt.Sprintf(
			"spec.mtls.maintenanceUntil holds enrolled namespaces at PERMISSIVE until %s; STRICT is restored then without further action.",
			mesh.Spec.MTLS.MaintenanceUntil.UTC().Format(time.RFC3339)))
		wait = left
	case mesh.Spec.MTLS.MaintenanceUntil != nil:
		st.set(ConditionMaintenanceWindow, metav1.ConditionFalse, "Ended", fmt.Sprintf(
			"The maintenance window ended at %s; STRICT is restored where the workloads are ready for it.",
			mesh.Spec.MTLS.MaintenanceUntil.UTC().Format(time.RFC3339)))
	default:
		st.set(ConditionMaintenanceWindow, metav1.ConditionFalse, "NoWindow", "No maintenance window is set.")
	}
	if pending && (wait == 0 || wait > convergingRecheck) {
		wait = convergingRecheck
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, "EnrollmentFailed", "Reconcile", "%s", err.Error())
		return wait, err
	}
	return wait, nil
}

// enrollNamespace applies, in order: the data-plane label (with the
// enrollment request when spec.enrollNamespaces asks for it), the
// PeerAuthentication, the isolation policy, and only then the state labels
// that describe them.
func (r *ServiceMeshReconciler) enrollNamespace(ctx context.Context, mesh *v1alpha1.ServiceMesh, cp *v1alpha1.ControlPlaneStatus,
	ns *corev1.Namespace, d enroll.Decision, live map[string]*unstructured.Unstructured, now time.Time) (nsResult, error) {
	var res nsResult
	dp := mesh.Spec.DataPlane
	base := enroll.DataPlaneLabels(dp, cp.Revision)
	if d.WriteRequest {
		base[labels.Mesh] = labels.MeshEnabled
	}
	// Step 1: the data plane. State labels we already wrote stay as they
	// are until what they will claim is in place.
	owned := ownedLabels(ns)
	step1 := maps.Clone(base)
	for _, k := range contract.StateKeys() {
		if v, ok := ns.Labels[k]; ok && owned[k] {
			step1[k] = v
		}
	}
	if err := r.applyEnrolledLabels(ctx, ns, step1); err != nil {
		return res, err
	}

	// Step 2: mTLS, PERMISSIVE until the workloads show they can take STRICT.
	owner := enroll.Owner(mesh)
	pa := live[policyKey(enroll.KindPeerAuthentication, enroll.PeerAuthenticationName)]
	baseline := live[policyKey(enroll.KindAuthorizationPolicy, enroll.BaselinePolicyName)]
	strictReady := ""
	if pa != nil {
		strictReady = pa.GetAnnotations()[labels.MeshStrictReady]
	}
	if strictReady == "" {
		pods := &corev1.PodList{}
		if err := r.Reader.List(ctx, pods, client.InNamespace(ns.Name)); err != nil {
			return res, fmt.Errorf("listing Pods in %s: %w", ns.Name, err)
		}
		ok, blocker := enroll.WorkloadsReady(dp, pods.Items)
		if ok {
			strictReady = now.UTC().Format(time.RFC3339)
		}
		res.blocker = blocker
	}
	res.mode = enroll.MTLSMode(mesh.Spec.MTLS, now, strictReady != "")
	res.pending = strictReady == "" && mesh.Spec.MTLS.Mode != v1alpha1.MTLSPermissive
	mtlsInForce := res.mode.Mode
	paPaused := pa != nil && enroll.Paused(pa)
	if paPaused {
		res.paused = append(res.paused, fmt.Sprintf("%s/%s/%s", enroll.KindPeerAuthentication, ns.Name, pa.GetName()))
		mtlsInForce = enroll.ModeOf(pa)
		if mtlsInForce != res.mode.Mode {
			res.mode.Reason = "Paused" // the paused policy, not the decision, is in force
		}
		res.mode.Mode = mtlsInForce
	}
	// The strict baseline exists only while the mode in force is STRICT:
	// it goes before the PeerAuthentication turns PERMISSIVE and comes
	// after it is STRICT, so it never drops plaintext that PERMISSIVE is
	// meant to let through.
	wantBaseline := enroll.BaselinePolicy(ns.Name, mesh.Spec.Isolation, mtlsInForce, owner)
	res.baselineWithheld = mesh.Spec.Isolation == v1alpha1.IsolationStrict && wantBaseline == nil
	baselinePaused := baseline != nil && enroll.Paused(baseline)
	if baselinePaused {
		res.paused = append(res.paused, fmt.Sprintf("%s/%s/%s", enroll.KindAuthorizationPolicy, ns.Name, baseline.GetName()))
	} else if wantBaseline == nil && baseline != nil {
		deleted, err := r.applier().Delete(ctx, baseline, mesh)
		if err != nil {
			return res, err
		}
		if deleted {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, "BaselineWithdrawn", "Reconcile",
				"Removed AuthorizationPolicy %s/%s: %s (%s mTLS in force, %s).", ns.Name, enroll.BaselinePolicyName,
				baselineWhy(mesh.Spec.Isolation), strings.ToUpper(mtlsInForce), res.mode.Reason)
		}
	}
	if !paPaused {
		if _, err := r.applyPolicy(ctx, mesh, pa, enroll.PeerAuthentication(ns.Name, res.mode.Mode, strictReady, owner)); err != nil {
			return res, err
		}
	}

	// Step 3: isolation, admitting the edges workload operators declared.
	state, _ := contract.Parse(ns.Labels)
	allowed := enroll.AllowedSources(ns.Name, []string{cp.Namespace}, state.Edges)
	ap := live[policyKey(enroll.KindAuthorizationPolicy, enroll.IsolationPolicyName)]
	desired := enroll.IsolationPolicy(ns.Name, mesh.Spec.Isolation, allowed, owner)
	switch {
	case ap != nil && enroll.Paused(ap):
		res.paused = append(res.paused, fmt.Sprintf("%s/%s/%s", enroll.KindAuthorizationPolicy, ns.Name, ap.GetName()))
	case desired == nil && ap != nil:
		if _, err := r.applier().Delete(ctx, ap, mesh); err != nil {
			return res, err
		}
	case desired != nil:
		if _, err := r.applyPolicy(ctx, mesh, ap, desired); err != nil {
			return res, err
		}
	}

	// Step 3b: isolation strict's baseline, once STRICT is in force.
	if wantBaseline != nil && !baselinePaused {
		result, err := r.applyPolicy(ctx, mesh, baseline, wantBaseline)
		if err != nil {
			return res, err
		}
		if result == apply.Created {
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, "BaselineApplied", "Reconcile",
				"Applied the allow-nothing AuthorizationPolicy %s/%s (isolation strict, STRICT mTLS in force): workloads admit only what their own ALLOW policies admit.",
				ns.Name, enroll.BaselinePolicyName)
		}
	}

	// Step 4: the state labels, now that what they claim is applied.
	sl, err := contract.Enrollment{DataPlane: contract.DataPlane(dp), MTLS: mtlsInForce, Isolation: string(mesh.Spec.Isolation),
		ControlPlane: cp.Namespace}.StateLabels()
	if err != nil {
		return res, err
	}
	step2 := maps.Clone(base)
	maps.Copy(step2, sl)
	return res, r.applyEnrolledLabels(ctx, ns, step2)
}

// applyPolicy applies a managed policy. Server-side apply alone would keep
// a field someone added by hand (it belongs to their field manager): a rule
// added to the allow-nothing baseline, or a selector that narrows a
// namespace-wide policy, would silently widen what is admitted. So a live
// policy of ours whose spec differs from the desired one in any way first
// gets the desired spec back whole (a JSON patch replacing spec, guarded by
// its resourceVersion), then the apply runs as usual.
func (r *ServiceMeshReconciler) applyPolicy(ctx context.Context, mesh *v1alpha1.ServiceMesh, live, desired *unstructured.Unstructured) (apply.Result, error) {
	if live != nil && controlledBy(live, mesh) && !enroll.Paused(live) && !sameJSON(live.Object["spec"], desired.Object["spec"]) {
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": live.GetResourceVersion()},
			{"op": "replace", "path": "/spec", "value": desired.Object["spec"]},
		})
		if err != nil {
			return "", err
		}
		if err := r.Client.Patch(ctx, live.DeepCopy(), client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldManager)); err != nil {
			return "", fmt.Errorf("restoring the spec of %s %s/%s: %w", live.GetKind(), live.GetNamespace(), live.GetName(), err)
		}
	}
	return r.applier().Apply(ctx, desired, mesh)
}

func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// leaveNamespace undoes an enrollment in the reverse order: the state
// labels go first (workload operators stop relying on the mesh), then the
// policies (workloads fall back to plaintext), then the data-plane label
// and any request the operator wrote. Labels someone else also holds stay.
func (r *ServiceMeshReconciler) leaveNamespace(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns *corev1.Namespace, live map[string]*unstructured.Unstructured) error {
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
	return r.applyNamespaceLabels(ctx, ns, map[string]string{})
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
	policies, err := r.managedPolicies(ctx, mesh)
	if err != nil {
		return err
	}
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if len(ownedLabels(ns)) == 0 && len(policies[ns.Name]) == 0 {
			continue
		}
		if err := r.leaveNamespace(ctx, mesh, ns, policies[ns.Name]); err != nil {
			return err
		}
	}
	st.next.EnrolledNamespaces, st.next.PermissiveNamespaces, st.next.PausedObjects, st.next.MaintenanceUntil = nil, nil, nil, nil
	meta.RemoveStatusCondition(&st.next.Conditions, ConditionMaintenanceWindow)
	meta.RemoveStatusCondition(&st.next.Conditions, ConditionMTLSCutover)
	meta.RemoveStatusCondition(&st.next.Conditions, ConditionStrictIsolation)
	orig := mesh.DeepCopy()
	controllerutil.RemoveFinalizer(mesh, EnrollFinalizer)
	if err := r.Client.Patch(ctx, mesh, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

func (r *ServiceMeshReconciler) ensureNamedFinalizer(ctx context.Context, mesh *v1alpha1.ServiceMesh, name string) error {
	if controllerutil.ContainsFinalizer(mesh, name) {
		return nil
	}
	orig := mesh.DeepCopy()
	controllerutil.AddFinalizer(mesh, name)
	if err := r.Client.Patch(ctx, mesh, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", name, err)
	}
	return nil
}
