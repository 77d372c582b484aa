package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// The rights installing and uninstalling the Sail Operator take are
// declared in internal/sailinstall (rbac.go): the chart grants them only
// with sail.install=true.

// finalize tears down what the ServiceMesh owns, in an order that never
// strands anything: first the enrolled namespaces, then the Sail CRs once
// no Pod of those namespaces needs them any more (awaitCNIRelease,
// awaitSidecarRelease; the Sail Operator must still run to remove istiod
// and release their finalizers), then the namespaces the operator created
// for them where nothing else is in them (teardown.go), then the Sail
// Operator itself if this was the last holder. An adopted or external
// control plane has nothing of ours and is left intact.
func (r *ServiceMeshReconciler) finalize(ctx context.Context, mesh *v1alpha1.ServiceMesh) (ctrl.Result, error) {
	// Namespaces first: their labels and policies go before the control
	// plane, so workloads fall back to plaintext while istiod still runs.
	if controllerutil.ContainsFinalizer(mesh, EnrollFinalizer) {
		if err := r.teardownEnrollment(ctx, mesh, newStatus(mesh, r.Now())); err != nil {
			return ctrl.Result{}, err
		}
	}
	if !controllerutil.ContainsFinalizer(mesh, Finalizer) {
		return ctrl.Result{}, nil
	}
	st := newStatus(mesh, r.Now())
	st.next.Phase = PhaseDeleting
	progress := func(reason v1alpha1.ConditionReason, msg string) (ctrl.Result, error) {
		st.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting, "The ServiceMesh is being deleted: "+msg)
		st.summarize(reason, msg)
		return ctrl.Result{RequeueAfter: convergingRecheck}, r.writeStatus(ctx, mesh, st.next, "", "")
	}

	apis, err := r.Served.Snapshot()
	if err != nil {
		return ctrl.Result{}, err
	}
	if apis.Group(sail.Group) {
		msg, err := r.awaitCNIRelease(ctx, mesh)
		if err != nil {
			return ctrl.Result{}, err
		}
		if msg != "" {
			return progress(v1alpha1.ReasonWaitingForCNIRelease, msg)
		}
		kinds := []string{sail.KindZTunnel, sail.KindIstioCNI, sail.KindIstio}
		sidecars, err := r.awaitSidecarRelease(ctx, mesh)
		if err != nil {
			return ctrl.Result{}, err
		}
		if sidecars != "" {
			kinds = kinds[:2] // istiod stays
		}
		var waiting []string
		// ZTunnel and IstioCNI first: they follow the Istio.
		for _, kind := range kinds {
			gone, err := r.deleteOwnedSail(ctx, mesh, kind)
			if err != nil {
				return ctrl.Result{}, err
			}
			if !gone {
				waiting = append(waiting, kind+"/default")
			}
		}
		if c := meta.FindStatusCondition(mesh.Status.Conditions, string(v1alpha1.ConditionReconciling)); sidecars != "" && (c == nil || c.Message != sidecars) {
			// Once per change of the Pods waited for, not every recheck.
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.ReasonWaitingForSidecarRelease), "Delete", "%s", sidecars)
		}
		if sidecars != "" {
			return progress(v1alpha1.ReasonWaitingForSidecarRelease, sidecars)
		}
		if len(waiting) > 0 {
			return progress(v1alpha1.ReasonWaitingForSail, fmt.Sprintf("waiting for the Sail Operator to remove %s (finalizer %s).", strings.Join(waiting, ", "), sail.Finalizer))
		}
	}
	// The namespaces created for the control plane go only when nothing
	// but what the operator (and Kubernetes) put there is left in them.
	var namespaces []namespaceOutcome
	for _, ns := range []string{sail.ZTunnelNamespace, sail.CNINamespace, sail.IstioNamespace} {
		out, err := r.teardownNamespace(ctx, mesh, ns, controlledByMesh(mesh))
		if err != nil {
			return ctrl.Result{}, err
		}
		if out != nil {
			namespaces = append(namespaces, *out)
		}
	}
	reason, msg, sailNS, err := r.releaseSail(ctx, mesh)
	if err != nil {
		var reasoned *reasonedError
		if errors.As(err, &reasoned) {
			st.set(v1alpha1.ConditionSailTeardown, metav1.ConditionFalse, reasoned.reason, err.Error())
			_, _ = progress(reasoned.reason, err.Error())
		}
		return ctrl.Result{}, err
	}
	if sailNS != nil {
		namespaces = append(namespaces, *sailNS)
	}
	nsReason, nsMsg, nsReport := namespaceTeardownCondition(namespaces)
	if reason != "" || nsReport {
		// The last word on the Sail installation and the namespaces,
		// written before the finalizer goes (and with it, usually, the object).
		if reason != "" {
			st.set(v1alpha1.ConditionSailTeardown, metav1.ConditionTrue, reason, msg)
			st.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting, "The ServiceMesh is being deleted: "+msg)
		}
		if nsReport {
			st.set(v1alpha1.ConditionNamespaceTeardown, metav1.ConditionTrue, nsReason, nsMsg)
		}
		if err := r.patchStatus(ctx, mesh, st.next); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}

	if err := apply.RemoveFinalizer(ctx, r.Client, mesh, Finalizer); !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// maxListed bounds how many Pods a message names.
const maxListed = 10

// awaitCNIRelease returns why ZTunnel and IstioCNI must stay for now, or ""
// when they may go. Namespaces leave the mesh first, but istio-cni removes
// a Pod's traffic redirection only after it sees the label go: deleting
// ztunnel (and istio-cni) before that leaves those Pods redirected to a
// ztunnel that no longer exists, cut off. The wait is bounded (from the
// deletion of the ServiceMesh): a node whose istio-cni is gone never
// answers, and the teardown must end.
func (r *ServiceMeshReconciler) awaitCNIRelease(ctx context.Context, mesh *v1alpha1.ServiceMesh) (string, error) {
	held := false
	for _, kind := range []string{sail.KindZTunnel, sail.KindIstioCNI} {
		u := &metav1.PartialObjectMetadata{}
		u.SetGroupVersionKind(sail.GVK(kind))
		err := r.Reader.Get(ctx, types.NamespacedName{Name: "default"}, u)
		if err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("reading %s default: %w", kind, err)
		}
		held = held || (err == nil && metav1.IsControlledBy(u, mesh) && u.DeletionTimestamp == nil)
	}
	if !held {
		return "", nil
	}
	pods, err := r.strandedPods(ctx)
	if err != nil || len(pods) == 0 {
		return "", err
	}
	timeout := r.Config.CNIReleaseTimeout
	if timeout <= 0 {
		timeout = DefaultCNIReleaseTimeout
	}
	deadline := mesh.DeletionTimestamp.Add(timeout)
	if r.Now().After(deadline) {
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.EventCNIReleaseTimedOut), "Delete",
			"Removing ZTunnel and IstioCNI after waiting %s: istio-cni still redirects %d Pods of namespaces that left the mesh (%s); restart them to restore their traffic.",
			timeout, len(pods), listed(pods))
		return "", nil
	}
	return fmt.Sprintf("waiting until %s for istio-cni to release %d Pods of namespaces that left the mesh (annotation %s=enabled) before ZTunnel and IstioCNI are removed: %s.",
		deadline.UTC().Format(time.RFC3339), len(pods), labels.IstioAmbientRedirection, listed(pods)), nil
}

// awaitSidecarRelease returns why the Istio (istiod) must stay for now, or
// "" when it may go. Namespaces leave the mesh first, but a Pod keeps the
// sidecar it was injected with until it is restarted, and that proxy gets
// its configuration (the relaxed policies of the leaving namespaces
// included) and its certificates from istiod: removing istiod first leaves
// it without either, its mTLS failing once its certificate expires. So the
// Istio stays until no such Pod runs. The wait has no bound: unlike a node
// whose istio-cni is gone, a Pod with a sidecar is always one restart away
// from ending it, and the status names the Pods. A failed read holds.
func (r *ServiceMeshReconciler) awaitSidecarRelease(ctx context.Context, mesh *v1alpha1.ServiceMesh) (string, error) {
	istio := &metav1.PartialObjectMetadata{}
	istio.SetGroupVersionKind(sail.GVK(sail.KindIstio))
	err := r.Reader.Get(ctx, types.NamespacedName{Name: "default"}, istio)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading %s default: %w", sail.KindIstio, err)
	}
	if !metav1.IsControlledBy(istio, mesh) || istio.DeletionTimestamp != nil {
		return "", nil
	}
	pods, err := r.sidecarPods(ctx)
	if err != nil || len(pods) == 0 {
		return "", err
	}
	return fmt.Sprintf("keeping %s/default (istiod) while %d Pods of namespaces that left the mesh still run its %s sidecar, which needs istiod for its configuration and certificates; "+
		"restart them to take them out of the mesh (the injection labels are gone, so they come back without one): %s.",
		sail.KindIstio, len(pods), podmesh.ProxyContainer, listed(pods)), nil
}

// sidecarPods are the running Pods with Istio's proxy (podmesh.HasProxy)
// although neither they nor their namespace ask for injection any more, as
// namespace/name. Namespaces and Pods that still ask for it (a user's own
// istio-injection or istio.io/rev label, a gateway's
// sidecar.istio.io/inject=true) are not ours to wait for.
func (r *ServiceMeshReconciler) sidecarPods(ctx context.Context) ([]string, error) {
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	injected := map[string]bool{}
	for _, ns := range nsList.Items {
		injected[ns.Name] = asksForInjection(ns.Labels)
	}
	pods := &corev1.PodList{}
	if err := r.Reader.List(ctx, pods); err != nil {
		return nil, fmt.Errorf("listing Pods: %w", err)
	}
	var out []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if !podmesh.Running(p) || !podmesh.HasProxy(p) || injected[p.Namespace] ||
			asksForInjection(p.Labels) || p.Labels[labels.IstioInject] == "true" {
			continue
		}
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out, nil
}

// asksForInjection: a namespace's (or Pod's) labels ask Istio to inject
// its sidecar, by the default revision or a named one.
func asksForInjection(l map[string]string) bool {
	return l[labels.IstioInjection] == "enabled" || l[labels.IstioRevision] != ""
}

// strandedPods are the Pods istio-cni still redirects although neither they
// nor their namespace ask for ambient any more, as namespace/name.
// Namespaces that still ask for it (a user's own label) are not ours to
// wait for.
func (r *ServiceMeshReconciler) strandedPods(ctx context.Context) ([]string, error) {
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	ambient := map[string]bool{}
	for _, ns := range nsList.Items {
		ambient[ns.Name] = ns.Labels[labels.IstioDataPlaneMode] == string(v1alpha1.DataPlaneAmbient)
	}
	// Metadata only: the annotation is all that is read.
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.Reader.List(ctx, pods); err != nil {
		return nil, fmt.Errorf("listing Pods: %w", err)
	}
	var out []string
	for _, p := range pods.Items {
		if !podmesh.Redirected(&p) || ambient[p.Namespace] ||
			p.Labels[labels.IstioDataPlaneMode] == string(v1alpha1.DataPlaneAmbient) {
			continue
		}
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out, nil
}

func listed(names []string) string {
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
}

// deleteOwnedSail deletes the Sail CR of kind that this ServiceMesh
// controls, and reports whether it is gone. One we do not control is not ours to delete.
func (r *ServiceMeshReconciler) deleteOwnedSail(ctx context.Context, mesh *v1alpha1.ServiceMesh, kind string) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sail.GVK(kind))
	err := r.Reader.Get(ctx, types.NamespacedName{Name: "default"}, u)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %s default: %w", kind, err)
	}
	if !metav1.IsControlledBy(u, mesh) {
		return true, nil
	}
	if u.GetDeletionTimestamp() == nil {
		uid := u.GetUID()
		if err := r.Client.Delete(ctx, u, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting %s default: %w", kind, err)
		}
	}
	return false, nil
}

// releaseSail leaves the Sail holders record. The last holder out
// uninstalls, unless Sail resources the operator does not own still need
// the Sail Operator: the Helm release, then the CRDs the install created
// that nothing else uses (decideCRDs), then the record, then the namespace
// if it was created for the install and holds nothing else.
// Each step is idempotent and the record goes last, so an interrupted
// teardown resumes. It returns the SailTeardown reason and message to
// report ("" when the operator held no part of the installation), and what
// became of the Sail namespace (nil when there was nothing to decide).
func (r *ServiceMeshReconciler) releaseSail(ctx context.Context, mesh *v1alpha1.ServiceMesh) (v1alpha1.ConditionReason, string, *namespaceOutcome, error) {
	ns := r.Config.SailNamespace
	rec, err := r.records().Get(ctx, ns)
	if err != nil || rec == nil || !rec.Holds(sailinstall.HolderKey) {
		return "", "", nil, err
	}
	if !r.Config.SailInstall {
		// Installed while --sail-install was true, and held by us ever
		// since; leaving or uninstalling needs the installer's rights,
		// which the chart grants only with sail.install=true. Left as it is.
		msg := fmt.Sprintf("The holders record %s/%s names this operator, but with sail.install=false (--sail-install=false) it holds no rights to leave it or uninstall the Sail Operator: "+
			"the installation is left as it is. Uninstall it yourself (helm uninstall -n %s %s, then delete the record), or set sail.install=true before deleting the ServiceMesh.",
			ns, sailinstall.RecordName, ns, rec.Release)
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonSailUninstallDisabled), "Delete", "%s", msg)
		return v1alpha1.ReasonSailUninstallDisabled, msg, nil, nil
	}
	var others []string
	for _, h := range rec.Holders {
		if h != sailinstall.HolderKey {
			others = append(others, h)
		}
	}
	if len(others) > 0 {
		if err := r.records().Leave(ctx, ns, sailinstall.HolderKey); err != nil {
			return "", "", nil, err
		}
		msg := fmt.Sprintf("Left the Sail Operator installed in %s: still held by %s.", ns, strings.Join(others, ", "))
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.ReasonSailOperatorKept), "Delete", "%s", msg)
		return v1alpha1.ReasonSailOperatorKept, msg, nil, nil
	}
	// A user's own Istio (or IstioCNI, ZTunnel) next to ours runs on the
	// same Sail Operator: uninstalling it would strand that mesh, and
	// deleting the CRDs would delete it. Our key stays in the record, so
	// a later last holder still uninstalls once they are gone.
	users, err := r.foreignSailResources(ctx, mesh)
	if err != nil {
		return "", "", nil, err
	}
	if len(users) > 0 {
		msg := fmt.Sprintf("Kept the Sail Operator in %s and its CRDs: %s, which this ServiceMesh does not own, still use it. "+
			"The holders record %s/%s keeps the operator's key, so the next ServiceMesh to be deleted after they are gone uninstalls it.",
			ns, strings.Join(users, ", "), ns, sailinstall.RecordName)
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonSailInUse), "Delete", "%s", msg)
		return v1alpha1.ReasonSailInUse, msg, nil, nil
	}
	// The record says which CRDs the install created, but anyone who may
	// write ConfigMaps in its namespace may edit it: only the chart's own
	// CRDs of the Sail API groups, created after the record, are deleted.
	ch, err := r.loadChart(ctx)
	if err != nil {
		return "", "", nil, withChartReason(fmt.Errorf("the Sail chart is needed to check which CRDs the holders record may name, so the uninstall waits: %w", err))
	}
	chartCRDs, err := sailinstall.CRDNames(ch)
	if err != nil {
		return "", "", nil, err
	}
	candidates, ignored := sailinstall.RemovableCRDs(rec.CRDs, chartCRDs)
	// The uninstall deletes what the stored release lists: only a release
	// the operator recorded (sailrelease.go).
	if reason, msg, err := r.sailReleaseForUninstall(ctx, mesh, ch); err != nil || reason != "" {
		return reason, msg, nil, err
	}
	if err := r.Helm.Uninstall(); err != nil {
		return "", "", nil, err
	}
	if err := r.records().DeleteInstalled(ctx, r.Config.OperatorNamespace); err != nil {
		return "", "", nil, err
	}
	var uses []crdUse
	uids := map[string]types.UID{}
	for _, name := range candidates {
		crd := crdMeta(name)
		err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, crd)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", "", nil, fmt.Errorf("reading CRD %s: %w", name, err)
		}
		if crd.CreationTimestamp.Before(&rec.Created) {
			// It existed before the record, so before the install.
			ignored = append(ignored, name)
			continue
		}
		use, err := r.crdUseOf(ctx, mesh, name)
		if err != nil {
			return "", "", nil, err
		}
		uses = append(uses, use)
		uids[name] = crd.UID
	}
	controlPlanes, err := r.foreignControlPlanes(ctx)
	controlPlanesUnread := ""
	if err != nil {
		controlPlanesUnread = err.Error()
	}
	remove, kept := decideCRDs(uses, controlPlanes, controlPlanesUnread)
	for _, name := range remove {
		uid := uids[name]
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, crdMeta(name), client.Preconditions{UID: &uid})); err != nil {
			return "", "", nil, fmt.Errorf("deleting CRD %s: %w", name, err)
		}
	}
	// Our key stays in the record until the record itself goes, so a
	// teardown interrupted above still finds it and resumes.
	if err := r.records().DeleteIfOnly(ctx, rec, sailinstall.HolderKey); err != nil {
		return "", "", nil, fmt.Errorf("a holder joined the Sail holders record during the uninstall: %w", err)
	}
	sailNS, err := r.teardownNamespace(ctx, mesh, ns, createdForSail)
	if err != nil {
		return "", "", nil, err
	}
	reason, msg := sailUninstalledOutcome(ns, len(remove), kept, ignored)
	r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.ReasonSailOperatorUninstalled), "Delete",
		"Uninstalled the Sail Operator from %s and removed %d CRDs it had created.", ns, len(remove))
	if len(kept) > 0 {
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonSailCRDsKept), "Delete", "%s", keptCRDsMessage(kept))
	}
	if len(ignored) > 0 {
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonUntrustedCRDsIgnored), "Delete", "%s", untrustedCRDsMessage(ns, ignored))
	}
	return reason, msg, sailNS, nil
}

// untrustedCRDsMessage names the recorded CRDs the record may not vouch for.
func untrustedCRDsMessage(ns string, ignored []string) string {
	ignored = slices.Sorted(slices.Values(ignored))
	return fmt.Sprintf("Did not delete CRDs %s named in the holders record %s/%s: they are not CRDs of the Sail API groups that the Sail chart ships, "+
		"created by its install. Anyone who may write ConfigMaps in %s can edit that record; check who added them.",
		strings.Join(ignored, ", "), ns, sailinstall.RecordName, ns)
}

// sailUninstalledOutcome is the SailTeardown reason and message once the
// Sail Operator is uninstalled: removed CRDs were deleted; kept ones
// (decideCRDs) were left because something not the operator's uses them,
// which outranks ignored ones (recorded names the record may not vouch for).
func sailUninstalledOutcome(ns string, removed int, kept map[string]string, ignored []string) (v1alpha1.ConditionReason, string) {
	msg := fmt.Sprintf("Uninstalled the Sail Operator from %s and removed %d CRDs it had created.", ns, removed)
	reason := v1alpha1.ReasonSailOperatorUninstalled
	if len(ignored) > 0 {
		reason, msg = v1alpha1.ReasonUntrustedCRDsIgnored, msg+" "+untrustedCRDsMessage(ns, ignored)
	}
	if len(kept) > 0 {
		reason, msg = v1alpha1.ReasonSailCRDsKept, msg+" "+keptCRDsMessage(kept)
	}
	return reason, msg
}

// foreignSailResources lists the Istio, IstioCNI and ZTunnel resources this
// ServiceMesh does not control, as Kind/name.
func (r *ServiceMeshReconciler) foreignSailResources(ctx context.Context, mesh *v1alpha1.ServiceMesh) ([]string, error) {
	apis, err := r.Served.Snapshot()
	if err != nil {
		return nil, err
	}
	if !apis.Group(sail.Group) {
		return nil, nil
	}
	var out []string
	for _, kind := range []string{sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel} {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(sail.GVK(kind + "List"))
		if err := r.Reader.List(ctx, list); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("listing Sail %s resources: %w", kind, err)
		}
		for i := range list.Items {
			if !metav1.IsControlledBy(&list.Items[i], mesh) {
				out = append(out, kind+"/"+list.Items[i].Name)
			}
		}
	}
	return out, nil
}

// patchStatus writes next as the status and keeps mesh current, so a
// following optimistic-lock patch of mesh does not conflict with it.
func (r *ServiceMeshReconciler) patchStatus(ctx context.Context, mesh *v1alpha1.ServiceMesh, next *v1alpha1.ServiceMeshStatus) error {
	if equality.Semantic.DeepEqual(&mesh.Status, next) {
		return nil
	}
	updated := mesh.DeepCopy()
	updated.Status = *next
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(mesh)); err != nil {
		return err
	}
	r.gate.Wrote(client.ObjectKeyFromObject(mesh), updated)
	*mesh = *updated
	return nil
}
