package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
	"github.com/ericdev/fleetmesh/e2e/harness"
)

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dir := fs.String("dir", ".testbed", "work directory: kubeconfig, logs, etcd data, markers")
	nodes := fs.Int("nodes", 3, "kwok nodes (0: API server only)")
	maxPods := fs.Int("max-pods", local.DefaultMaxPods, "pod capacity per node")
	crds := fs.String("crds", "", "comma-separated CRD/manifest files or directories that must exist")
	optional := fs.String("optional-crds", defaultOptionalCRDs(), "comma-separated CRD directories installed if present")
	noDefault := fs.Bool("no-default-crds", false, "skip the Gateway API and Istio CRDs")
	timeout := fs.Duration("timeout", 2*time.Minute, "start-up timeout")
	operators := fs.Bool("operators", false, "also run both operators as processes under their charts' RBAC (builds them; needs bin/helm)")
	simulate := fs.Bool("simulate-mesh", false, "also play the Sail Operator's controller and istio-cni (SIMULATED: no container runtime here), so a ServiceMesh can become Ready")
	enforced := fs.Bool("network-policy-enforced", true, "the fleet operator's networkPolicyEnforced assertion (with --operators)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	if pid, _ := readPID(abs, pidFile); testbedAlive(pid) {
		return fmt.Errorf("a testbed (pid %d) already runs in %s; run `testbed down --dir %s` first", pid, abs, *dir)
	}
	removeMarkers(abs)
	_ = os.Remove(filepath.Join(abs, failedFile))
	if err := writePID(abs); err != nil {
		return err
	}
	defer removeMarkers(abs)

	// Signals cancel a start-up in progress too; Up then cleans up itself.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	started := time.Now()
	// The bed adds the celld stand-in on every member Pod IP (and, with
	// --operators, both operators) to the local control plane.
	bed, err := harness.StartBed(ctx, harness.BedOptions{
		Root: root, WorkDir: abs, Nodes: *nodes,
		Operators: *operators, NetworkPolicyEnforced: *enforced, SimulateMesh: *simulate,
		Log: os.Stderr,
		Cluster: local.Options{
			WorkDir:          abs,
			MaxPodsPerNode:   *maxPods,
			NoDefaultCRDs:    *noDefault,
			CRDPaths:         splitList(*crds),
			OptionalCRDPaths: splitList(*optional),
			StartTimeout:     *timeout,
		},
	})
	if err != nil {
		writeFailed(abs, err)
		return err
	}
	if err := writeReady(abs, bed.Cluster.Kubeconfig); err != nil {
		bed.Stop()
		return err
	}
	fmt.Printf("testbed ready: kubeconfig=%s nodes=%d operators=%t simulated-mesh=%t startup=%s (stop: testbed down --dir %s)\n",
		bed.Cluster.Kubeconfig, *nodes, *operators, *simulate, time.Since(started).Round(10*time.Millisecond), *dir)

	runErr := supervise(ctx, bed)
	fmt.Fprintln(os.Stderr, "testbed: stopping")
	bed.Stop()
	return runErr
}

// supervise returns nil when a signal asks to stop, or an error when a
// component dies, so the Makefile notices a broken test bed.
func supervise(ctx context.Context, bed *harness.Bed) error {
	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := bed.Healthy(); err != nil {
				return err
			}
		}
	}
}

// defaultOptionalCRDs are the operators' generated CRDs, which exist once
// `make generate` ran.
func defaultOptionalCRDs() string {
	root, err := cluster.RepoRoot()
	if err != nil {
		return ""
	}
	return strings.Join([]string{
		filepath.Join(root, "fleet-operator", "config", "crd", "bases"),
		filepath.Join(root, "mesh-operator", "config", "crd", "bases"),
	}, ",")
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
