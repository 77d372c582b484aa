//go:build e2e

package charts

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/standin"
)

// releaseCharts returns the packaged charts of a release: those of
// FLEETMESH_RELEASE_DIR (the directory `make release-dry-run` wrote, e.g.
// bin/release) when set, else packaged here by the release builder itself
// (tools/release -only charts), exactly as the dry run packages them.
func releaseCharts(t *testing.T) map[string]string {
	t.Helper()
	dir := os.Getenv("FLEETMESH_RELEASE_DIR")
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "release")
		cmd := exec.Command("go", "run", ".", "-root", repoRoot(t), "-out", dir, "-only", "charts")
		cmd.Dir = filepath.Join(repoRoot(t), "tools", "release")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "tools/release -only charts:\n%s", out)
	}
	charts := map[string]string{}
	for _, op := range []string{fleetChart, meshChart} {
		m, err := filepath.Glob(filepath.Join(dir, "charts", op+"-*.tgz"))
		require.NoError(t, err)
		require.Len(t, m, 1, "one packaged %s chart in %s/charts", op, dir)
		charts[op] = m[0]
	}
	return charts
}

// TestPackagedChartsRunAFleet installs both charts as a release publishes
// them (the .tgz packages, not the source directories) with helm on the
// local control plane, runs the fleet operator as a process with exactly
// the arguments, environment and ServiceAccount of the Deployment the
// packaged chart installed (the local tier has no container runtime), and a
// fleet becomes Ready. The mesh chart is installed beside it: the release's
// mesh operator cannot run here (it trusts only the vendor's license key).
func TestPackagedChartsRunAFleet(t *testing.T) {
	// Generous: the 2-core machine is shared, and the control plane alone
	// took 43 s under load.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	charts := releaseCharts(t)

	dir, err := cluster.BinDir()
	require.NoError(t, err)
	require.NoError(t, cluster.RequireBinaries(dir, "etcd", "kube-apiserver", "kwok", "helm"))
	// No operator CRDs up front: the packaged charts install them.
	p := local.New(local.Options{Nodes: 1, Log: logWriter{t}})
	c, err := p.Up(ctx)
	require.NoError(t, err, "starting the local control plane")
	t.Cleanup(func() { _ = p.Down(context.Background()) })
	cs := clientset(t, c)
	info, err := cs.Discovery().ServerVersion()
	require.NoError(t, err)
	require.False(t, strings.HasPrefix(info.GitVersion, "v0.0.0"), "the API server reports %s: a packaged chart's kubeVersion cannot be checked against it (make tools stamps the release)", info.GitVersion)

	// The celld stand-in serves every member Pod's ports.
	sctx, stop := context.WithCancel(context.Background())
	standinDone := make(chan struct{})
	go func() {
		defer close(standinDone)
		_ = standin.Run(sctx, c.REST, &standin.Pool{StartupDelay: time.Second}, func(err error) { t.Logf("standin: %v", err) })
	}()
	t.Cleanup(func() { stop(); <-standinDone })

	require.NoError(t, cluster.HelmInstall(ctx, helmBin(t), c.Kubeconfig, cluster.HelmRelease{
		Name: meshRelease.name, Namespace: meshRelease.namespace, Chart: charts[meshChart], Timeout: time.Minute,
		Set: []string{"license.create=true", "license.value=not-a-license", "sail.install=false"},
	}))
	require.NoError(t, cluster.HelmInstall(ctx, helmBin(t), c.Kubeconfig, cluster.HelmRelease{
		Name: fleetRelease.name, Namespace: fleetRelease.namespace, Chart: charts[fleetChart], Timeout: time.Minute,
		// The admin's confirmation that the CNI enforces NetworkPolicy
		// (without it no member Pod is created: NetworkPolicyNotConfirmed).
		Set: []string{"networkPolicyEnforced=true"},
	}))
	require.NoError(t, cluster.WaitCRDsEstablished(ctx, c.REST, "celldfleets.celld.eric.dev", "servicemeshes.core.navique.com"))
	_, err = cs.AppsV1().Deployments(meshRelease.namespace).Get(ctx, meshRelease.name, metav1.GetOptions{})
	require.NoError(t, err, "the packaged mesh chart's Deployment")

	// The fleet operator as the packaged chart's Deployment runs it.
	d, err := cs.AppsV1().Deployments(fleetRelease.namespace).Get(ctx, fleetRelease.name, metav1.GetOptions{})
	require.NoError(t, err)
	pod := d.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	var args []string
	for _, a := range pod.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=127.0.0.1:0"
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=127.0.0.1:0"
		}
		args = append(args, a)
	}
	var env []string
	for _, e := range pod.Containers[0].Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+d.Namespace)
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			// The kubelet's answer: the limit in units of the divisor.
			lim := pod.Containers[0].Resources.Limits.Memory().Value() / e.ValueFrom.ResourceFieldRef.Divisor.Value()
			env = append(env, fmt.Sprintf("%s=%d", e.Name, lim))
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		default:
			t.Fatalf("env %s comes from %+v, which this test cannot resolve", e.Name, e.ValueFrom)
		}
	}
	work := t.TempDir()
	bin := filepath.Join(work, "fleet-operator")
	require.NoError(t, harness.Build(ctx, filepath.Join(repoRoot(t), "fleet-operator"), "./cmd/fleet-operator", bin))
	kubeconfig := filepath.Join(work, "fleet-operator.kubeconfig")
	require.NoError(t, harness.ServiceAccountKubeconfig(ctx, c, d.Namespace, pod.ServiceAccountName, kubeconfig))
	op := &harness.Process{Name: "fleet-operator", Binary: bin, Args: args, Env: env, Kubeconfig: kubeconfig, LogPath: filepath.Join(work, "fleet-operator.log")}
	require.NoError(t, op.Start())
	t.Cleanup(func() {
		_ = op.Stop(10 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(op.LogPath)
			t.Logf("fleet-operator log:\n%s", b)
		}
	})

	createNamespaces(t, cs, "app")
	require.NoError(t, applyYAML(t, c, "apiVersion: celld.eric.dev/v1alpha1\nkind: CelldFleet\nmetadata:\n  name: f\n  namespace: app\nspec:\n  image: registry.example/celld:1.0.0\n  replicas: 2\n"))
	dyn, err := dynamic.NewForConfig(c.REST)
	require.NoError(t, err)
	fleets := schema.GroupVersionResource{Group: "celld.eric.dev", Version: "v1alpha1", Resource: "celldfleets"}
	last := ""
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		f, err := dyn.Resource(fleets).Namespace("app").Get(ctx, "f", metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready, gen := readyCondition(f)
		status, _, _ := unstructured.NestedMap(f.Object, "status")
		last = fmt.Sprintf("generation %d, status %v", f.GetGeneration(), status)
		return ready != nil && ready["status"] == "True" && gen == f.GetGeneration(), nil
	})
	require.NoError(t, err, "the fleet becomes Ready under the packaged chart's operator; last: %s", last)
}

// readyCondition is the fleet's Ready condition and its observedGeneration.
func readyCondition(f *unstructured.Unstructured) (map[string]any, int64) {
	conds, _, _ := unstructured.NestedSlice(f.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == "Ready" {
			g, _ := m["observedGeneration"].(int64)
			return m, g
		}
	}
	return nil, 0
}
