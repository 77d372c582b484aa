package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
)

// mutualTLSHold is the blockage of a fleet whose member template is to
// roll into or out of the mesh while DestinationRules force ISTIO_MUTUAL
// toward its Services: meshed members (and meshed clients in its
// namespace) would open Istio mutual TLS toward members without a proxy,
// which take only plaintext. It is decided before the template changes, so
// the StatefulSet keeps the template its members run and no member is
// replaced (reconcileStatefulSet); nil when nothing holds the roll. The
// rules are looked at only while such a change is pending, in the fleet's
// namespace and the mesh's root namespace, taken to be the control plane's
// (Istio's default); where Istio's networking API is not served there are
// none. They are read from a cache of every DestinationRule, which runs
// while the kind is served (optionalCaches), so a held fleet's passes cost
// no request, and whose events wake the held fleets
// (fleetsHeldByDestinationRules); until it has synced, from the API server.
// A failed list is returned: the roll then waits, as it does for any step
// that fails before the StatefulSet.
func (r *FleetReconciler) mutualTLSHold(ctx context.Context, fleet *v1alpha1.CelldFleet, live *appsv1.StatefulSet, in mesh.Intent) (*blockage, error) {
	if fleet.Spec.Maintenance.Paused {
		return nil, nil // the pause holds the template already, and says so
	}
	change := pendingMeshChange(fleet, live, in)
	if change == "" {
		return nil, nil
	}
	served, err := r.served(mesh.DestinationRuleKind)
	if err != nil {
		return nil, fmt.Errorf("discovering Istio's networking API: %w", err)
	}
	if !served {
		return nil, nil
	}
	root := mesh.ControlPlaneNamespace(fleet, in)
	if root == "" {
		root = mesh.DefaultControlPlaneNamespace
	}
	namespaces := []string{fleet.Namespace}
	if root != fleet.Namespace {
		namespaces = append(namespaces, root)
	}
	var rules []mesh.DestinationRule
	for _, ns := range namespaces {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(mesh.DestinationRuleKind.GroupVersion().WithKind(mesh.DestinationRuleKind.Kind + "List"))
		err := r.listDestinationRules(ctx, list, client.InNamespace(ns))
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			// The API server says the kind is not served (its CRD was
			// removed since discovery): no DestinationRule exists.
			r.kindGone(mesh.DestinationRuleKind, err)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing DestinationRules in namespace %s: %w", ns, err)
		}
		for i := range list.Items {
			rules = append(rules, mesh.DestinationRuleFrom(&list.Items[i]))
		}
	}
	forcing := mesh.MutualTLSRules(fleet.Namespace, root, mesh.FleetDestinations(fleet), rules)
	if len(forcing) == 0 {
		return nil, nil
	}
	return &blockage{reason: v1alpha1.ReasonMutualTLSDestinationRule, message: mesh.MutualTLSHoldMessage(fleet, string(change), forcing)}, nil
}

// listDestinationRules lists DestinationRules from their cache, which runs
// while the kind is served (optionalCaches), or from the API server.
func (r *FleetReconciler) listDestinationRules(ctx context.Context, list *unstructured.UnstructuredList, opts ...client.ListOption) error {
	if r.istioCaches != nil {
		return r.istioCaches.List(ctx, list, opts...)
	}
	return r.freshReader().List(ctx, list, opts...)
}

// fleetsHeldByDestinationRules maps a change of any DestinationRule to the
// fleets whose status says DestinationRules hold their mesh roll, so the
// roll resumes as soon as the rule is gone or changed instead of at the
// fleet's next periodic look. Which rule holds which fleet is decided by
// the fleet's own pass; a fleet not held is not woken.
func (r *FleetReconciler) fleetsHeldByDestinationRules(ctx context.Context, _ client.Object) []reconcile.Request {
	fleets := &v1alpha1.CelldFleetList{}
	// Only read here: the cache's own objects, not a copy of every fleet.
	if err := r.Client.List(ctx, fleets, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range fleets.Items {
		f := &fleets.Items[i]
		if c := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked)); c != nil &&
			c.Status == metav1.ConditionTrue && c.Reason == string(v1alpha1.ReasonMutualTLSDestinationRule) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(f)})
		}
	}
	return out
}
