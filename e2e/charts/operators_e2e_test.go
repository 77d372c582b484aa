//go:build e2e

package charts

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
)

var (
	fleetGVR = schema.GroupVersionResource{Group: "celld.eric.dev", Version: "v1alpha1", Resource: "celldfleets"}
	meshGVR  = schema.GroupVersionResource{Group: "core.navique.com", Version: "v1alpha1", Resource: "servicemeshes"}
)

// runOperator installs the chart's ServiceAccount and RBAC (as the e2e
// harness does), builds the operator and runs it as a process authenticated
// as that ServiceAccount, with the container arguments the chart renders for
// the same values (bind addresses moved to 127.0.0.1). So the operator runs
// with exactly the chart's rights and flags.
func runOperator(t *testing.T, c *cluster.Cluster, r release, set []string, tags ...string) *harness.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root := repoRoot(t)
	require.Equal(t, r.chart, r.name, "the harness installs releases named after their chart")
	chart := harness.Chart{Name: r.chart, Namespace: r.namespace, Set: set}
	require.NoError(t, harness.InstallRBAC(ctx, c, root, chart))

	var extra []string
	for _, s := range set {
		extra = append(extra, "--set", s)
	}
	m := render(t, r, nil, extra...)
	args := operatorContainer(t, deployment(t, m, r.namespace, r.name)).Args
	for i, a := range args {
		switch {
		case a == "--metrics-bind-address=:8080":
			args[i] = "--metrics-bind-address=127.0.0.1:0"
		case strings.HasPrefix(a, "--metrics-bind-address=:"):
			// A port the test chose (and will connect to), on loopback.
			args[i] = "--metrics-bind-address=127.0.0.1" + strings.TrimPrefix(a, "--metrics-bind-address=")
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			args[i] = "--health-probe-bind-address=127.0.0.1:0"
		}
	}

	work := t.TempDir()
	bin := filepath.Join(work, r.chart)
	started := time.Now()
	require.NoError(t, harness.Build(ctx, filepath.Join(root, r.chart), "./cmd/"+r.chart, bin, tags...))
	t.Logf("built %s in %s", r.chart, time.Since(started).Round(time.Millisecond))
	kubeconfig := filepath.Join(work, "kubeconfig")
	require.NoError(t, harness.ServiceAccountKubeconfig(ctx, c, r.namespace, chart.ServiceAccount(), kubeconfig))

	p := &harness.Process{
		Name: r.chart, Binary: bin, Args: args, Kubeconfig: kubeconfig,
		// The Deployment sets POD_NAMESPACE from the downward API.
		Env:     []string{"POD_NAMESPACE=" + r.namespace},
		LogPath: filepath.Join(work, r.chart+".log"),
	}
	require.NoError(t, p.Start())
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(p.LogPath)
			t.Logf("%s log:\n%s", r.chart, b)
		}
	})
	return p
}

// assertNothingForbidden fails when the operator's log shows a request the
// chart's RBAC refused.
func assertNothingForbidden(t *testing.T, p *harness.Process) {
	t.Helper()
	b, err := os.ReadFile(p.LogPath)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "forbidden") || strings.Contains(line, "is not allowed") {
			t.Errorf("%s was refused a request by its chart's RBAC: %s", p.Name, line)
		}
	}
}

// waitLeaderEvent waits for the core v1 Event leader election records on the
// operator's Lease: it needs the chart's grant on core Events.
func waitLeaderEvent(t *testing.T, cs kubernetes.Interface, namespace, lease string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Lease", "involvedObject.name": lease}.String(),
		})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "LeaderElection" && strings.Contains(e.Message, "became leader") {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "no LeaderElection Event for Lease %s/%s", namespace, lease)
}

// TestFleetOperatorWithFleetNamespaces runs the fleet operator under the
// per-namespace RBAC of fleetNamespaces=[a,b]: a fleet in a is reconciled
// (Services, NetworkPolicy, ServiceAccount, StatefulSet, status) with
// nothing refused; a fleet in c, outside the list, is left alone.
func TestFleetOperatorWithFleetNamespaces(t *testing.T) {
	c := upAPIServer(t, operatorCRDPaths(t)...)
	cs := clientset(t, c)
	createNamespaces(t, cs, "ops", "a", "b", "c")
	r := release{chart: fleetChart, name: fleetChart, namespace: "ops"}
	p := runOperator(t, c, r, []string{"fleetNamespaces={a,b}", "networkPolicyEnforced=true"})

	dyn, err := dynamic.NewForConfig(c.REST)
	require.NoError(t, err)
	ctx := context.Background()
	sample := loadSample(t, "fleet-basic.yaml").all("CelldFleet")[0]
	name := sample.GetName()
	for _, ns := range []string{"a", "c"} {
		f := sample.DeepCopy()
		f.SetNamespace(ns)
		_, err := dyn.Resource(fleetGVR).Namespace(ns).Create(ctx, f, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	var fleet *unstructured.Unstructured
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, os.ErrProcessDone
		}
		fleet, err = dyn.Resource(fleetGVR).Namespace("a").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		observed, _, _ := unstructured.NestedInt64(fleet.Object, "status", "observedGeneration")
		_, stsErr := cs.AppsV1().StatefulSets("a").Get(ctx, name, metav1.GetOptions{})
		return observed == fleet.GetGeneration() && stsErr == nil, nil
	})
	require.NoError(t, err, "the fleet in a was not reconciled; status: %v", fleet)

	for _, get := range []func() error{
		func() error { _, err := cs.CoreV1().Services("a").Get(ctx, name, metav1.GetOptions{}); return err },
		func() error {
			_, err := cs.CoreV1().Services("a").Get(ctx, name+"-peers", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.NetworkingV1().NetworkPolicies("a").Get(ctx, name, metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts("a").Get(ctx, name, metav1.GetOptions{})
			return err
		},
	} {
		assert.NoError(t, get())
	}
	conditions, _, _ := unstructured.NestedSlice(fleet.Object, "status", "conditions")
	assert.NotEmpty(t, conditions)
	for _, cond := range conditions {
		msg, _, _ := unstructured.NestedString(cond.(map[string]any), "message")
		assert.NotContains(t, strings.ToLower(msg), "forbidden")
	}

	waitLeaderEvent(t, cs, "ops", "fleet-operator.celld.eric.dev")

	// Outside fleetNamespaces: untouched (the operator neither watches nor
	// may write there).
	other, err := dyn.Resource(fleetGVR).Namespace("c").Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	_, hasStatus := other.Object["status"]
	assert.False(t, hasStatus, "the fleet in c got a status: %v", other.Object["status"])
	_, err = cs.CoreV1().Services("c").Get(ctx, name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Service in c: %v", err)

	require.True(t, p.Running(), "the operator exited")
	assertNothingForbidden(t, p)
}

// TestMeshOperatorReadsOnlyItsLicense runs the mesh operator under its
// chart's RBAC: it reads the license Secret the chart names (a malformed
// one here, so the mesh is PreviewLocked for what the license says, not for
// a refused read), records its leader Event, and is refused nothing.
func TestMeshOperatorReadsOnlyItsLicense(t *testing.T) {
	c := upAPIServer(t, operatorCRDPaths(t)...)
	cs := clientset(t, c)
	const ns, secret = "mesh-system", "acme-license"
	createNamespaces(t, cs, ns)
	ctx := context.Background()
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret},
		Data:       map[string][]byte{"license": []byte("not a license")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	r := release{chart: meshChart, name: meshChart, namespace: ns}
	p := runOperator(t, c, r, []string{"license.secretName=" + secret})

	dyn, err := dynamic.NewForConfig(c.REST)
	require.NoError(t, err)
	mesh := loadSample(t, "servicemesh.yaml")[0]
	_, err = dyn.Resource(meshGVR).Create(ctx, mesh, metav1.CreateOptions{})
	require.NoError(t, err)

	var locked string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if !p.Running() {
			return false, os.ErrProcessDone
		}
		got, err := dyn.Resource(meshGVR).Get(ctx, "cluster", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, cond := range conditions {
			m := cond.(map[string]any)
			if m["type"] == "PreviewLocked" && m["status"] == "True" {
				locked, _ = m["message"].(string)
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "the ServiceMesh never became PreviewLocked")
	assert.Contains(t, locked, "Secret "+ns+"/"+secret, "the operator read the Secret the chart named")
	assert.NotContains(t, locked, "cannot read", "the read was not refused")
	assert.NotContains(t, locked, "does not exist")

	waitLeaderEvent(t, cs, ns, "mesh-operator.core.navique.com")
	require.True(t, p.Running(), "the operator exited")
	assertNothingForbidden(t, p)
}
