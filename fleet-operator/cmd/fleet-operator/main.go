// Command fleet-operator runs CelldFleets: members with disks, their
// Services, NetworkPolicies, mesh integration and routing.
package main

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/controller"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	sharedlabels "github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/manager"
)

func main() {
	var cfg controller.Config
	manager.Main(manager.Operator{
		Name:             "fleet-operator",
		LeaderElectionID: "fleet-operator.celld.eric.dev",
		BindFlags:        cfg.BindFlags,
		Configure: func(common *manager.Options) error {
			cfg.OperatorNamespace = common.Namespace
			return cfg.Validate()
		},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		Cache: func(o *cache.Options) {
			if len(cfg.WatchNamespaces) > 0 {
				o.DefaultNamespaces = map[string]cache.Config{}
				for _, ns := range cfg.WatchNamespaces {
					o.DefaultNamespaces[ns] = cache.Config{}
				}
			}
			// Cache only member Pods and claims, not every Pod and claim of the cluster.
			members := labels.SelectorFromSet(labels.Set{sharedlabels.Name: names.Runtime})
			o.ByObject = map[client.Object]cache.ByObject{
				&corev1.Pod{}:                   {Label: members},
				&corev1.PersistentVolumeClaim{}: {Label: members},
			}
		},
		Setup:         func(mgr ctrl.Manager) error { return controller.SetupWithManager(mgr, cfg) },
		StartupValues: func() []any { return []any{"networkPolicyEnforced", cfg.NetworkPolicyEnforced} },
	})
}
