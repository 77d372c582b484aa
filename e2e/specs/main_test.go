//go:build e2e

// Package specs holds the end-to-end specs. Under the local provider they
// run against a real control plane with kwok nodes, the celld stand-in on
// every member Pod's loopback IP, and both operators as processes under
// their charts' RBAC.
package specs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

var (
	bed *harness.Bed
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := cluster.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	work, err := os.MkdirTemp("", "e2e-bed-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bed, err = harness.StartBed(ctx, harness.BedOptions{
		Root: root, WorkDir: work, Nodes: 3, Operators: true, NetworkPolicyEnforced: true,
		// Long enough that a roll of 3 members lasts several seconds, so the
		// specs can kill the operator while one is really under way.
		StandinStartupDelay: 3 * time.Second,
		Log:                 os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the test bed:", err)
		return 1
	}
	code := 1
	defer func() {
		bed.Stop()
		if code == 0 {
			_ = os.RemoveAll(work)
		} else {
			fmt.Fprintf(os.Stderr, "test bed files kept in %s (operator logs: %s)\n", work, filepath.Join(work, "*.log"))
		}
	}()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = fleetv1.AddToScheme(scheme)
	_ = meshv1.AddToScheme(scheme)
	if k8s, err = client.New(bed.Cluster.REST, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code = m.Run()
	return code
}
