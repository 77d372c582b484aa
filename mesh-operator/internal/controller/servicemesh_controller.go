// Package controller holds the ServiceMesh reconciler.
package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
)

// Condition types of a ServiceMesh.
const (
	ConditionReady         = "Ready"
	ConditionPreviewLocked = "PreviewLocked"
	ConditionRefused       = "Refused"
)

// Phases shown by kubectl get.
const (
	PhaseRefused       = "Refused"
	PhasePreviewLocked = "PreviewLocked"
	PhaseLicensed      = "Licensed"
)

// lockedRecheck is how often a locked mesh looks at the license Secret again:
// the operator may only get that one Secret (no watch), and adding a license
// should take effect without a restart.
const lockedRecheck = 30 * time.Second

// ServiceMeshReconciler reconciles the cluster's ServiceMesh.
type ServiceMeshReconciler struct {
	Client client.Client
	// SecretReader reads the license Secret uncached: the operator's RBAC
	// allows get on that one Secret only, so it cannot list or watch Secrets.
	SecretReader client.Reader
	Config       Config
	Recorder     recorder.EventRecorder
	Now          func() time.Time
}

// SetupWithManager builds the reconciler from cfg and registers it.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	r := &ServiceMeshReconciler{
		Client:       mgr.GetClient(),
		SecretReader: mgr.GetAPIReader(),
		Config:       cfg,
		Recorder:     mgr.GetEventRecorder("mesh-operator"),
		Now:          time.Now,
	}
	if cfg.KeyWarning != nil {
		ctrl.Log.WithName("license").Error(cfg.KeyWarning, "ignoring the configured test key")
	}
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.ServiceMesh{}).Complete(r)
}

// +kubebuilder:rbac:groups=core.navique.com,resources=servicemeshes,verbs=get;list;watch
// +kubebuilder:rbac:groups=core.navique.com,resources=servicemeshes/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile checks the singleton rule and the license before anything else:
// a refused or unlicensed ServiceMesh changes nothing in the cluster.
func (r *ServiceMeshReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mesh := &v1alpha1.ServiceMesh{}
	if err := r.Client.Get(ctx, req.NamespacedName, mesh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	now := r.Now()
	next := mesh.Status.DeepCopy()
	next.ObservedGeneration = mesh.Generation
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: mesh.Generation, LastTransitionTime: metav1.NewTime(now)})
	}

	if mesh.Name != v1alpha1.SingletonName {
		msg := fmt.Sprintf("ServiceMesh is a cluster singleton and must be named %q; %q is ignored and changes nothing.", v1alpha1.SingletonName, mesh.Name)
		set(ConditionRefused, metav1.ConditionTrue, "NotSingleton", msg)
		set(ConditionReady, metav1.ConditionFalse, "Refused", msg)
		next.Phase = PhaseRefused
		return ctrl.Result{}, r.writeStatus(ctx, mesh, next, "Refused", msg)
	}

	lic, err := r.verifyLicense(ctx, now)
	if err != nil {
		reason := string(license.ReasonOf(err))
		set(ConditionPreviewLocked, metav1.ConditionTrue, reason, err.Error())
		set(ConditionReady, metav1.ConditionFalse, ConditionPreviewLocked, "The mesh is locked by its license; nothing is changed in the cluster. See the PreviewLocked condition.")
		next.Phase = PhasePreviewLocked
		wait := license.NextCheck(license.SignedLicense(nil, err), now)
		if wait > lockedRecheck {
			wait = lockedRecheck
		}
		return ctrl.Result{RequeueAfter: wait}, r.writeStatus(ctx, mesh, next, "LicenseRefused", err.Error())
	}
	set(ConditionPreviewLocked, metav1.ConditionFalse, string(license.ReasonValid),
		fmt.Sprintf("Licensed to %s until %s.", lic.Licensee, lic.NotAfter.UTC().Format(time.RFC3339)))
	set(ConditionReady, metav1.ConditionFalse, "ControlPlaneNotConfigured",
		"Licensed. Installing or adopting the Istio control plane is not implemented in this build yet; nothing was changed in the cluster.")
	next.Phase = PhaseLicensed
	return ctrl.Result{RequeueAfter: license.NextCheck(lic, now)}, r.writeStatus(ctx, mesh, next, "", "")
}

func (r *ServiceMeshReconciler) verifyLicense(ctx context.Context, now time.Time) (*license.License, error) {
	ref := license.SecretRef{Namespace: r.Config.OperatorNamespace, Name: r.Config.LicenseSecret}
	secret := &corev1.Secret{}
	err := r.SecretReader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, secret)
	if apierrors.IsNotFound(err) {
		return nil, ref.NotFound()
	}
	if err != nil {
		return nil, &license.Error{Reason: license.ReasonMissing, Message: fmt.Sprintf("cannot read license Secret %s: %v", ref, err)}
	}
	return ref.Verify(secret.Data, r.Config.Keys, now)
}

// writeStatus patches status when it changed, with a Warning event when a
// refusal is new (not on every re-check).
func (r *ServiceMeshReconciler) writeStatus(ctx context.Context, mesh *v1alpha1.ServiceMesh, next *v1alpha1.ServiceMeshStatus, warnReason, warnMsg string) error {
	if equality.Semantic.DeepEqual(&mesh.Status, next) {
		return nil
	}
	if warnReason != "" && mesh.Status.Phase != next.Phase {
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, warnReason, "Reconcile", "%s", warnMsg)
	}
	updated := mesh.DeepCopy()
	updated.Status = *next
	return r.Client.Status().Patch(ctx, updated, client.MergeFrom(mesh))
}
