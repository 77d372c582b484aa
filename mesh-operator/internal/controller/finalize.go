package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// What Helm does with the Sail Operator chart (upstream's kinds: its
// Deployment, ServiceAccount, Service, NetworkPolicy, RBAC and CRDs; release
// records as ConfigMaps). Granting a ClusterRole needs escalate and bind:
// see docs/servicemesh.md.
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts;services,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;roles,verbs=get;create;patch;delete;escalate;bind
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings;rolebindings,verbs=get;create;patch;delete

// finalize tears down what the ServiceMesh owns, in an order that never
// strands anything: first the Sail CRs (the Sail Operator must still run to
// remove istiod and release their finalizers), then the namespaces the
// operator created for them, then the Sail Operator itself if this was the
// last holder. An adopted or external control plane has nothing of ours and
// is left intact.
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
	progress := func(reason, msg string) (ctrl.Result, error) {
		st.set(ConditionReady, metav1.ConditionFalse, "Deleting", "The ServiceMesh is being deleted: "+msg)
		st.summarize(reason, msg)
		return ctrl.Result{RequeueAfter: convergingRecheck}, r.writeStatus(ctx, mesh, st.next, "", "")
	}

	res, err := r.servedResources()
	if err != nil {
		return ctrl.Result{}, err
	}
	if _, ok := res[sail.Group]; ok {
		var waiting []string
		// ZTunnel and IstioCNI first: they follow the Istio.
		for _, kind := range []string{sail.KindZTunnel, sail.KindIstioCNI, sail.KindIstio} {
			gone, err := r.deleteOwnedSail(ctx, mesh, kind)
			if err != nil {
				return ctrl.Result{}, err
			}
			if !gone {
				waiting = append(waiting, kind+"/default")
			}
		}
		if len(waiting) > 0 {
			return progress("WaitingForSail", fmt.Sprintf("waiting for the Sail Operator to remove %s (finalizer %s).", strings.Join(waiting, ", "), sail.Finalizer))
		}
	}
	for _, ns := range []string{sail.ZTunnelNamespace, sail.CNINamespace, sail.IstioNamespace} {
		if err := r.deleteOwnedNamespace(ctx, ns, mesh); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.releaseSail(ctx, mesh); err != nil {
		return ctrl.Result{}, err
	}

	orig := mesh.DeepCopy()
	controllerutil.RemoveFinalizer(mesh, Finalizer)
	if err := r.Client.Patch(ctx, mesh, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
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
	if !controlledBy(u, mesh) {
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

func (r *ServiceMeshReconciler) deleteOwnedNamespace(ctx context.Context, name string, mesh *v1alpha1.ServiceMesh) error {
	ns := &corev1.Namespace{}
	err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, ns)
	if apierrors.IsNotFound(err) || (err == nil && (!controlledBy(ns, mesh) || ns.DeletionTimestamp != nil)) {
		return nil
	}
	if err != nil {
		return err
	}
	uid := ns.UID
	return client.IgnoreNotFound(r.Client.Delete(ctx, ns, client.Preconditions{UID: &uid}))
}

// releaseSail leaves the Sail holders record. The last holder out
// uninstalls: the Helm release, then the CRDs the install created, then the
// record, then the namespace if it was created for the install. Each step is
// idempotent and the record goes last, so an interrupted teardown resumes.
func (r *ServiceMeshReconciler) releaseSail(ctx context.Context, mesh *v1alpha1.ServiceMesh) error {
	ns := r.Config.SailNamespace
	rec, err := r.records().Get(ctx, ns)
	if err != nil || rec == nil || !rec.Holds(sailinstall.HolderKey) {
		return err
	}
	var others []string
	for _, h := range rec.Holders {
		if h != sailinstall.HolderKey {
			others = append(others, h)
		}
	}
	if len(others) > 0 {
		if err := r.records().Leave(ctx, ns, sailinstall.HolderKey); err != nil {
			return err
		}
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, "SailOperatorKept", "Delete",
			"Left the Sail Operator installed in %s: still held by %s.", ns, strings.Join(others, ", "))
		return nil
	}
	if err := r.Helm.Uninstall(); err != nil {
		return err
	}
	for _, name := range rec.CRDs {
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, crdMeta(name))); err != nil {
			return fmt.Errorf("deleting CRD %s: %w", name, err)
		}
	}
	// Our key stays in the record until the record itself goes, so a
	// teardown interrupted above still finds it and resumes.
	if err := r.records().DeleteIfOnly(ctx, rec, sailinstall.HolderKey); err != nil {
		return fmt.Errorf("a holder joined the Sail holders record during the uninstall: %w", err)
	}
	nsObj := &corev1.Namespace{}
	if err := r.Reader.Get(ctx, types.NamespacedName{Name: ns}, nsObj); err == nil && nsObj.Labels[labels.ManagedBy] == sail.ManagedBy && nsObj.DeletionTimestamp == nil {
		uid := nsObj.UID
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, nsObj, client.Preconditions{UID: &uid})); err != nil {
			return err
		}
	} else if client.IgnoreNotFound(err) != nil {
		return err
	}
	r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, "SailOperatorUninstalled", "Delete",
		"Uninstalled the Sail Operator from %s and removed %d CRDs it had created.", ns, len(rec.CRDs))
	return nil
}
