// Command fleet-operator runs CelldFleets: members with disks, their
// Services, NetworkPolicies, mesh integration and routing.
package main

import (
	"flag"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-operator:", err)
		os.Exit(1)
	}
}

func run() error {
	var common manager.Options
	var cfg controller.Config
	common.Bind(flag.CommandLine, "fleet-operator.celld.eric.dev")
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
	mgr, err := common.NewManager(scheme, func(o *ctrl.Options) {
		// Cache only member Pods, not every Pod of the cluster.
		if len(cfg.WatchNamespaces) > 0 {
			o.Cache.DefaultNamespaces = map[string]cache.Config{}
			for _, ns := range cfg.WatchNamespaces {
				o.Cache.DefaultNamespaces[ns] = cache.Config{}
			}
		}
		o.Cache.ByObject = map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{sharedlabels.Name: names.Runtime})},
		}
	})
	if err != nil {
		return err
	}
	if err := controller.SetupWithManager(mgr, cfg); err != nil {
		return fmt.Errorf("setting up controllers: %w", err)
	}
	ctrl.Log.WithName("setup").Info("starting fleet-operator", "namespace", cfg.OperatorNamespace, "networkPolicyEnforced", cfg.NetworkPolicyEnforced)
	return mgr.Start(ctrl.SetupSignalHandler())
}
