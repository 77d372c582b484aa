package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch

// DeclarationsFinalizer holds a fleet until it has withdrawn the namespace
// labels it declared (enrollment request, edges).
const DeclarationsFinalizer = labels.FleetGroup + "/namespace-declarations"

// namespaceView is the fleet's namespace as the mesh contract reads it.
type namespaceView struct {
	ns       *corev1.Namespace
	state    contract.State
	problems []contract.Problem
}

func (r *FleetReconciler) observeNamespace(ctx context.Context, fleet *v1alpha1.CelldFleet) (namespaceView, error) {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: fleet.Namespace}, ns); err != nil {
		return namespaceView{}, err
	}
	st, problems := contract.Parse(ns.Labels)
	return namespaceView{ns: ns, state: st, problems: problems}, nil
}

func declarationManager(fleet *v1alpha1.CelldFleet) string {
	return contract.FieldManager(names.Operator, "fleet/"+fleet.Namespace+"/"+fleet.Name)
}

// declaration is what the fleet needs from its namespace. Enrollment, in
// modes auto (the default, also without spec.mesh) and enabled: the mesh
// seed's auto joins whenever a Ready ServiceMesh exists, and the request is
// how the mesh operator learns of it; where no ServiceMesh (or no licensed,
// Ready one) exists, nobody acts on it. And, while the namespace is
// enrolled, the cross-namespace edges namespace isolation must admit: the
// operator's namespace for /state reads and the routing source. A disabled
// fleet asks for nothing, and keeps its edges only until its last member
// has left the mesh (mesh.DeclaresEdges).
func declaration(fleet *v1alpha1.CelldFleet, in mesh.Intent, st mesh.State, operatorNS string) contract.Declaration {
	if !mesh.DeclaresEdges(in, st) {
		return contract.Declaration{}
	}
	// The edges go with the request, before any enrollment: the mesh
	// operator applies namespace isolation as it enrolls, and ztunnel
	// captures the members right after, so edges declared only once the
	// namespace is enrolled would leave the operator's /state reads (and
	// the routing source) denied in between (found by the transition
	// explorer). Where nobody enrolls the namespace, nobody reads them.
	d := contract.Declaration{Enroll: !in.Disabled, Edges: []string{operatorNS}}
	if fleet.Spec.Routing != nil {
		d.Edges = append(d.Edges, fleet.Spec.Routing.Source.Namespace)
	}
	return d
}

// freshReader reads past the cache, for decisions that must not rest on a
// stale namespace (see contract.ApplyLabels).
func (r *FleetReconciler) freshReader() client.Reader {
	if r.Reader != nil {
		return r.Reader
	}
	return r.Client
}

// reconcileDeclarations applies the fleet's namespace labels with its own
// field manager through the contract's one writer (contract.ApplyLabels):
// another writer's identical label is not disturbed, the label goes only
// with its last writer, an admin's core.navique.com/mesh=disabled is never
// replaced, and nothing is written when the labels already stand.
func (r *FleetReconciler) reconcileDeclarations(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed, view namespaceView, d contract.Declaration) error {
	want, err := d.Labels(fleet.Namespace)
	if err != nil {
		return err
	}
	// What the contract lets this fleet write now: on a namespace an admin
	// opted out, nothing it does not already hold, and then it needs no
	// finalizer either (an upgrade must not patch every such fleet).
	held := contract.LabelsHeldBy(view.ns, declarationManager(fleet))
	writable, withheld := contract.Withhold(view.ns.Labels, held, want)
	if len(writable)+len(held) > 0 && !controllerutil.ContainsFinalizer(fleet, DeclarationsFinalizer) {
		// The finalizer comes first: a fleet deleted right after declaring
		// must still withdraw its labels.
		added, err := r.addDeclarationsFinalizer(ctx, fleet)
		if err != nil {
			return err
		}
		controllerutil.AddFinalizer(fleet, DeclarationsFinalizer)
		r.gate.Wrote(client.ObjectKeyFromObject(fleet), added)
	}
	// A policy (RBAC, an admission webhook or policy) judged the write
	// itself: asking again before the fleet's poll, for the same labels on
	// the same namespace, would get the same answer (refusedDeclarations).
	key := types.NamespacedName{Namespace: fleet.Namespace, Name: fleet.Name}
	now := r.Now()
	if held := r.refusals.holds(key, want, view.ns.ResourceVersion, now, r.Config.StateInterval); held != nil {
		obs.declared = namespaceOutcome{reached: true, labels: want, refused: held}
		return nil
	}
	_, err = contract.ApplyLabels(ctx, r.Client, r.freshReader(), contract.WorkloadOperator, declarationManager(fleet), view.ns.DeepCopy(), want)
	switch {
	case refused(err):
		// Reported, and asked again at the fleet's poll.
		r.refusals.refused(key, want, view.ns.ResourceVersion, now, err)
		obs.declared = namespaceOutcome{reached: true, labels: want, refused: err}
	case err != nil:
		r.refusals.forget(key)
		return fmt.Errorf("declaring namespace labels: %w", err)
	default:
		r.refusals.forget(key)
		obs.declared = namespaceOutcome{reached: true, labels: want, withheld: withheld}
	}
	return nil
}

// namespaceOutcome is what reconcileDeclarations found.
type namespaceOutcome struct {
	// reached: the step ran to an answer; NamespaceDeclared keeps what it
	// said otherwise.
	reached bool
	// labels the fleet asks its namespace for.
	labels map[string]string
	// withheld: labels the fleet asks for but does not write, because an
	// admin set the namespace otherwise (contract.Withhold).
	withheld map[string]string
	// refused is the API server's refusal of the write.
	refused error
}

// addDeclarationsFinalizer adds the finalizer with the fleet's cached
// resourceVersion as the patch's lock, so the first pass over a new fleet
// reads nothing (a read per new fleet otherwise). Only when the lock
// fails (an earlier step of this pass, or someone else, wrote the fleet
// since the cache saw it) is the fleet read and the patch sent again.
// The patch goes through a copy: the answer may carry a newer spec, which
// this reconcile must not switch to halfway (nor report as observed). It returns the fleet as written.
func (r *FleetReconciler) addDeclarationsFinalizer(ctx context.Context, fleet *v1alpha1.CelldFleet) (*v1alpha1.CelldFleet, error) {
	added := fleet.DeepCopy()
	err := apply.AddFinalizer(ctx, r.Client, added, DeclarationsFinalizer)
	if !apierrors.IsConflict(err) {
		return added, err
	}
	added = &v1alpha1.CelldFleet{}
	if err := r.freshReader().Get(ctx, client.ObjectKeyFromObject(fleet), added); err != nil {
		return nil, fmt.Errorf("reading the fleet to add finalizer %s: %w", DeclarationsFinalizer, err)
	}
	return added, apply.AddFinalizer(ctx, r.Client, added, DeclarationsFinalizer)
}

// withdrawDeclarations removes the fleet's namespace labels and then its
// finalizer, on deletion.
func (r *FleetReconciler) withdrawDeclarations(ctx context.Context, fleet *v1alpha1.CelldFleet) error {
	if !controllerutil.ContainsFinalizer(fleet, DeclarationsFinalizer) {
		return nil
	}
	view, err := r.observeNamespace(ctx, fleet)
	if err != nil && client.IgnoreNotFound(err) != nil {
		return err
	}
	if err == nil {
		if _, err := contract.ApplyLabels(ctx, r.Client, r.freshReader(), contract.WorkloadOperator, declarationManager(fleet), view.ns, nil); err != nil {
			return fmt.Errorf("withdrawing namespace labels: %w", err)
		}
	}
	return apply.RemoveFinalizer(ctx, r.Client, fleet, DeclarationsFinalizer)
}

// namespaceToFleets wakes every fleet of a namespace whose labels changed.
func (r *FleetReconciler) namespaceToFleets(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1alpha1.CelldFleetList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetName())); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, f := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&f)})
	}
	return reqs
}
