//go:build realnode

// Package realnode is the real-node tier (`make test-realnode`, root only):
// the operators' and the celld stand-in's images built from this tree,
// both packaged charts installed with Helm on a control plane with one real
// kubelet (e2e/cluster/real), fleets of real Pods, and every NetworkPolicy
// verdict `kubectl celld access` gives checked against real packets. The host
// is read before and after; anything left behind fails the test.
package realnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/real"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

const (
	fleetRelease, fleetNS = "fleet-operator", "fleet-system"
	meshRelease, meshNS   = "mesh-operator", "mesh-system"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// env is what the specs share: one cluster for the whole run.
type env struct {
	t       *testing.T
	c       *cluster.Cluster
	cs      kubernetes.Interface
	k8s     client.Client
	rel     *real.Release
	plugin  string // kubectl-celld built from this tree
	license string // mesh-license, the vendor build (keygen, sign), built from this tree
	work    string // the test's temporary directory
	standin string // the stand-in's image reference
	timings []string
	// networkOnly compares packets with the NetworkPolicy layer's verdict
	// alone (an Istio layer that applies cannot be judged here).
	networkOnly bool
}

func (e *env) timing(what string, since time.Time) {
	line := fmt.Sprintf("%-58s %8s", what, time.Since(since).Round(100*time.Millisecond))
	e.timings = append(e.timings, line)
	e.t.Log("timing: " + line)
}

// TestRealNode brings the real node up once and runs the specs on it in
// order; the host must be as it was once the node is down.
func TestRealNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the real-node tier runs as root (namespaces, mounts, cgroups); see docs/development.md")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := real.Preflight(binDir, "/usr/sbin/runc"); err != nil {
		t.Fatal(err)
	}
	before, err := real.ReadHostState()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t}
	defer func() {
		t.Log("timings:\n  " + strings.Join(e.timings, "\n  "))
	}()

	start := time.Now()
	work := t.TempDir()
	e.rel, err = real.BuildImages(ctx, root, binDir, filepath.Join(work, "images"))
	if err != nil {
		t.Fatal(err)
	}
	e.timing("images and charts (tools/release) "+e.rel.Version, start)
	e.standin = "ghcr.io/ericdev/celld-standin:" + e.rel.Version

	start = time.Now()
	e.plugin = filepath.Join(work, "kubectl-celld")
	build := exec.CommandContext(ctx, "go", "build", "-o", e.plugin, "./cmd/kubectl-celld")
	build.Dir = filepath.Join(root, "fleet-operator")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-celld: %v\n%s", err, out)
	}
	e.timing("kubectl-celld", start)
	start = time.Now()
	e.work = work
	e.license = filepath.Join(work, "mesh-license")
	build = exec.CommandContext(ctx, "go", "build", "-tags", "licensevendor", "-o", e.license, "./cmd/mesh-license")
	build.Dir = filepath.Join(root, "mesh-operator")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build mesh-license (licensevendor): %v\n%s", err, out)
	}
	e.timing("mesh-license (vendor build)", start)

	start = time.Now()
	crds, err := cluster.DefaultCRDPaths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keep := os.Getenv("REALNODE_KEEP") != ""
	p := real.New(real.Options{ImageArchives: []string{e.rel.Archive}, Log: logWriter{t}, KeepWorkDir: keep})
	_ = crds // the Gateway API and Istio CRDs come with the control plane's defaults
	c, err := p.Up(ctx)
	if err != nil {
		t.Fatalf("real node: %v", err)
	}
	e.timing("control plane + real node + add-ons Up", start)
	for _, tm := range p.Timings {
		e.timings = append(e.timings, fmt.Sprintf("  %-56s %8s", tm.Step, tm.Took))
	}
	defer func() {
		if t.Failed() {
			dumpNode(t, c)
		}
		start := time.Now()
		if err := p.Down(context.Background()); err != nil {
			t.Errorf("down: %v", err)
		}
		e.timing("Down", start)
		after, err := real.ReadHostState()
		if err != nil {
			t.Fatal(err)
		}
		if d := real.Diff(before, after); len(d) > 0 {
			t.Errorf("the host is not as it was before the real node (%d difference(s)):\n  %s", len(d), strings.Join(d, "\n  "))
		} else {
			t.Logf("host check: %d entries (sysctls, iptables, ipsets, links, addresses, routes, rules, mounts, host paths, cgroups, modules, processes) equal before and after", len(after))
		}
	}()
	e.c = c
	if e.cs, err = c.Clientset(); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = fleetv1.AddToScheme(scheme)
	_ = meshv1.AddToScheme(scheme)
	if e.k8s, err = client.New(c.REST, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name string
		run  func(*env) bool
	}{
		{"charts", installCharts},
		{"plain fleet of real Pods", plainFleet},
		{"peers resolve before readiness", peersBeforeReadiness},
		{"routed fleet", routedFleet},
		{"roll with retained volumes", rollRetainsVolumes},
		{"restricted namespaces", restrictedNamespaces},
		{"applicationAccess: Policies", policiesFleet},
	}
	for _, s := range steps {
		start := time.Now()
		ok := t.Run(s.name, func(t *testing.T) {
			old := e.t
			e.t = t
			defer func() { e.t = old }()
			s.run(e)
		})
		e.timing("spec: "+s.name, start)
		if !ok {
			return
		}
	}
}

// installCharts installs both packaged charts with Helm, the operators' Pods
// running the images built from this tree.
func installCharts(e *env) bool {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin, _ := cluster.BinDir()
	helm := filepath.Join(bin, "helm")
	start := time.Now()
	if err := cluster.HelmInstall(ctx, helm, e.c.Kubeconfig, cluster.HelmRelease{
		Name: fleetRelease, Namespace: fleetNS, Chart: e.rel.Charts["fleet-operator"], Wait: true, Timeout: 4 * time.Minute,
		// The admin's confirmation that the CNI enforces NetworkPolicy
		// (kube-router's firewall does here).
		Set: []string{"networkPolicyEnforced=true", "image.pullPolicy=Never"},
	}); err != nil {
		t.Fatalf("helm install fleet-operator: %v", err)
	}
	e.timing("  helm install fleet-operator --wait", start)
	// The mesh operator licensed: the node's mesh image is the licensetestkey
	// build (tools/release -node-mesh-license-test-key), which also trusts
	// the key given in MESH_LICENSE_TEST_PUBLIC_KEY; the tier mints a key
	// pair and a license with the vendor build of mesh-license, as the
	// local bed does (e2e/harness installTestLicense).
	start = time.Now()
	values := mintLicenseValues(t, e, ctx)
	if err := cluster.HelmInstall(ctx, helm, e.c.Kubeconfig, cluster.HelmRelease{
		Name: meshRelease, Namespace: meshNS, Chart: e.rel.Charts["mesh-operator"], Wait: true, Timeout: 4 * time.Minute,
		ValuesFiles: []string{values},
		Set:         []string{"sail.install=false", "image.pullPolicy=Never"},
	}); err != nil {
		t.Fatalf("helm install mesh-operator --wait: %v", err)
	}
	e.timing("  helm install mesh-operator --wait (licensed)", start)
	start = time.Now()
	meshLicensed(t, e, ctx)
	e.timing("  mesh operator Ready, license accepted (ServiceMesh PreviewLocked=False/LicenseValid)", start)
	for _, opNS := range []string{fleetNS, meshNS} {
		pods, err := e.cs.CoreV1().Pods(opNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			t.Logf("operator Pod %s/%s on %s, %s, ready %v, IP %s, image %s", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, podReady(&p), p.Status.PodIP, p.Spec.Containers[0].Image)
		}
	}
	return true
}

// licenseeName is who the tier's license is issued to; the ServiceMesh's
// PreviewLocked message names it once the operator accepted the license.
const licenseeName = "fleetmesh real-node tier"

// mintLicenseValues makes a key pair and a preview license with the vendor
// mesh-license, and writes the mesh chart's values that install it: the
// license Secret from license.value, and the public key for the test-key
// build in extraEnv (the chart's escape hatch; a release build would ignore
// it with a warning).
func mintLicenseValues(t *testing.T, e *env, ctx context.Context) string {
	t.Helper()
	keys := filepath.Join(e.work, "license-keys")
	if out, err := exec.CommandContext(ctx, e.license, "keygen", "--out", keys, "--name", "realnode", "--force").CombinedOutput(); err != nil {
		t.Fatalf("mesh-license keygen: %v: %s", err, out)
	}
	lic, err := exec.CommandContext(ctx, e.license, "sign", "--key", filepath.Join(keys, "realnode.key"),
		"--licensee", licenseeName, "--features", "preview", "--valid-for", "24h").Output()
	if err != nil {
		t.Fatalf("mesh-license sign: %v", err)
	}
	pub, err := exec.CommandContext(ctx, e.license, "pubkey", "--pub", filepath.Join(keys, "realnode.pub")).Output()
	if err != nil {
		t.Fatalf("mesh-license pubkey: %v", err)
	}
	values := map[string]any{
		"license":  map[string]any{"create": true, "value": string(lic)},
		"extraEnv": []map[string]string{{"name": "MESH_LICENSE_TEST_PUBLIC_KEY", "value": strings.TrimSpace(string(pub))}},
	}
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.work, "mesh-values.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// meshLicensed: the mesh operator's Pod is Ready, its log does not say the
// test key is ignored (a release image would), and a ServiceMesh reports the
// license accepted (PreviewLocked=False, LicenseValid, naming the licensee).
// The ServiceMesh is then deleted and must go: the fleets of the later
// specs run without a mesh.
func meshLicensed(t *testing.T, e *env, ctx context.Context) {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(meshNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=mesh-operator"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("want one mesh operator Pod, got %v (%v)", pods, err)
	}
	op := pods.Items[0]
	if !podReady(&op) {
		t.Errorf("mesh operator Pod %s not Ready after helm --wait: %+v", op.Name, op.Status.Conditions)
	}
	sm := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: meshv1.SingletonName}}
	if err := e.k8s.Create(ctx, sm); err != nil {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &meshv1.ServiceMesh{}
		if err := e.k8s.Get(ctx, client.ObjectKey{Name: meshv1.SingletonName}, got); err != nil {
			last = err.Error()
			return false, nil
		}
		c := meta.FindStatusCondition(got.Status.Conditions, string(meshv1.ConditionPreviewLocked))
		last = fmt.Sprintf("phase %q, PreviewLocked %+v", got.Status.Phase, c)
		return c != nil && c.ObservedGeneration == got.Generation && c.Status == metav1.ConditionFalse &&
			c.Reason == string(meshv1.ReasonLicenseValid) && strings.Contains(c.Message, licenseeName), nil
	})
	if err != nil {
		t.Errorf("the mesh operator did not accept the tier's license: %s", last)
	} else {
		t.Logf("ServiceMesh %s: %s", meshv1.SingletonName, last)
	}
	logs, err := e.cs.CoreV1().Pods(meshNS).GetLogs(op.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Errorf("mesh operator log: %v", err)
	} else if bytes.Contains(logs, []byte("ignoring the configured test key")) {
		t.Errorf("the mesh operator ignores the test key: the node runs a release build, not the licensetestkey one")
	}
	if err := e.k8s.Delete(ctx, sm); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.k8s.Get(ctx, client.ObjectKey{Name: meshv1.SingletonName}, &meshv1.ServiceMesh{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the ServiceMesh was not gone 2 minutes after its deletion: %v", err)
	}
}

// plainFleet: a fleet of stand-in Pods becomes Ready with /state read over
// the Pod network, and its access table holds at the packet level, including
// a planted policy bug.
func plainFleet(e *env) bool {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const ns, name = "plain", "plain"
	createNS(t, e, ns, nil)
	createNS(t, e, "other", nil)
	start := time.Now()
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       fleetv1.CelldFleetSpec{Replicas: ptr.To[int32](2), Image: e.standin, ImagePullPolicy: corev1.PullNever},
	}
	if err := e.k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, e, ns, name, 2, true)
	e.timing("  fleet of 2 Ready (/state over the Pod network)", start)

	// Peers resolve POD.FLEET-peers.NAMESPACE.svc through CoreDNS: a client
	// of the fleet dials every member by that name.
	start = time.Now()
	var names []string
	for i := range 2 {
		names = append(names, fmt.Sprintf("%s-%d.%s-peers.%s.svc:8080", name, i, name, ns))
	}
	startProbe(t, e, caller{NS: ns, Name: "dns", Labels: map[string]string{"celld.eric.dev/client-of": name}}, "a", names)
	for _, r := range probeResults(t, e, ns, "dns-a", len(names)) {
		if !r.Open {
			t.Errorf("%s: %s (CoreDNS and the peer Service should resolve it, the policy admits clients on 8080)", r.Addr, r.Error)
		} else {
			t.Logf("%s: connected by name", r.Addr)
		}
	}
	_ = e.cs.CoreV1().Pods(ns).Delete(ctx, "dns-a", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	e.timing("  members dialled by their peer DNS names", start)

	callers := standardCallers(ns, name)
	start = time.Now()
	ref := accessTable(t, e, ns, name, callers, "a")
	e.timing("  access table, packets vs kubectl celld access", start)
	if t.Failed() {
		return false
	}
	start = time.Now()
	memberEgress(t, e, ns, name)
	e.timing("  members' egress, packets vs docs and kubectl celld access", start)
	start = time.Now()
	kubeletProbes(t, e, ns, name)
	e.timing("  kubelet's probes from the node under the policy", start)
	if t.Failed() {
		return false
	}
	start = time.Now()
	plantedBug(t, e, ns, name, callers, ref)
	e.timing("  planted policy bug caught and healed", start)
	return !t.Failed()
}

func createNS(t *testing.T, e *env, name string, labels map[string]string) {
	t.Helper()
	_, err := e.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// routedFleet: a fleet routed through a Gateway (no Gateway controller runs
// here, so the route is never accepted and the fleet not Ready: its members
// are); the FLEET-routing NetworkPolicy admits 8080 from the source Pods
// only, which the packets must show.
func routedFleet(e *env) bool {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const ns, name, gwNS = "routed", "routed", "gateway"
	createNS(t, e, ns, nil)
	createNS(t, e, gwNS, nil)
	start := time.Now()
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1.CelldFleetSpec{Replicas: ptr.To[int32](2), Image: e.standin, ImagePullPolicy: corev1.PullNever,
			Routing: &fleetv1.Routing{Hostnames: []string{"routed.example.com"},
				Gateway: &fleetv1.GatewayRouting{Name: "gw", Namespace: gwNS},
				Source:  fleetv1.RoutingSource{Namespace: gwNS, PodLabels: map[string]fleetv1.LabelValue{"app": "gw"}}}},
	}
	if err := e.k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, e, ns, name, 2, false)
	e.timing("  routed fleet's 2 members reachable and healthy", start)
	callers := append(standardCallers(ns, name),
		caller{NS: gwNS, Name: "gw", Labels: map[string]string{"app": "gw"}},
		caller{NS: gwNS, Name: "stranger"})
	start = time.Now()
	accessTable(t, e, ns, name, callers, "a")
	e.timing("  access table (routed), packets vs kubectl celld access", start)
	return !t.Failed()
}

// rollRetainsVolumes: a persistent fleet of 3 rolls (a Pod template change)
// with at most one member unavailable at any observed moment, every claim
// keeps its UID, and data written to member 0's volume before the roll is
// read back from it after.
func rollRetainsVolumes(e *env) bool {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const ns, name, n = "roll", "roll", 3
	createNS(t, e, ns, nil)
	start := time.Now()
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1.CelldFleetSpec{Replicas: ptr.To[int32](n), Image: e.standin, ImagePullPolicy: corev1.PullNever,
			Storage: &fleetv1.Storage{Size: resource.MustParse("64Mi")}},
	}
	if err := e.k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, e, ns, name, n, true)
	e.timing(fmt.Sprintf("  persistent fleet of %d Ready", n), start)
	claims := func() map[string]string {
		list, err := e.cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, c := range list.Items {
			out[c.Name] = string(c.UID)
		}
		return out
	}
	before := claims()
	if len(before) != n {
		t.Fatalf("want %d claims, got %v", n, before)
	}
	token := fmt.Sprintf("written before the roll at %s", time.Now().UTC().Format(time.RFC3339Nano))
	claim := "data-" + name + "-0"
	runOnClaim(t, e, ns, "writer", claim, "-write-file", "/data/realnode-token", "-content", token)

	// The roll: a new environment variable changes the Pod template.
	got := &fleetv1.CelldFleet{}
	if err := e.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
		t.Fatal(err)
	}
	oldUIDs := map[string]string{}
	pods, _ := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
	for _, p := range pods.Items {
		oldUIDs[p.Name] = string(p.UID)
	}
	got.Spec.Env = append(got.Spec.Env, corev1.EnvVar{Name: "REALNODE_ROLL", Value: "1"})
	// Every state of the roll is judged against what the settled policy
	// denied before it (the plain fleet's packet table confirmed that shape).
	watch := watchStates(t, e, ns, name, standardCallers(ns, name), nil)
	start = time.Now()
	if err := e.k8s.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	maxUnavailable, observations := 0, 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
		if err != nil {
			return false, nil
		}
		observations++
		ready, replaced := 0, 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				ready++
			}
			if oldUIDs[p.Name] != "" && oldUIDs[p.Name] != string(p.UID) && podReady(&p) {
				replaced++
			}
		}
		if u := n - ready; u > maxUnavailable {
			maxUnavailable = u
		}
		return replaced == n, nil
	})
	if err != nil {
		t.Fatalf("the roll did not replace all %d members: %v", n, err)
	}
	waitFleet(t, e, ns, name, n, true)
	watch.Stop(t, "roll")
	e.timing("  roll of 3 members", start)
	t.Logf("roll: at most %d member(s) unavailable in %d observations (every 200 ms)", maxUnavailable, observations)
	if maxUnavailable > 1 {
		t.Errorf("the roll had %d members unavailable at once; at most one may be", maxUnavailable)
	}
	after := claims()
	for c, uid := range before {
		if after[c] != uid {
			t.Errorf("claim %s: UID %s before the roll, %q after", c, uid, after[c])
		}
	}
	out := runOnClaim(t, e, ns, "reader", claim, "-read-file", "/data/realnode-token")
	if !strings.Contains(out, token) {
		t.Errorf("member 0's volume after the roll holds %q, want %q", out, token)
	} else {
		t.Logf("member 0's volume after the roll: %s", strings.TrimSpace(out))
	}
	return !t.Failed()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runOnClaim runs the stand-in image once with args and the claim mounted at
// /data (a hostPath volume on this one node: a second Pod may mount it beside
// the member), and returns its log. It runs as root: the local provisioner's
// hostPath directories belong to root (fsGroup does not apply to hostPath).
func runOnClaim(t *testing.T, e *env, ns, name, claim string, args ...string) string {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "c", Image: e.standin, ImagePullPolicy: corev1.PullNever, Args: args,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	b, _ := e.cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || phase != corev1.PodSucceeded {
		t.Fatalf("%s/%s on %s: %s %v: %s", ns, name, claim, phase, err, b)
	}
	_ = e.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	return string(b)
}

// restrictedNamespaces: a fleet in a namespace enforcing Pod Security
// "restricted" becomes Ready and its access table holds; then both
// operators' namespaces enforce "restricted" too (the API server warns about
// any running Pod that would violate it), and a restarted fleet operator is
// admitted and becomes Ready there.
func restrictedNamespaces(e *env) bool {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	restricted := map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
	const ns, name = "hardened", "hardened"
	createNS(t, e, ns, restricted)
	start := time.Now()
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1.CelldFleetSpec{Replicas: ptr.To[int32](2), Image: e.standin, ImagePullPolicy: corev1.PullNever,
			Storage: &fleetv1.Storage{Size: resource.MustParse("64Mi")}},
	}
	if err := e.k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, e, ns, name, 2, true)
	e.timing("  fleet of 2 Ready in a restricted namespace", start)
	callers := []caller{{NS: ns, Name: "stranger"}, {NS: ns, Name: "client", Labels: map[string]string{"celld.eric.dev/client-of": name}},
		{NS: fleetNS, Name: "operator-like", Labels: map[string]string{"app.kubernetes.io/name": "fleet-operator", "app.kubernetes.io/instance": fleetRelease}, OwnedByOther: true}}
	ref := accessTable(t, e, ns, name, callers, "a")
	watch := watchStates(t, e, ns, name, callers, deniedByReference(callers, ref))

	// The operators' namespaces enforce restricted; the API server's
	// warnings name every running Pod that would be refused.
	var warnings []string
	cfg := *e.c.REST
	cfg.WarningHandler = warningCollector{&warnings}
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, opNS := range []string{fleetNS, meshNS} {
		got, err := cs.CoreV1().Namespaces().Get(ctx, opNS, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels == nil {
			got.Labels = map[string]string{}
		}
		for k, v := range restricted {
			got.Labels[k] = v
		}
		if _, err := cs.CoreV1().Namespaces().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The probes' owner ConfigMap trick does not make them compliant or
	// not: they are, like every Pod this test creates.
	if len(warnings) > 0 {
		t.Errorf("Pods running in the operators' namespaces would violate Pod Security restricted:\n  %s", strings.Join(warnings, "\n  "))
	}
	start = time.Now()
	scaleOperator(t, e, 0)
	scaleOperator(t, e, 1)
	// The restarted operator re-applies its policy: give it a moment to
	// do so while the states are still judged.
	time.Sleep(5 * time.Second)
	watch.Stop(t, "restricted-namespace restart")
	e.timing("  fleet operator restarted under restricted, Ready", start)
	return !t.Failed()
}

// policiesFleet: a fleet with mesh mode enabled and applicationAccess:
// Policies. Istio's data plane cannot run here (no proxy is injected), so
// only the NetworkPolicy layer is judged by packets: every row's packet
// verdict must equal kubectl celld access's NetworkPolicy verdict (and its
// overall verdict wherever the Istio layer does not apply).
func policiesFleet(e *env) bool {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const ns, name = "policies", "policies"
	createNS(t, e, ns, nil)
	start := time.Now()
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1.CelldFleetSpec{Replicas: ptr.To[int32](2), Image: e.standin, ImagePullPolicy: corev1.PullNever,
			Mesh: &fleetv1.Mesh{Mode: fleetv1.MeshEnabled, Istio: &fleetv1.IstioMesh{ApplicationAccess: fleetv1.Policies}}},
	}
	if err := e.k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	waitFleet(t, e, ns, name, 2, false)
	got := &fleetv1.CelldFleet{}
	_ = e.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got)
	for _, c := range got.Status.Conditions {
		t.Logf("condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	e.timing("  Policies fleet's 2 members reachable and healthy", start)
	start = time.Now()
	e.networkOnly = true
	defer func() { e.networkOnly = false }()
	accessTable(t, e, ns, name, standardCallers(ns, name), "a")
	e.timing("  access table (Policies), packets vs the NetworkPolicy layer", start)
	return !t.Failed()
}

type warningCollector struct{ into *[]string }

func (w warningCollector) HandleWarningHeader(code int, agent, text string) {
	*w.into = append(*w.into, text)
}

// waitFleet waits for n members reachable and healthy by the operator's
// /state reads and, if ready, the fleet's Ready condition for its generation.
func waitFleet(t *testing.T, e *env, ns, name string, n int, ready bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &fleetv1.CelldFleet{}
		if err := e.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got); err != nil {
			last = err.Error()
			return false, nil
		}
		c := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		last = fmt.Sprintf("Ready %+v, %d member(s)", c, len(got.Status.Members))
		if ready && (c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != got.Generation) || len(got.Status.Members) != n {
			return false, nil
		}
		for _, m := range got.Status.Members {
			if m.State == nil || !m.State.Reachable || !m.State.Healthy {
				last = fmt.Sprintf("member %s state %+v", m.Name, m.State)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("fleet %s/%s: want %d reachable, healthy members (and Ready: %v): %s", ns, name, n, ready, last)
	}
}

// caller is a probe Pod: where it runs and with which labels.
type caller struct {
	NS, Name string
	Labels   map[string]string
	// OwnedByOther gives the probe a controller owner (a ConfigMap), so a
	// Deployment whose selector its labels match does not adopt it.
	OwnedByOther bool
}

// standardCallers: strangers in the fleet's namespace, another namespace and
// the operator's; a client of the fleet in its namespace and in another; a
// Pod with the operator's labels in the operator's namespace.
func standardCallers(ns, fleet string) []caller {
	client := map[string]string{"celld.eric.dev/client-of": fleet}
	return []caller{
		{NS: ns, Name: "stranger"},
		{NS: ns, Name: "client", Labels: client},
		{NS: "other", Name: "stranger"},
		{NS: "other", Name: "client", Labels: client},
		{NS: fleetNS, Name: "stranger"},
		{NS: fleetNS, Name: "operator-like", Labels: map[string]string{"app.kubernetes.io/name": "fleet-operator", "app.kubernetes.io/instance": fleetRelease}, OwnedByOther: true},
	}
}

// row is one (caller, member, port) of the access table.
type row struct {
	Caller, Member string
	Port           int
	Packet         bool   // the TCP handshake completed
	PacketNote     string // the dial error, if any
	Access         bool   // kubectl celld access: allowed
	Network        bool   // kubectl celld access: the NetworkPolicy layer's verdict
	Rule           string // the rule that decided
}

func (r row) key() string { return fmt.Sprintf("%s -> %s:%d", r.Caller, r.Member, r.Port) }

// accessTable runs one probe Pod per caller that dials every member port
// (after a delay for kube-router to learn its address), asks kubectl celld
// access for that caller's verdicts, and fails on every row where they
// differ. It returns the rows.
func accessTable(t *testing.T, e *env, ns, fleet string, callers []caller, round string) []row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Members and ports, from the report itself.
	rep := accessReport(t, e, ns, fleet, "")
	type target struct {
		member   string
		port     int
		wirePort int
	}
	seen := map[string]bool{}
	var targets []target
	for _, in := range rep.Ingress {
		k := fmt.Sprintf("%s:%d", in.Member, in.Port)
		if !seen[k] {
			seen[k] = true
			targets = append(targets, target{in.Member, in.Port, in.WirePort})
		}
	}
	sort.Slice(targets, func(i, j int) bool {
		return targets[i].member+fmt.Sprint(targets[i].port) < targets[j].member+fmt.Sprint(targets[j].port)
	})
	var addrs []string
	for _, tg := range targets {
		pod, err := e.cs.CoreV1().Pods(ns).Get(ctx, tg.member, metav1.GetOptions{})
		if err != nil || pod.Status.PodIP == "" {
			t.Fatalf("member %s has no Pod IP (%v)", tg.member, err)
		}
		addrs = append(addrs, fmt.Sprintf("%s:%d", pod.Status.PodIP, tg.wirePort))
	}
	// Start every probe at once; each holds after dialing.
	for _, c := range callers {
		startProbe(t, e, c, round, addrs)
	}
	var rows []row
	for _, c := range callers {
		pod := c.Name + "-" + round
		results := probeResults(t, e, c.NS, pod, len(addrs))
		rep := accessReport(t, e, ns, fleet, c.NS+"/"+pod)
		verdicts := map[string]accessEntry{}
		for _, in := range rep.Ingress {
			verdicts[fmt.Sprintf("%s:%d", in.Member, in.Port)] = in
		}
		for i, tg := range targets {
			v, ok := verdicts[fmt.Sprintf("%s:%d", tg.member, tg.port)]
			if !ok {
				t.Errorf("kubectl celld access --from %s/%s has no verdict for %s:%d", c.NS, pod, tg.member, tg.port)
				continue
			}
			r := row{Caller: c.NS + "/" + c.Name, Member: tg.member, Port: tg.port, Packet: results[i].Open, PacketNote: results[i].Error,
				Access: v.Allowed, Network: v.Network.Allowed, Rule: v.rule()}
			rows = append(rows, r)
		}
		_ = e.cs.CoreV1().Pods(c.NS).Delete(ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "access table %s/%s round %s (packet | kubectl celld access | rule):\n", ns, fleet, round)
	for _, r := range rows {
		mark := "  "
		if r.Packet != r.Network || (!e.networkOnly && r.Packet != r.Access) {
			mark = "!!"
			t.Errorf("%s: packets say %s (%s), kubectl celld access says %s, its NetworkPolicy layer %s (%s)", r.key(), verdict(r.Packet), r.PacketNote, verdict(r.Access), verdict(r.Network), r.Rule)
		}
		fmt.Fprintf(&b, "  %s %-28s %-12s %5d  %-7s | %-7s | %s\n", mark, r.Caller, r.Member, r.Port, verdict(r.Packet), verdict(r.Access), r.Rule)
	}
	t.Log(b.String())
	return rows
}

func verdict(open bool) string {
	if open {
		return "allowed"
	}
	return "denied"
}

func startProbe(t *testing.T, e *env, c caller, round string, addrs []string) {
	t.Helper()
	ctx := context.Background()
	name := c.Name + "-" + round
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.NS, Name: name, Labels: c.Labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: e.standin, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-dial", strings.Join(addrs, ","), "-dial-delay", "4s", "-dial-timeout", "2s", "-dial-hold"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if c.OwnedByOther {
		cm, err := e.cs.CoreV1().ConfigMaps(c.NS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-owner-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID, Controller: ptr.To(true)}}
	}
	if _, err := e.cs.CoreV1().Pods(c.NS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("probe %s/%s: %v", c.NS, name, err)
	}
}

type dialResult struct {
	Addr  string `json:"addr"`
	Open  bool   `json:"open"`
	Error string `json:"error"`
}

// probeResults waits for the probe's n result lines in its log.
func probeResults(t *testing.T, e *env, ns, pod string, n int) []dialResult {
	t.Helper()
	var out []dialResult
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		b, err := e.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		out = out[:0]
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var r dialResult
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Addr != "" {
				out = append(out, r)
			}
		}
		last = string(b)
		return len(out) == n, nil
	})
	if err != nil {
		p, _ := e.cs.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		status := ""
		if p != nil {
			status = fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		t.Fatalf("probe %s/%s gave no %d results: %s (Pod %s)", ns, pod, n, last, status)
	}
	return out
}

// accessEntry and accessReport are the parts of kubectl celld access's JSON
// report (kind AccessReport) this tier reads.
type accessEntry struct {
	Member   string `json:"member"`
	Port     int    `json:"port"`
	WirePort int    `json:"wirePort"`
	Allowed  bool   `json:"allowed"`
	Unknown  bool   `json:"unknown"`
	Network  struct {
		Allowed bool      `json:"allowed"`
		Ingress direction `json:"ingress"`
		Egress  direction `json:"egress"`
	} `json:"network"`
}

type direction struct {
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"`
	Policy  string `json:"policy"`
	Index   int    `json:"index"`
}

// rule is the deciding NetworkPolicy rule: the member's ingress, or the
// caller's egress when that denied.
func (a accessEntry) rule() string {
	d, side := a.Network.Ingress, "ingress"
	if a.Network.Ingress.Allowed && !a.Network.Egress.Allowed {
		d, side = a.Network.Egress, "egress"
	}
	r := side + ": " + d.Rule
	if d.Policy != "" {
		r += fmt.Sprintf(" (%s #%d)", d.Policy, d.Index)
	}
	return r
}

type accessReportJSON struct {
	Ingress []accessEntry `json:"ingress"`
}

func accessReport(t *testing.T, e *env, ns, fleet, from string) accessReportJSON {
	t.Helper()
	args := []string{"access", fleet, "-n", ns, "-o", "json", "--kubeconfig", e.c.Kubeconfig, "--operator-namespace", fleetNS}
	if from != "" {
		args = append(args, "--from", from)
	}
	cmd := exec.Command(e.plugin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	// Exit 1 means "a connection asked about is denied": the report stands.
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("kubectl celld %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
	}
	var rep accessReportJSON
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("kubectl celld access -o json: %v\n%s", err, stdout.String())
	}
	for _, in := range rep.Ingress {
		if in.Unknown {
			t.Errorf("kubectl celld access --from %s: verdict for %s:%d unknown", from, in.Member, in.Port)
		}
	}
	return rep
}

// plantedBug stops the fleet operator, removes one ingress rule from the
// fleet's NetworkPolicy (the one that admits the fleet's clients, or the
// first), and requires the packets to differ from the reference table
// exactly where that rule allowed; kubectl celld access, judging the live
// broken policy, must still agree with the packets. Then the operator comes
// back, restores its policy, and the packets match the reference again.
func plantedBug(t *testing.T, e *env, ns, fleet string, callers []caller, ref []row) {
	t.Helper()
	ctx := context.Background()
	// Every state from here until the healed table is judged: removing an
	// allow rule and the operator's repair may close rows, never open one
	// the reference denies.
	watch := watchStates(t, e, ns, fleet, callers, deniedByReference(callers, ref))
	defer watch.Stop(t, "planted bug and its repair")
	scaleOperator(t, e, 0)
	np, err := e.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, fleet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	orig := np.Spec.DeepCopy()
	drop := 0
	for i, r := range np.Spec.Ingress {
		for _, peer := range r.From {
			if peer.PodSelector != nil && peer.PodSelector.MatchLabels["celld.eric.dev/client-of"] != "" {
				drop = i
			}
		}
	}
	dropped := np.Spec.Ingress[drop]
	np.Spec.Ingress = append(np.Spec.Ingress[:drop:drop], np.Spec.Ingress[drop+1:]...)
	if _, err := e.cs.NetworkingV1().NetworkPolicies(ns).Update(ctx, np, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(dropped)
	t.Logf("planted: removed ingress rule %d of NetworkPolicy %s/%s: %s", drop, ns, fleet, b)
	time.Sleep(3 * time.Second) // kube-router's resync after a policy change
	bugged := accessTable(t, e, ns, fleet, callers, "bug")
	refBy := map[string]row{}
	for _, r := range ref {
		refBy[r.key()] = r
	}
	var caught []string
	for _, r := range bugged {
		if rr, ok := refBy[r.key()]; ok && rr.Packet != r.Packet {
			caught = append(caught, fmt.Sprintf("%s: %s before, %s with the bug", r.key(), verdict(rr.Packet), verdict(r.Packet)))
			if !rr.Packet || r.Packet {
				t.Errorf("%s: removing an allow rule opened a connection", r.key())
			}
		}
	}
	if len(caught) == 0 {
		t.Errorf("the planted bug (rule %d removed) changed no packet verdict: not caught", drop)
	} else {
		t.Logf("planted bug caught by packets on %d row(s):\n  %s", len(caught), strings.Join(caught, "\n  "))
	}

	// Heal: the operator restores its policy.
	scaleOperator(t, e, 1)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		np, err := e.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, fleet, metav1.GetOptions{})
		return err == nil && len(np.Spec.Ingress) == len(orig.Ingress), nil
	})
	if err != nil {
		t.Fatalf("the operator did not restore its NetworkPolicy: %v", err)
	}
	time.Sleep(3 * time.Second)
	healed := accessTable(t, e, ns, fleet, callers, "healed")
	for _, r := range healed {
		if rr, ok := refBy[r.key()]; ok && rr.Packet != r.Packet {
			t.Errorf("%s: %s before the bug, %s after the operator restored its policy", r.key(), verdict(rr.Packet), verdict(r.Packet))
		}
	}
}

func scaleOperator(t *testing.T, e *env, n int32) {
	t.Helper()
	ctx := context.Background()
	sc, err := e.cs.AppsV1().Deployments(fleetNS).GetScale(ctx, fleetRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = n
	if _, err := e.cs.AppsV1().Deployments(fleetNS).UpdateScale(ctx, fleetRelease, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(fleetNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=fleet-operator,app.kubernetes.io/instance=" + fleetRelease})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			if len(p.OwnerReferences) > 0 && p.OwnerReferences[0].Kind == "ConfigMap" {
				continue // a probe
			}
			if n == 0 {
				ready++ // any operator Pod left
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return int32(ready) == n, nil
	})
	if err != nil {
		t.Fatalf("fleet operator not at %d Ready replica(s): %v", n, err)
	}
}

// dumpNode logs what a failed run needs: every Pod and its state, recent
// events, and the tails of the node's logs.
func dumpNode(t *testing.T, c *cluster.Cluster) {
	cs, err := c.Clientset()
	if err != nil {
		return
	}
	ctx := context.Background()
	pods, _ := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if pods != nil {
		for _, p := range pods.Items {
			t.Logf("pod %s/%s %s ip=%s %+v", p.Namespace, p.Name, p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses)
		}
	}
	evs, _ := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if evs != nil {
		for i, ev := range evs.Items {
			if i > len(evs.Items)-60 {
				t.Logf("event %s/%s %s %s: %s", ev.Namespace, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
			}
		}
	}
	for _, name := range []string{"kubelet", "containerd", "kube-proxy", "kube-router"} {
		b, err := os.ReadFile(filepath.Join(c.WorkDir, "node", "logs", name+".log"))
		if err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 25 {
				lines = lines[len(lines)-25:]
			}
			t.Logf("--- %s log tail:\n%s", name, strings.Join(lines, "\n"))
		}
	}
}
