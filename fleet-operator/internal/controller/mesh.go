package controller

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// +kubebuilder:rbac:groups=security.istio.io,resources=authorizationpolicies;peerauthentications,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=celld.eric.dev,resources=celldfleets,verbs=patch

// observeMesh decides the fleet's mesh state from the proxies its Pods run.
func observeMesh(fleet *v1alpha1.CelldFleet, pods []corev1.Pod, sts *appsv1.StatefulSet, in mesh.Intent) mesh.State {
	o := mesh.Observation{Desired: in.Sidecar, WasMeshed: mesh.WasMeshed(fleet), Ambient: in.Ambient}
	if sts != nil && sts.Status.ObservedGeneration >= sts.Generation {
		o.TargetRevision = sts.Status.UpdateRevision
	}
	for i := range pods {
		p := &pods[i]
		o.Pods = append(o.Pods, mesh.Pod{
			Name: p.Name, Revision: p.Labels[revisionLabel],
			Proxy: mesh.HasProxy(p), Terminating: p.DeletionTimestamp != nil,
		})
	}
	return mesh.Decide(o)
}

// istioAPIMissing reports, as a blockage, a cluster without Istio's
// security.istio.io/v1 API. The REST mapper discovers lazily, so the fleet
// recovers by itself once the API appears.
func (r *FleetReconciler) istioAPIMissing() (*blockage, error) {
	_, err := r.Client.RESTMapper().RESTMapping(mesh.AuthorizationPolicyKind.GroupKind(), mesh.SecurityGroupVersion.Version)
	if meta.IsNoMatchError(err) {
		return &blockage{
			reason: "IstioAPIUnavailable",
			message: "spec.mesh.istio needs Istio's security.istio.io/v1 API (AuthorizationPolicy, PeerAuthentication), which this " +
				"cluster does not serve. Install Istio 1.22 or later, or remove spec.mesh. Members are left as they are.",
		}, nil
	}
	return nil, err
}

// recordOptIn keeps the control-plane namespace on the fleet. Its presence
// is what makes a fleet that later leaves the mesh opt its Pods out of
// injection explicitly, across reconciles and operator restarts.
func (r *FleetReconciler) recordOptIn(ctx context.Context, fleet *v1alpha1.CelldFleet, in mesh.Intent) error {
	ns := mesh.ControlPlaneNamespace(fleet, in)
	if !in.Sidecar || fleet.Annotations[labels.IstioControlPlane] == ns {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, labels.IstioControlPlane, ns)
	if err := r.Client.Patch(ctx, fleet, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("recording the mesh opt-in on the fleet: %w", err)
	}
	return nil
}

// reconcileMeshPolicies applies or removes FLEET-mesh objects for the state.
// It runs before the member template changes, so the relaxed policies are in
// place before the first member rolls into or out of the mesh.
func (r *FleetReconciler) reconcileMeshPolicies(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) error {
	st := obs.mesh
	ap := mesh.AuthorizationPolicy(fleet, r.meshParams(), obs.intent.Access, st.Relaxed)
	pa := mesh.PeerAuthentication(fleet)
	if st.Phase == mesh.NotMeshed {
		// Never opted in: not a single Istio request, unless the fleet just
		// stopped being ambient (the namespace left the mesh).
		if fleet.Status.Mesh == string(mesh.Ambient) {
			return r.deleteOwned(ctx, fleet, ap)
		}
		return nil
	}
	if st.Policies {
		if err := r.apply(ctx, fleet, ap); err != nil {
			return err
		}
	} else if err := r.deleteOwned(ctx, fleet, ap); err != nil {
		return err
	}
	if st.Relaxed {
		return r.apply(ctx, fleet, pa)
	}
	return r.deleteOwned(ctx, fleet, pa)
}

func (r *FleetReconciler) meshParams() mesh.Params {
	return mesh.Params{
		OperatorNamespace:      r.Config.OperatorNamespace,
		OperatorServiceAccount: r.Config.OperatorServiceAccount,
		TrustDomain:            r.Config.IstioTrustDomain,
	}
}

func (r *FleetReconciler) deleteOwned(ctx context.Context, fleet *v1alpha1.CelldFleet, desired *unstructured.Unstructured) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(desired.GroupVersionKind())
	obj.SetNamespace(desired.GetNamespace())
	obj.SetName(desired.GetName())
	deleted, err := r.Applier.Delete(ctx, obj, fleet)
	var conflict *apply.ConflictError
	if errors.As(err, &conflict) || meta.IsNoMatchError(err) {
		return nil // someone else's object, or the API itself is gone
	}
	if deleted {
		r.Recorder.Eventf(fleet, nil, corev1.EventTypeNormal, "MeshPolicyDeleted", "Delete", "Deleted %s %s", desired.GetKind(), desired.GetName())
	}
	return err
}

// ambient reports a fleet captured by an ambient mesh.
func ambient(obs *observed) bool { return obs.mesh.Phase == mesh.Ambient }
