package kind

import (
	"fmt"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// ClusterConfig builds the kind cluster configuration for opts: one
// control-plane node plus opts.Workers workers. Workers carry the label
// fleetmesh.dev/role=worker so specs can keep members off the control plane.
func ClusterConfig(opts Options) (*v1alpha4.Cluster, error) {
	if opts.Workers < 0 {
		return nil, fmt.Errorf("workers must not be negative, got %d", opts.Workers)
	}
	cfg := &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     opts.Name,
		Nodes:    []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}},
		Networking: v1alpha4.Networking{
			PodSubnet:         opts.PodSubnet,
			ServiceSubnet:     opts.ServiceSubnet,
			DisableDefaultCNI: opts.DisableDefaultCNI,
		},
	}
	for range opts.Workers {
		cfg.Nodes = append(cfg.Nodes, v1alpha4.Node{
			Role:   v1alpha4.WorkerRole,
			Labels: map[string]string{"fleetmesh.dev/role": "worker"},
		})
	}
	return cfg, nil
}

// RenderConfig renders the configuration kind is created with, as YAML.
func RenderConfig(opts Options) ([]byte, error) {
	cfg, err := ClusterConfig(opts)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(cfg)
}
