package controller

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// RestrictCache narrows the manager's cache to what the reconciler reads:
// the watched namespaces (all when none are configured), and of the kinds
// that exist in large numbers in a cluster only the fleets' own objects.
func RestrictCache(cfg Config, o *cache.Options) {
	if len(cfg.WatchNamespaces) > 0 {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.WatchNamespaces {
			o.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	// Member Pods and claims only, not every Pod and claim of the cluster.
	members := k8slabels.SelectorFromSet(k8slabels.Set{labels.Name: names.Runtime})
	// Of the kinds fleets own, only what the operator made: every object it
	// applies carries this label. A foreign object with a fleet's name is
	// not in the cache; the Applier's create-only apply on a cache miss is
	// refused because of it, and only then is it read, so such an object is
	// still reported as an ownership conflict and never adopted.
	ours := k8slabels.SelectorFromSet(k8slabels.Set{labels.ManagedBy: names.Operator})
	// The operator reads no managed fields of the fleets, their members and
	// claims, or the objects it applies (an apply compares the applied-hash
	// annotation and the fields it sets): they are dropped from the cache,
	// a few KiB per object and a conversion per read at 1,000 fleets (issue
	// #20's memory target). Namespaces keep theirs: which contract labels a
	// writer holds is read from them.
	strip := cache.TransformStripManagedFields()
	o.ByObject = map[client.Object]cache.ByObject{
		&v1alpha1.CelldFleet{}:          {Transform: strip},
		&corev1.Pod{}:                   {Label: members, Transform: strip},
		&corev1.PersistentVolumeClaim{}: {Label: members, Transform: strip},
		&appsv1.StatefulSet{}:           {Label: ours, Transform: strip},
		&corev1.Service{}:               {Label: ours, Transform: strip},
		&corev1.ServiceAccount{}:        {Label: ours, Transform: strip},
		&networkingv1.NetworkPolicy{}:   {Label: ours, Transform: strip},
		&networkingv1.Ingress{}:         {Label: ours, Transform: strip},
	}
}

// clientPodSource watches the Pods that name a fleet as their server
// (celld.eric.dev/client-of), through a cache of its own that holds only
// those Pods: the manager's Pod cache holds member Pods only. Under
// isolation strict their ServiceAccounts are the identities a fleet admits
// on 8080, so a client that comes, goes or changes its label wakes its
// fleet. Status-only changes wake nothing.
func clientPodSource(mgr ctrl.Manager, cfg Config) (source.Source, error) {
	has, err := k8slabels.NewRequirement(labels.ClientOf, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	opts := cache.Options{
		HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultLabelSelector: k8slabels.NewSelector().Add(*has),
		DefaultTransform:     cache.TransformStripManagedFields(),
	}
	if len(cfg.WatchNamespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.WatchNamespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	clients, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(clients); err != nil {
		return nil, err
	}
	changed := predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[labels.ClientOf] != e.ObjectNew.GetLabels()[labels.ClientOf] ||
			(e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil)
	}}
	return source.Kind(clients, client.Object(&corev1.Pod{}), handler.EnqueueRequestsFromMapFunc(clientToFleet), changed), nil
}

// clientToFleet maps a client Pod to the fleet it names in its namespace.
func clientToFleet(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[labels.ClientOf]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}
