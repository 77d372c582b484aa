package controller

import (
	"context"
	"errors"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/shared/apply"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=delete

// ConditionRoutingReady reports the route, separately from Ready.
const ConditionRoutingReady = "RoutingReady"

var ingressGVK = networkingv1.SchemeGroupVersion.WithKind("Ingress")

// routingOutcome is what status should say about routing; nil Readiness
// removes the condition (no routing, and nothing of it left).
type routingOutcome struct {
	readiness *routing.Readiness
}

func (o routingOutcome) ready() bool {
	return o.readiness == nil || o.readiness.Status == metav1.ConditionTrue
}

// reconcileRouting converges the route and its policy. It never touches the
// members, and runs whatever holds them back (maintenance.paused included).
func (r *FleetReconciler) reconcileRouting(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) (routingOutcome, error) {
	mode := routing.ModeOf(fleet)
	wasRouted := meta.FindStatusCondition(fleet.Status.Conditions, ConditionRoutingReady) != nil
	if mode == routing.None && !wasRouted {
		return routingOutcome{}, nil // never routed: not a single request
	}
	gatewayAPI, err := r.served(routing.HTTPRouteGVK)
	if err != nil {
		return routingOutcome{}, err
	}
	not := func(s metav1.ConditionStatus, reason, format string, args ...any) (routingOutcome, error) {
		return routingOutcome{readiness: &routing.Readiness{Status: s, Reason: reason, Message: fmt.Sprintf(format, args...)}}, nil
	}

	// The old route goes first: switching modes, or removing routing.
	var old []schema.GroupVersionKind
	switch mode {
	case routing.Gateway:
		old = []schema.GroupVersionKind{ingressGVK}
	case routing.Ingress:
		old = []schema.GroupVersionKind{routing.HTTPRouteGVK}
	default:
		old = []schema.GroupVersionKind{ingressGVK, routing.HTTPRouteGVK}
	}
	for _, gvk := range old {
		if gvk == routing.HTTPRouteGVK && !gatewayAPI {
			continue
		}
		waiting, err := r.removeOwned(ctx, fleet, gvk, names.Routing(fleet.Name))
		if err != nil {
			return routingOutcome{}, err
		}
		if waiting != "" {
			return not(metav1.ConditionFalse, "RemovingOldRoute", "%s", waiting)
		}
	}
	if mode == routing.None {
		// The route is gone; now its policy.
		waiting, err := r.removeOwned(ctx, fleet, networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), names.Routing(fleet.Name))
		if err != nil || waiting != "" {
			return not(metav1.ConditionFalse, "RemovingOldRoute", "%s", waiting)
		}
		return routingOutcome{}, nil
	}

	var route client.Object
	if mode == routing.Gateway {
		if !gatewayAPI {
			return not(metav1.ConditionFalse, "GatewayAPIUnavailable",
				"The Gateway API HTTPRoute CRD (gateway.networking.k8s.io/v1) is not installed: install the Gateway API standard CRDs and a Gateway controller. The fleet itself is not affected.")
		}
		route = routing.HTTPRoute(fleet)
	} else {
		route = routing.IngressObject(fleet)
	}
	for _, obj := range []client.Object{route, routing.NetworkPolicy(fleet, ambient(obs))} {
		if err := r.apply(ctx, fleet, obj); err != nil {
			var conflict *apply.ConflictError
			if errors.As(err, &conflict) {
				return not(metav1.ConditionFalse, "OwnershipConflict", "%s", conflict.Error())
			}
			return routingOutcome{}, err
		}
	}

	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(route.GetObjectKind().GroupVersionKind())
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(route), live); err != nil {
		return routingOutcome{}, err
	}
	var readiness routing.Readiness
	if mode == routing.Gateway {
		hr := &gatewayv1.HTTPRoute{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, hr); err != nil {
			return routingOutcome{}, err
		}
		readiness = routing.GatewayReadiness(fleet, hr)
	} else {
		ing := &networkingv1.Ingress{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(live.Object, ing); err != nil {
			return routingOutcome{}, err
		}
		readiness = routing.IngressReadiness(ing)
	}
	return routingOutcome{readiness: &readiness}, nil
}

// served reports whether the API server serves a kind. The REST mapper
// discovers lazily, so a CRD installed later is found without a restart.
func (r *FleetReconciler) served(gvk schema.GroupVersionKind) (bool, error) {
	_, err := r.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

// removeOwned deletes the fleet's object of that kind and name, if the fleet
// controls it, and returns a message while it still exists (finalizers).
// A foreign object with the name is not the fleet's to delete: it is left.
func (r *FleetReconciler) removeOwned(ctx context.Context, fleet *v1alpha1.CelldFleet, gvk schema.GroupVersionKind, name string) (string, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(fleet.Namespace)
	obj.SetName(name)
	if _, err := r.Applier.Delete(ctx, obj, fleet); err != nil {
		var conflict *apply.ConflictError
		if errors.As(err, &conflict) {
			return "", nil
		}
		return "", err
	}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Waiting for %s %s to be deleted before the new route is created (finalizers: %v).", gvk.Kind, name, obj.GetFinalizers()), nil
}
