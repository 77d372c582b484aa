//go:build e2e

// Package upgrade runs both operators of an earlier release on the local
// test bed, replaces them with the current tree's as a helm upgrade would,
// and checks what the upgrade touched: no member Pod replaced unless
// CHANGELOG.md declares it, no enrolled namespace's labels or mTLS mode
// changed, and nothing but status written once the new operators run.
package upgrade

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cnifake"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/sailfake"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// previousRelease is the tree users upgrade from. It is still the commit
// main stood at before the upgrade guard: 0.1.0 is cut in CHANGELOG.md, but
// its tags (fleet-operator/v0.1.0, mesh-operator/v0.1.0) are made by the
// release workflow's trigger, on main, once the cut is merged. Then set
// previousRelease to the tag and previousReleaseVersion to "0.1.0"
// (docs/development.md).
const previousRelease = "033119b"

// previousReleaseVersion is the CHANGELOG.md version of previousRelease; ""
// while previousRelease predates every release section, so that the member
// restarts declared since are those of "Unreleased" and of every release
// section.
const previousReleaseVersion = ""

const (
	fleetsNS = "upgrade-fleets"
	meshedNS = "upgrade-meshed"
	// edgeNS is the meshed fleet's routing source, outside the mesh, with a
	// client Pod that is not meshed.
	edgeNS = "upgrade-edge"
)

// writtenResources are the resources either operator writes. After the
// swap only their status subresources may be written (by the operators,
// or by the controller manager and kwok, which write only status).
var writtenResources = []string{
	"celldfleets", "servicemeshes", "statefulsets", "services", "networkpolicies", "poddisruptionbudgets",
	"serviceaccounts", "pods", "persistentvolumeclaims", "namespaces", "peerauthentications",
	"authorizationpolicies", "ingresses", "httproutes", "istios", "istiocnis", "ztunnels", "configmaps",
}

// upgradeWrites are the non-status writes the current tree makes once to
// objects written by previousRelease, each explained (CHANGELOG.md,
// "Upgrading"); they are counted exactly, so any other write fails.
var upgradeWrites = map[string]float64{
	// The enrolled STRICT namespace's mesh-mtls gets the strict-edges
	// record, which previousRelease did not write (its cutover accepted the
	// edges declared then; enroll.AcceptedEdges).
	"APPLY peerauthentications": 1,
	// The ambient fleet's NAME-mesh AuthorizationPolicy admits a peer's
	// plaintext on 8081 at all times now (PeerAuthentication decides
	// whether plaintext gets that far), not only while relaxed.
	"APPLY authorizationpolicies": 1,
}

func TestUpgradeTouchesOnlyStatus(t *testing.T) {
	ctx := context.Background()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	work := t.TempDir()

	start := time.Now()
	old := filepath.Join(work, "previous")
	extractTree(t, root, previousRelease, old)
	bed, err := harness.StartBed(ctx, harness.BedOptions{
		Root: root, Source: old, WorkDir: filepath.Join(work, "bed"), Nodes: 2, Operators: true,
		NetworkPolicyEnforced: true, Log: os.Stderr,
	})
	require.NoError(t, err, "starting the bed with the operators of %s", previousRelease)
	defer bed.Stop()
	t.Logf("bed with the %s operators up in %s", previousRelease, time.Since(start).Round(time.Second))

	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, fleetv1.AddToScheme(scheme))
	require.NoError(t, meshv1.AddToScheme(scheme))
	k8s, err := client.New(bed.Cluster.REST, client.Options{Scheme: scheme})
	require.NoError(t, err)
	stopSail, err := sailfake.Serve(ctx, bed.Cluster.REST, k8s, root)
	require.NoError(t, err)
	defer stopSail()
	cniCtx, stopCNI := context.WithCancel(ctx)
	cniDone := make(chan struct{})
	go func() { defer close(cniDone); cnifake.Play(cniCtx, k8s, meshedNS) }()
	defer func() { stopCNI(); <-cniDone }()

	// The fleets of a cluster running the previous release.
	// The fleets' namespace is opted out of the mesh by its admin, as
	// docs/install.md ("Upgrading") advises where fleets in mode auto must not
	// join a mesh the cluster already runs: since this release auto fleets
	// ask to join (CHANGELOG.md). The enrolled namespace below shows the
	// other side: a namespace already in the mesh keeps its state.
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetsNS,
		Labels: map[string]string{labels.Mesh: labels.MeshDisabled}}}))
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: meshedNS,
		Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: edgeNS}}))
	require.NoError(t, k8s.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: edgeNS, Name: "edge-proxy", Labels: map[string]string{"app": "edge-proxy"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "proxy", Image: "registry.example/edge-proxy:1"}}},
	}))
	fleets := []*fleetv1.CelldFleet{
		fleet(fleetsNS, "plain", 2, nil),
		fleet(fleetsNS, "persistent", 2, func(s *fleetv1.CelldFleetSpec) {
			s.Storage = &fleetv1.Storage{Size: resource.MustParse("1Gi")}
		}),
		fleet(fleetsNS, "routed", 1, func(s *fleetv1.CelldFleetSpec) {
			s.Routing = &fleetv1.Routing{Hostnames: []string{"routed.example.com"}, Ingress: &fleetv1.IngressRouting{ClassName: "nginx"},
				Source: fleetv1.RoutingSource{Namespace: "ingress", PodLabels: map[string]fleetv1.LabelValue{"app": "ingress"}}}
		}),
		fleet(fleetsNS, "paused", 1, nil),
		fleet(meshedNS, "ambient", 2, func(s *fleetv1.CelldFleetSpec) {
			s.Mesh = &fleetv1.Mesh{Mode: fleetv1.MeshEnabled}
			s.Routing = &fleetv1.Routing{Hostnames: []string{"ambient.example.com"}, Ingress: &fleetv1.IngressRouting{ClassName: "nginx"},
				Source: fleetv1.RoutingSource{Namespace: edgeNS, PodLabels: map[string]fleetv1.LabelValue{"app": "edge-proxy"}}}
		}),
	}
	for _, f := range fleets {
		require.NoError(t, k8s.Create(ctx, f))
	}
	require.NoError(t, k8s.Create(ctx, &meshv1.ServiceMesh{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: meshv1.ServiceMeshSpec{Mode: meshv1.ModeManaged, Provider: meshv1.ProviderAuto, DataPlane: meshv1.DataPlaneAmbient,
			Isolation: meshv1.IsolationNamespace, MTLS: meshv1.MTLS{Mode: meshv1.MTLSStrict}},
	}))
	for _, f := range fleets {
		waitFor(t, 3*time.Minute, func() (bool, string) {
			got := &fleetv1.CelldFleet{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(f), got))
			return meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") && got.Status.ReadyReplicas == *f.Spec.Replicas,
				fmt.Sprintf("fleet %s: %+v", f.Name, got.Status.Conditions)
		})
	}
	require.NoError(t, k8s.Patch(ctx, &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: fleetsNS, Name: "paused"}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"maintenance":{"paused":true}}}`))))
	waitFor(t, 3*time.Minute, func() (bool, string) {
		ns := &corev1.Namespace{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: meshedNS}, ns))
		return ns.Labels[labels.MeshMTLS] == "strict", fmt.Sprintf("namespace labels %v", ns.Labels)
	})
	settle(t, ctx, k8s, bed)
	t.Logf("previous release settled at %s", time.Since(start).Round(time.Second))

	// From here on, everything the upgrade does is observed.
	dyn, err := dynamic.NewForConfig(bed.Cluster.REST)
	require.NoError(t, err)
	obs := observe(t, ctx, dyn)
	var before map[string]float64
	swap := time.Now()
	require.NoError(t, bed.Upgrade(ctx, root, func() (err error) {
		before, err = cluster.APIServerWrites(ctx, bed.Cluster.REST, writtenResources)
		return err
	}), "upgrading to the current tree")
	t.Logf("operators swapped to the current tree in %s", time.Since(swap).Round(time.Second))
	settle(t, ctx, k8s, bed)
	after, err := cluster.APIServerWrites(ctx, bed.Cluster.REST, writtenResources)
	require.NoError(t, err)
	obs.stop()
	t.Logf("upgrade observed for %s (whole test %s)", time.Since(swap).Round(time.Second), time.Since(start).Round(time.Second))

	declared := declaredRestarts(t, root)
	t.Run("no member is replaced unless the release declares it", func(t *testing.T) {
		replaced := obs.replacedMembers()
		if len(declared) > 0 {
			t.Logf("CHANGELOG.md declares member restarts: %v; replaced: %v", declared, replaced)
			assert.LessOrEqual(t, obs.maxUnavailablePerFleet(), 1, "a declared restart still goes one member at a time")
			return
		}
		assert.Empty(t, replaced, "members replaced by the upgrade although CHANGELOG.md declares no restart")
	})
	t.Run("enrolled namespaces keep their labels and mTLS mode", func(t *testing.T) {
		assert.Empty(t, obs.namespaceChanges(), "an enrolled namespace's labels changed during the upgrade")
		assert.Empty(t, obs.mtlsChanges(), "a PeerAuthentication's mode changed during the upgrade")
	})
	t.Run("only status is written after the swap, and the declared one-time writes", func(t *testing.T) {
		writes := map[string]float64{}
		for k, v := range after {
			if d := v - before[k]; d > 0 && !strings.HasSuffix(k, "/status") {
				writes[k] = d
			}
		}
		want := maps.Clone(upgradeWrites)
		if len(declared) > 0 {
			// A declared restart rolls: the StatefulSets get the new
			// template and the members are replaced (judged above).
			for _, k := range []string{"APPLY statefulsets", "DELETE pods", "POST pods", "POST pods/binding", "PATCH pods"} {
				delete(writes, k)
			}
			// An ambient fleet relaxes port 8081 while a replaced member is
			// not captured yet (its NAME-mesh PeerAuthentication, applied
			// PERMISSIVE) and tightens it again once it is (deleted): one
			// of each per replaced member (docs/mesh.md, capture is gradual).
			for _, m := range obs.replacedMembers() {
				if strings.HasPrefix(m, meshedNS+"/") {
					want["APPLY peerauthentications"]++
					want["DELETE peerauthentications"]++
				}
			}
		}
		assert.Equal(t, want, writes, "writes other than status after the swap (API server counts, every client)")
		t.Logf("status writes after the swap: %v", statusWrites(before, after))
	})
}

func fleet(ns, name string, replicas int32, mutate func(*fleetv1.CelldFleetSpec)) *fleetv1.CelldFleet {
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       fleetv1.CelldFleetSpec{Replicas: ptr.To(replicas), Image: "registry.example/celld:1.0.0"},
	}
	if mutate != nil {
		mutate(&f.Spec)
	}
	return f
}

// extractTree writes the tree of commit rev into dir.
func extractTree(t *testing.T, root, rev, dir string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	cmd := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive --format=tar %s | tar -x -C %q", root, rev, dir))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "extracting %s (a shallow clone lacks it: git fetch --unshallow): %s", rev, out)
}

// settle waits until every fleet and the ServiceMesh report the current
// generation and nothing is in flight, then a little longer: long enough
// for a /state poll (10 s in the bed) and a requeue to have happened.
func settle(t *testing.T, ctx context.Context, k8s client.Client, bed *harness.Bed) {
	t.Helper()
	waitFor(t, 3*time.Minute, func() (bool, string) {
		if err := bed.Healthy(); err != nil {
			t.Fatal(err)
		}
		list := &fleetv1.CelldFleetList{}
		require.NoError(t, k8s.List(ctx, list))
		for _, f := range list.Items {
			rolled := f.Spec.Maintenance.Paused || f.Status.UpdatedReplicas == f.Status.Replicas
			if f.Status.ObservedGeneration != f.Generation || !meta.IsStatusConditionTrue(f.Status.Conditions, "Ready") || !rolled {
				return false, fmt.Sprintf("fleet %s/%s: generation %d observed %d, updated %d of %d, %+v", f.Namespace, f.Name,
					f.Generation, f.Status.ObservedGeneration, f.Status.UpdatedReplicas, f.Status.Replicas, f.Status.Conditions)
			}
		}
		sm := &meshv1.ServiceMesh{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "cluster"}, sm))
		return sm.Status.ObservedGeneration == sm.Generation && meta.IsStatusConditionTrue(sm.Status.Conditions, "Ready"),
			fmt.Sprintf("ServiceMesh %+v", sm.Status.Conditions)
	})
	time.Sleep(15 * time.Second)
}

func waitFor(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %s; last: %s", timeout, last)
}

// observer watches member Pods, the enrolled namespace and
// PeerAuthentications, and keeps every state it sees.
type observer struct {
	mu       sync.Mutex
	members  map[string]map[types.UID]bool // namespace/pod -> UIDs seen
	notReady map[string]map[string]bool    // namespace/fleet -> member names not ready or gone
	maxDown  int
	nsLabels []map[string]string
	paModes  map[string][]string // namespace/name -> modes in order seen
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

var (
	podsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	paGVR         = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
)

func observe(t *testing.T, ctx context.Context, dyn dynamic.Interface) *observer {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	o := &observer{members: map[string]map[types.UID]bool{}, notReady: map[string]map[string]bool{}, paModes: map[string][]string{}, cancel: cancel}
	watchAll := func(ri dynamic.ResourceInterface, opts metav1.ListOptions, handle func(watch.EventType, *unstructured.Unstructured)) {
		list, err := ri.List(ctx, opts)
		require.NoError(t, err)
		for i := range list.Items {
			handle(watch.Added, &list.Items[i])
		}
		opts.ResourceVersion = list.GetResourceVersion()
		w, err := ri.Watch(ctx, opts)
		require.NoError(t, err)
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if u, isObj := ev.Object.(*unstructured.Unstructured); isObj {
						handle(ev.Type, u)
					}
				}
			}
		}()
	}
	watchAll(dyn.Resource(podsGVR), metav1.ListOptions{LabelSelector: labels.Fleet}, o.pod)
	watchAll(dyn.Resource(namespacesGVR), metav1.ListOptions{FieldSelector: "metadata.name=" + meshedNS}, func(_ watch.EventType, u *unstructured.Unstructured) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.nsLabels = append(o.nsLabels, u.GetLabels())
	})
	watchAll(dyn.Resource(paGVR), metav1.ListOptions{}, func(_ watch.EventType, u *unstructured.Unstructured) {
		mode, _, _ := unstructured.NestedString(u.Object, "spec", "mtls", "mode")
		o.mu.Lock()
		defer o.mu.Unlock()
		key := u.GetNamespace() + "/" + u.GetName()
		o.paModes[key] = append(o.paModes[key], mode)
	})
	return o
}

func (o *observer) pod(typ watch.EventType, u *unstructured.Unstructured) {
	p := &corev1.Pod{}
	if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p) != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	if o.members[key] == nil {
		o.members[key] = map[types.UID]bool{}
	}
	o.members[key][p.UID] = true
	fleet := p.Namespace + "/" + p.Labels[labels.Fleet]
	if o.notReady[fleet] == nil {
		o.notReady[fleet] = map[string]bool{}
	}
	ready := typ != watch.Deleted && p.DeletionTimestamp == nil
	ready = ready && slicesContainsReady(p.Status.Conditions)
	if ready {
		delete(o.notReady[fleet], p.Name)
	} else {
		o.notReady[fleet][p.Name] = true
	}
	o.maxDown = max(o.maxDown, len(o.notReady[fleet]))
}

func slicesContainsReady(cs []corev1.PodCondition) bool {
	for _, c := range cs {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (o *observer) stop() { o.cancel(); o.wg.Wait() }

// replacedMembers names the members that ran as more than one Pod.
func (o *observer) replacedMembers() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for k, uids := range o.members {
		if len(uids) > 1 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (o *observer) maxUnavailablePerFleet() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.maxDown
}

// namespaceChanges lists every observed label set of the enrolled namespace
// that differs from the first one.
func (o *observer) namespaceChanges() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, l := range o.nsLabels[1:] {
		if !maps.Equal(l, o.nsLabels[0]) {
			out = append(out, fmt.Sprintf("%v -> %v", o.nsLabels[0], l))
		}
	}
	return out
}

func (o *observer) mtlsChanges() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for k, modes := range o.paModes {
		for _, m := range modes[1:] {
			if m != modes[0] {
				out = append(out, fmt.Sprintf("%s: %v", k, modes))
				break
			}
		}
	}
	return out
}

func statusWrites(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 && strings.HasSuffix(k, "/status") {
			out[k] = d
		}
	}
	return out
}

// declaredRestarts are the "Restarts members" entries of CHANGELOG.md that
// carry a template fingerprint (see
// fleet-operator/internal/controller/upgrade_guard_test.go), in "Unreleased"
// and in every fleet operator release section newer than
// previousReleaseVersion: what changed since previousRelease.
func declaredRestarts(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	defer f.Close()
	fp := regexp.MustCompile(`\(pod templates: [0-9a-f]{12}\)`)
	var out []string
	section, sub := "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section, sub = strings.TrimSpace(line[3:]), ""
			if previousReleaseVersion != "" && strings.HasPrefix(section, "fleet-operator "+previousReleaseVersion+" ") {
				return out
			}
		case strings.HasPrefix(line, "### "):
			sub = strings.TrimSpace(line[4:])
		case (section == "Unreleased" || strings.HasPrefix(section, "fleet-operator ")) && sub == "Restarts members" && fp.MatchString(line):
			out = append(out, line)
		}
	}
	return out
}
