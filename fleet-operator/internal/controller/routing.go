package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

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

var ingressGVK = networkingv1.SchemeGroupVersion.WithKind("Ingress")

// routingOutcome is what status should say about routing; nil Readiness
// removes the condition (no routing, and nothing of it left) unless keep is
// set: a step failed before routing could be judged, and the condition it
// had stays as it was.
type routingOutcome struct {
	readiness *routing.Readiness
	keep      bool
}

func (o routingOutcome) ready() bool {
	return o.readiness == nil || o.readiness.Status == metav1.ConditionTrue
}

var networkPolicyGVK = networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy")

// reconcileRouting converges the route and its policy. It never touches the
// members, and runs whatever holds them back (maintenance.paused included).
// What the API server refuses is the route's problem and is reported in
// RoutingReady; only a failure to talk to the API server is an error.
func (r *FleetReconciler) reconcileRouting(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) (routingOutcome, error) {
	mode := routing.ModeOf(fleet)
	gatewayAPI, err := r.served(routing.HTTPRouteGVK)
	if err != nil {
		return routingOutcome{}, err
	}
	not := func(s metav1.ConditionStatus, reason v1alpha1.ConditionReason, format string, args ...any) (routingOutcome, error) {
		return routingOutcome{readiness: &routing.Readiness{Status: s, Reason: reason, Message: fmt.Sprintf(format, args...)}}, nil
	}

	// A route that cannot be written leaves the old one (and its policy) as
	// it is: deleting it first would take down working routing for a
	// switch that cannot happen yet.
	if mode == routing.Gateway && !gatewayAPI {
		held := ""
		if ingress, err := r.ownedRoute(ctx, fleet, ingressGVK); err != nil {
			return routingOutcome{}, err
		} else if ingress {
			held = fmt.Sprintf(" Ingress %s keeps routing meanwhile; it is deleted once the HTTPRoute can be written.", names.Routing(fleet.Name))
		}
		return not(metav1.ConditionFalse, v1alpha1.ReasonGatewayAPIUnavailable,
			"The Gateway API HTTPRoute CRD (gateway.networking.k8s.io/v1) is not installed: install the Gateway API standard CRDs and a Gateway controller.%s The fleet itself is not affected.", held)
	}

	var route client.Object
	var refusedAnnotations []string
	switch mode {
	case routing.Gateway:
		route = routing.HTTPRoute(fleet)
	case routing.Ingress:
		route, refusedAnnotations = routing.IngressObject(fleet, routing.AnnotationPolicy(r.Config.AllowedIngressAnnotations))
	}
	rejected := func(obj client.Object, err error) (routingOutcome, error) {
		return not(metav1.ConditionFalse, v1alpha1.ReasonRouteRejected,
			"The API server refused %s %s/%s: %s. Fix spec.routing, or the admission policy that refused it; the last accepted route, if any, stays in place. The members are not affected.",
			obj.GetObjectKind().GroupVersionKind().Kind, fleet.Namespace, obj.GetName(), statusMessage(err))
	}

	// The old route goes first: switching modes, or removing routing. Whether
	// there is one is read from the owned objects (the cache), never from
	// status: a status lost to a failed reconcile or restored from a copy
	// must not leave a route, or a policy admitting the edge, behind.
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
		if route != nil {
			// A switch: the old route is deleted only once the API server
			// would admit the new one (schema, webhooks, admission
			// policies), asked with a dry run; a refused switch keeps the
			// working route.
			owned, err := r.ownedRoute(ctx, fleet, gvk)
			if err != nil {
				return routingOutcome{}, err
			}
			if owned {
				if err := r.admits(ctx, fleet, route); refused(err) {
					return rejected(route, err)
				} else if err != nil {
					return routingOutcome{}, err
				}
			}
		}
		waiting, err := r.removeOwned(ctx, fleet, gvk, names.Routing(fleet.Name))
		if err != nil {
			return routingOutcome{}, err
		}
		if waiting != "" {
			return not(metav1.ConditionFalse, v1alpha1.ReasonRemovingOldRoute, "%s", waiting)
		}
	}
	if mode == routing.None {
		// The route is gone; now its policy.
		waiting, err := r.removeOwned(ctx, fleet, networkPolicyGVK, names.Routing(fleet.Name))
		if err != nil {
			return routingOutcome{}, fmt.Errorf("deleting NetworkPolicy %s: %w", names.Routing(fleet.Name), err)
		}
		if waiting != "" {
			return not(metav1.ConditionFalse, v1alpha1.ReasonRemovingOldRoute, "%s", waiting)
		}
		return routingOutcome{}, nil
	}

	for _, obj := range []client.Object{route, routing.NetworkPolicy(fleet, hboneOpen(obs))} {
		if err := r.apply(ctx, fleet, obj); err != nil {
			var conflict *apply.ConflictError
			if errors.As(err, &conflict) {
				return not(metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict, "%s", conflict.Error())
			}
			if refused(err) {
				// The schema, an admission webhook or an admission policy
				// said no. Retrying the same object cannot help; the last
				// accepted route (if any) stays as it is.
				return rejected(obj, err)
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
		readiness = routing.IngressReadiness(ing, refusedAnnotations)
	}
	return routingOutcome{readiness: &readiness}, nil
}

// admits asks the API server, with a dry-run create, whether it would
// admit the fleet's new route: nothing is stored. An object that already
// holds the name is not the dry run's to judge (apply reports it).
func (r *FleetReconciler) admits(ctx context.Context, fleet *v1alpha1.CelldFleet, route client.Object) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(route)
	if err != nil {
		return err
	}
	// Unstructured: the client's scheme need not know the route's kind.
	probe := &unstructured.Unstructured{Object: m}
	probe.SetGroupVersionKind(route.GetObjectKind().GroupVersionKind())
	probe.SetOwnerReferences([]metav1.OwnerReference{*metav1.NewControllerRef(fleet, v1alpha1.GroupVersion.WithKind("CelldFleet"))})
	err = r.Client.Create(ctx, probe, client.DryRunAll, client.FieldOwner(names.Operator))
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// refused reports an API server answer that judges the object itself:
// invalid for the schema, denied by admission (webhooks answer Forbidden by
// default, admission policies Invalid), or malformed. Sending it again
// would get the same answer.
func refused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// statusMessage is the API server's own message of an error.
func statusMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// servedMaxAge bounds how old the fleet operator's answer to "is this API
// served?" may be (shared/served): every fleet asks about Istio's and the
// Gateway API's kinds in every reconcile, and all of them share one
// discovery snapshot, so the cost is one discovery run per servedMaxAge
// whatever the number of fleets. A CRD installed later is found within
// servedMaxAge without a restart; one removed later at once when a write
// of its kind is answered 404 (kindGone), at the latest servedMaxAge after
// discovery stops listing it. The fleet only waits on these answers or
// reports them (GatewayAPIUnavailable, IstioAPIUnavailable), so a few
// seconds of staleness cost a few seconds of a condition; the mesh
// operator, which installs from its answers, asks fresh.
const servedMaxAge = 5 * time.Second

// served reports whether the API server serves a kind.
func (r *FleetReconciler) served(gvk schema.GroupVersionKind) (bool, error) {
	return r.Served.Kind(gvk)
}

// kindGone takes the API server's answer to a write of a gvk object: if it
// says the kind is not served (its CRD removed under the running operator),
// the kind counts as not served from now on, so fleets report it instead
// of failing every reconcile (found by the transition explorer, seed 405),
// until discovery shows it again. Any other error changes nothing.
func (r *FleetReconciler) kindGone(gvk schema.GroupVersionKind, err error) {
	r.Served.Gone(gvk, err)
}

// ownedRoute reports whether the fleet controls a route of that kind, read
// as removeOwned reads it.
func (r *FleetReconciler) ownedRoute(ctx context.Context, fleet *v1alpha1.CelldFleet, gvk schema.GroupVersionKind) (bool, error) {
	live, err := r.Applier.Observed(ctx, gvk, client.ObjectKey{Namespace: fleet.Namespace, Name: names.Routing(fleet.Name)})
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return metav1.IsControlledBy(live, fleet), nil
}

// removeOwned deletes the fleet's object of that kind and name, if the fleet
// controls it, and returns a message while it still exists (finalizers).
// Whether it exists is read from the cache for the kinds the operator
// watches, so a fleet with nothing to remove costs no request. A foreign
// object with the name is not the fleet's to delete: it is left.
func (r *FleetReconciler) removeOwned(ctx context.Context, fleet *v1alpha1.CelldFleet, gvk schema.GroupVersionKind, name string) (string, error) {
	key := client.ObjectKey{Namespace: fleet.Namespace, Name: name}
	live, err := r.Applier.Observed(ctx, gvk, key)
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !metav1.IsControlledBy(live, fleet) {
		return "", nil
	}
	if live.GetDeletionTimestamp() == nil {
		uid := live.GetUID()
		err := r.Client.Delete(ctx, live, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		// Without finalizers it is gone already; ask the API server, the
		// cache has not seen the delete yet.
		fresh := &unstructured.Unstructured{}
		fresh.SetGroupVersionKind(gvk)
		if err := r.Client.Get(ctx, key, fresh); apierrors.IsNotFound(err) {
			return "", nil
		} else if err != nil {
			return "", err
		}
		live = fresh
	}
	return fmt.Sprintf("Waiting for %s %s to be deleted before the new route is created (finalizers: %v).", gvk.Kind, name, live.GetFinalizers()), nil
}
