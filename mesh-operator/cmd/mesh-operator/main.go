// Command mesh-operator runs the cluster's ServiceMesh: it installs or
// adopts Istio, enrolls namespaces, applies mTLS and isolation.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/controller"
	"github.com/ericdev/fleetmesh/shared/manager"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mesh-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var common manager.Options
	var cfg controller.Config
	common.Bind(flag.CommandLine, "mesh-operator.core.navique.com")
	cfg.BindFlags(flag.CommandLine)
	flag.Parse()
	if err := common.Validate(); err != nil {
		return err
	}
	cfg.OperatorNamespace = common.Namespace
	if err := cfg.Validate(); err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := common.NewManager(scheme, nil)
	if err != nil {
		return err
	}
	if err := controller.SetupWithManager(mgr, cfg); err != nil {
		return fmt.Errorf("setting up controllers: %w", err)
	}
	ctrl.Log.WithName("setup").Info("starting mesh-operator", "namespace", cfg.OperatorNamespace)
	return mgr.Start(ctrl.SetupSignalHandler())
}
