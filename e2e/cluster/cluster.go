// Package cluster defines the small contract every e2e cluster provider meets
// (a local control plane with kwok nodes here, kind in GitHub Actions) and the
// helpers they share: locating the repository's tools, installing CRDs from
// their owners' modules, waiting for the API server, watching Pod IPs and
// installing Helm charts.
//
// Specs are written against Provider and Cluster only, so the same spec code
// runs on both tiers.
package cluster

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Provider creates and destroys one cluster. Up returns once the cluster
// accepts requests and the requested CRDs are Established; Down releases
// everything Up started and is safe to call more than once, and after a failed
// Up.
type Provider interface {
	// Name identifies the provider in logs and test names ("local", "kind").
	Name() string
	Up(ctx context.Context) (*Cluster, error)
	Down(ctx context.Context) error
}

// Cluster is what a spec needs to talk to a running cluster.
type Cluster struct {
	// Name of the cluster (kind cluster name, or "local").
	Name string
	// Kubeconfig is the path of an admin kubeconfig file, for tools that
	// shell out (kubectl, helm).
	Kubeconfig string
	// REST is the admin client configuration for in-process clients.
	REST *rest.Config
	// WorkDir holds the provider's state, logs and files, if it has any.
	WorkDir string
}

// Clientset returns a typed client for the cluster's admin identity.
func (c *Cluster) Clientset() (kubernetes.Interface, error) {
	if c == nil || c.REST == nil {
		return nil, fmt.Errorf("cluster has no REST config")
	}
	return kubernetes.NewForConfig(c.REST)
}
