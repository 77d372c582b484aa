// Command mesh-operator runs the cluster's ServiceMesh: it installs or
// adopts Istio, enrolls namespaces, applies mTLS and isolation.
package main

import (
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/controller"
	"github.com/ericdev/fleetmesh/shared/manager"
)

func main() {
	var cfg controller.Config
	manager.Main(manager.Operator{
		Name:             "mesh-operator",
		LeaderElectionID: "mesh-operator.core.navique.com",
		BindFlags:        cfg.BindFlags,
		Configure: func(common *manager.Options) error {
			cfg.OperatorNamespace = common.Namespace
			return cfg.Validate()
		},
		AddToScheme: []func(*runtime.Scheme) error{v1alpha1.AddToScheme},
		Setup:       func(mgr ctrl.Manager) error { return controller.SetupWithManager(mgr, cfg) },
	})
}
