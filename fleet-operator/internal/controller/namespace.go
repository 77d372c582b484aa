package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch

// DeclarationsFinalizer holds a fleet until it has withdrawn the namespace
// labels it declared (enrollment request, edges).
const DeclarationsFinalizer = labels.FleetGroup + "/namespace-declarations"

// namespaceView is the fleet's namespace as the mesh contract reads it.
type namespaceView struct {
	state    contract.State
	problems []contract.Problem
	// declared are the label keys this fleet's field manager owns there.
	declared []string
}

func (r *FleetReconciler) observeNamespace(ctx context.Context, fleet *v1alpha1.CelldFleet) (namespaceView, error) {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: fleet.Namespace}, ns); err != nil {
		return namespaceView{}, err
	}
	st, problems := contract.Parse(ns.Labels)
	return namespaceView{state: st, problems: problems, declared: labelsOwnedBy(ns, declarationManager(fleet))}, nil
}

func declarationManager(fleet *v1alpha1.CelldFleet) string {
	return contract.FieldManager(names.Operator, "fleet/"+fleet.Namespace+"/"+fleet.Name)
}

// declaration is what the fleet needs from its namespace: enrollment when it
// asks for the mesh, and, while the namespace is enrolled, the
// cross-namespace edges namespace isolation must admit: the operator's
// namespace for /state reads and the routing source.
func declaration(fleet *v1alpha1.CelldFleet, view namespaceView, in mesh.Intent, operatorNS string) contract.Declaration {
	if in.Disabled {
		return contract.Declaration{}
	}
	d := contract.Declaration{Enroll: fleet.Spec.Mesh != nil && fleet.Spec.Mesh.Mode == v1alpha1.MeshEnabled}
	// Edges matter only to an enrolled namespace's isolation; elsewhere they
	// would be labels nobody reads.
	if view.state.Enrolled {
		d.Edges = []string{operatorNS}
		if fleet.Spec.Routing != nil {
			d.Edges = append(d.Edges, fleet.Spec.Routing.Source.Namespace)
		}
	}
	return d
}

// reconcileDeclarations applies the fleet's namespace labels with its own
// field manager, so another writer's identical label is not disturbed and
// the label goes only with its last writer. Nothing is written when the
// labels already stand as declared.
func (r *FleetReconciler) reconcileDeclarations(ctx context.Context, fleet *v1alpha1.CelldFleet, view namespaceView, d contract.Declaration) error {
	want, err := d.Labels(fleet.Namespace)
	if err != nil {
		return err
	}
	if len(want) > 0 && !controllerutil.ContainsFinalizer(fleet, DeclarationsFinalizer) {
		// The finalizer comes first: a fleet deleted right after declaring
		// must still withdraw its labels. The patch goes through a copy: the
		// answer may carry a newer spec, which this reconcile must not
		// switch to halfway (nor report as observed).
		obj := fleet.DeepCopy()
		patch := client.MergeFrom(obj.DeepCopy())
		controllerutil.AddFinalizer(obj, DeclarationsFinalizer)
		if err := r.Client.Patch(ctx, obj, patch); err != nil {
			return err
		}
		controllerutil.AddFinalizer(fleet, DeclarationsFinalizer)
	}
	if sameKeys(view.declared, want) && satisfied(view, want) {
		return nil
	}
	ac, err := contract.NamespaceApply(fleet.Namespace, d)
	if err != nil {
		return err
	}
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(declarationManager(fleet)), client.ForceOwnership); err != nil {
		return fmt.Errorf("declaring namespace labels: %w", err)
	}
	return nil
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
	if err == nil && len(view.declared) > 0 {
		ac, _ := contract.NamespaceApply(fleet.Namespace, contract.Declaration{})
		if err := r.Client.Apply(ctx, ac, client.FieldOwner(declarationManager(fleet)), client.ForceOwnership); err != nil {
			return fmt.Errorf("withdrawing namespace labels: %w", err)
		}
	}
	patch := client.MergeFrom(fleet.DeepCopy())
	controllerutil.RemoveFinalizer(fleet, DeclarationsFinalizer)
	return r.Client.Patch(ctx, fleet, patch)
}

func satisfied(view namespaceView, want map[string]string) bool {
	for k := range want {
		found := false
		for _, d := range view.declared {
			found = found || d == k
		}
		if !found {
			return false
		}
	}
	return true
}

func sameKeys(have []string, want map[string]string) bool {
	return len(have) == len(want) && satisfied(namespaceView{declared: have}, want)
}

// labelsOwnedBy lists the label keys a field manager owns on an object,
// from its managedFields.
func labelsOwnedBy(obj client.Object, manager string) []string {
	var keys []string
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager != manager || mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]map[string]any
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
			continue
		}
		for k := range fields["f:metadata"]["f:labels"] {
			if len(k) > 2 && k[:2] == "f:" {
				keys = append(keys, k[2:])
			}
		}
	}
	return keys
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
