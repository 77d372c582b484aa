// Command fleet-operator runs CelldFleets: members with disks, their
// Services, NetworkPolicies, mesh integration and routing.
package main

import (
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/controller"
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
		AddToScheme:   []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		Cache:         func(o *cache.Options) { controller.RestrictCache(cfg, o) },
		Setup:         func(mgr ctrl.Manager) error { return controller.SetupWithManager(mgr, cfg) },
		StartupValues: func() []any { return []any{"networkPolicyEnforced", cfg.NetworkPolicyEnforced} },
		// A thousand fleets created at once on the bench's two cores
		// converged in about 320 s unpaced and in 205 s at 100 requests a
		// second (bench/results/history.md, thirteenth round).
		APIPace: manager.Pace{QPS: 100, Burst: 200},
	})
}
