package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	// not in the cache; the Applier confirms a cache miss against the API
	// server before it writes, so such an object is still reported as an
	// ownership conflict and never adopted.
	ours := k8slabels.SelectorFromSet(k8slabels.Set{labels.ManagedBy: names.Operator})
	o.ByObject = map[client.Object]cache.ByObject{
		&corev1.Pod{}:                   {Label: members},
		&corev1.PersistentVolumeClaim{}: {Label: members},
		&appsv1.StatefulSet{}:           {Label: ours},
		&corev1.Service{}:               {Label: ours},
		&corev1.ServiceAccount{}:        {Label: ours},
		&networkingv1.NetworkPolicy{}:   {Label: ours},
		&networkingv1.Ingress{}:         {Label: ours},
	}
}
