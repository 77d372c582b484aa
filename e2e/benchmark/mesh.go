package benchmark

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/sailfake"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// MeshResult is the mesh operator enrolling M namespaces.
type MeshResult struct {
	Namespaces   int    `json:"namespaces"`
	PodsPerNS    int    `json:"podsPerNamespace"`
	Nodes        int    `json:"nodes"`
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
	// Seconds from creating the ServiceMesh until: every Sail resource
	// reports Ready (the control plane is Ready), the ServiceMesh reports
	// Ready, and every namespace is STRICT.
	ControlPlaneReadySeconds float64 `json:"controlPlaneReadySeconds"`
	MeshReadySeconds         float64 `json:"meshReadySeconds"`
	AllStrictSeconds         float64 `json:"allStrictSeconds"`
	// ReadyToStrictSeconds = AllStrict - ControlPlaneReady: the headline.
	ReadyToStrictSeconds float64 `json:"readyToStrictSeconds"`
	// Enroll is the mesh operator's own requests (by method) from creating
	// the ServiceMesh until all STRICT (plus 1 s settle).
	Enroll Phase `json:"enroll"`
	// Writes by "VERB resource" as the API server counted them in the same
	// window (apiserver_request_total), for the resources the mesh operator
	// writes; see docs/benchmark.md for who else writes them.
	WritesByResource map[string]float64 `json:"writesByResource"`
	// PerNamespace is WritesByResource of the per-namespace resources
	// divided by the namespace count.
	PerNamespace map[string]float64 `json:"writesPerNamespace"`
	// Settle is the mesh operator's requests over settleWait after all
	// STRICT (its 5 s converging recheck included): must be zero writes.
	Settle Phase `json:"settle"`
	// SettleWritesByResource is WritesByResource over the settle window.
	SettleWritesByResource map[string]float64 `json:"settleWritesByResource,omitempty"`
	PeakRSSMiB             float64            `json:"peakRSSMiB"`
	// FloorSeconds: floorClients concurrent clients apply the same
	// per-namespace writes the enrollment protocol makes (the
	// PeerAuthentication at PERMISSIVE, the AuthorizationPolicies, the
	// namespace labels, the PeerAuthentication at STRICT, the labels again)
	// to M fresh namespaces; FloorRatio = ReadyToStrictSeconds / FloorSeconds.
	FloorSeconds float64 `json:"floorSeconds"`
	FloorWrites  int     `json:"floorWrites"`
	FloorRatio   float64 `json:"floorRatio"`
	// PassCPU is where the CPU went from creating the ServiceMesh until all
	// STRICT (the client: the mesh operator); FloorCPU over the floor (the
	// client: this process, which sends the floor's writes).
	PassCPU  CPUSplit `json:"passCPU"`
	FloorCPU CPUSplit `json:"floorCPU"`
	Error    string   `json:"error,omitempty"`
}

// perNamespaceResources are written once per enrolled namespace.
var perNamespaceResources = []string{"namespaces", "peerauthentications", "authorizationpolicies"}

// meshWriteResources are what the API server's write counts are kept for.
var meshWriteResources = append([]string{"servicemeshes", "events", "istios", "istiocnis", "ztunnels"}, perNamespaceResources...)

const meshSettleWait = 6 * time.Second

var sailKinds = []string{"Istio", "IstioCNI", "ZTunnel"}

// enrollMesh runs one mesh measurement in bed: M namespaces that ask for
// the mesh, each with one running Pod that ztunnel already captures (the
// ambient redirection annotation), so the operator's PERMISSIVE→STRICT
// cutover check reads a real Pod in every namespace and passes. Then a
// licensed ServiceMesh (managed, ambient, namespace isolation, STRICT) is
// created with e2e/sailfake playing the Sail controller.
func (b *bench) enrollMesh(ctx context.Context, root string, m int, res *MeshResult) error {
	res.Namespaces, res.PodsPerNS = m, 1
	stopSail, err := sailfake.Serve(ctx, b.bed.Cluster.REST, b.k8s, root)
	if err != nil {
		return fmt.Errorf("sail API: %w", err)
	}
	defer stopSail()

	var names []string
	for i := 0; i < m; i++ {
		ns := fmt.Sprintf("mesh-%d", i)
		names = append(names, ns)
		if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}); err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Annotations: map[string]string{labels.IstioAmbientRedirection: "enabled"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		}
		if err := b.k8s.Create(ctx, pod); err != nil {
			return err
		}
	}
	if err := b.waitPodsRunning(ctx, names); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the scheduler's and kwok's writes for these Pods land before the window

	before, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	sm := &meshv1.ServiceMesh{
		ObjectMeta: metav1.ObjectMeta{Name: meshv1.SingletonName},
		Spec: meshv1.ServiceMeshSpec{Mode: meshv1.ModeManaged, Provider: meshv1.ProviderAuto, DataPlane: meshv1.DataPlaneAmbient,
			Isolation: meshv1.IsolationNamespace, MTLS: meshv1.MTLS{Mode: meshv1.MTLSStrict}},
	}
	var cpReady, meshReady, strict time.Duration
	var start time.Time
	watch, err := b.watchStrict(ctx, names)
	if err != nil {
		return err
	}
	defer watch.stop()
	if err := b.phaseOf(b.meshMetrics(), b.bed.Mesh, &res.Enroll, func() error {
		cpu, err := b.startCPUWindow(b.bed.Mesh.Pid())
		if err != nil {
			return err
		}
		start = time.Now()
		if err := b.k8s.Create(ctx, sm); err != nil {
			return err
		}
		deadline := start.Add(b.timeout)
		for {
			now := time.Since(start)
			if cpReady == 0 && b.sailReady(ctx) {
				cpReady = now
			}
			if meshReady == 0 {
				got := &meshv1.ServiceMesh{}
				if err := b.k8s.Get(ctx, client.ObjectKeyFromObject(sm), got); err != nil {
					return err
				}
				if c := meta.FindStatusCondition(got.Status.Conditions, "Ready"); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == got.Generation {
					meshReady = now
				}
			}
			if strict == 0 {
				if at, ok := watch.allStrictAt(); ok {
					strict = at.Sub(start)
				}
			}
			if cpReady > 0 && meshReady > 0 && strict > 0 {
				res.PassCPU, err = cpu.stop()
				return err
			}
			if err := b.bed.Healthy(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("mesh: after %s: control plane ready %v, ServiceMesh ready %v, all %d namespaces STRICT %v", b.timeout, cpReady > 0, meshReady > 0, m, strict > 0)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}); err != nil {
		return err
	}
	after, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	res.ControlPlaneReadySeconds = round(cpReady.Seconds(), 2)
	res.MeshReadySeconds = round(meshReady.Seconds(), 2)
	res.AllStrictSeconds = round(strict.Seconds(), 2)
	res.ReadyToStrictSeconds = round((strict - cpReady).Seconds(), 2)
	res.WritesByResource, res.PerNamespace = map[string]float64{}, map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			res.WritesByResource[k] = d
		}
	}
	for k, v := range res.WritesByResource {
		if k == "POST namespaces" {
			continue // the control plane's namespaces, created once
		}
		for _, r := range perNamespaceResources {
			if strings.HasSuffix(k, " "+r) {
				res.PerNamespace[k] = round(v/float64(m), 3)
			}
		}
	}
	// Every namespace's PeerAuthentication is STRICT (the labels say so
	// only after it is applied; check the object too).
	if n, err := b.strictPeerAuthentications(ctx, names); err != nil {
		return err
	} else if n != m {
		return fmt.Errorf("mesh: %d of %d namespaces have a STRICT PeerAuthentication although their labels say strict", n, m)
	}

	if before, err = b.apiserverWrites(ctx); err != nil {
		return err
	}
	if err := b.phaseOf(b.meshMetrics(), b.bed.Mesh, &res.Settle, func() error {
		time.Sleep(meshSettleWait)
		return nil
	}); err != nil {
		return err
	}
	if after, err = b.apiserverWrites(ctx); err != nil {
		return err
	}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			if res.SettleWritesByResource == nil {
				res.SettleWritesByResource = map[string]float64{}
			}
			res.SettleWritesByResource[k] = d
		}
	}
	if res.Settle.Writes != 0 {
		b.anom = append(b.anom, fmt.Sprintf("mesh M=%d: %v writes after every namespace was STRICT: %v; the API server counted %v (sailfake's PUTs included)", m, res.Settle.Writes, res.Settle.Requests, res.SettleWritesByResource))
	}
	hwm, err := peakRSS(b.bed.Mesh.Pid())
	if err != nil {
		return err
	}
	res.PeakRSSMiB = round(hwm/1024, 1)
	if err := b.bed.Healthy(); err != nil || !b.probes {
		return err
	}
	// The floor's namespaces carry the operator's labels: stopped, the
	// operator neither reacts to them nor loads the API server meanwhile.
	if err := b.bed.Mesh.Stop(10 * time.Second); err != nil {
		return err
	}
	if err := b.meshFloor(ctx, names, res); err != nil {
		return fmt.Errorf("mesh floor: %w", err)
	}
	return nil
}

var (
	nsGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	paGVR = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
	apGVR = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
)

// meshFloor copies what the operator wrote per enrolled namespace and
// applies it to M fresh namespaces with floorClients concurrent clients, in
// the order the enrollment protocol requires (docs/benchmark.md): the
// PeerAuthentication at PERMISSIVE and the AuthorizationPolicies, then the
// labels without the state labels, then the PeerAuthentication as the
// operator left it (STRICT), then the labels with the state labels. The
// PERMISSIVE step is the seed's (STRICT only once the Pods, read under the
// data-plane label, can take it), so no implementation writes less. The
// time runs from the first apply to the last answer.
func (b *bench) meshFloor(ctx context.Context, names []string, res *MeshResult) error {
	type job struct {
		ns            string
		first, second map[string]string
		// before the first labels: the PeerAuthentication at PERMISSIVE,
		// the AuthorizationPolicies; after them: the final PeerAuthentication.
		policies []*unstructured.Unstructured
		gvrs     []schema.GroupVersionResource
		strict   *unstructured.Unstructured
	}
	var jobs []job
	for i, src := range names {
		dst := fmt.Sprintf("meshfloor-%d", i)
		ns := &corev1.Namespace{}
		if err := b.k8s.Get(ctx, client.ObjectKey{Name: src}, ns); err != nil {
			return err
		}
		j := job{ns: dst, first: map[string]string{}, second: map[string]string{}}
		for k, v := range ns.Labels {
			if k == labels.NamespaceName || k == labels.Mesh {
				continue // the API server's and the user's (the request), not the operator's
			}
			j.second[k] = v
			if k != labels.MeshState && k != labels.MeshMTLS {
				j.first[k] = v
			}
		}
		for _, gvr := range []schema.GroupVersionResource{paGVR, apGVR} {
			list, err := b.dyn.Resource(gvr).Namespace(src).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for i := range list.Items {
				u := strip(&list.Items[i], dst)
				if gvr == paGVR {
					j.strict = u
					u = u.DeepCopy()
					ann := u.GetAnnotations()
					delete(ann, labels.MeshStrictReady) // set once the cutover is seen
					u.SetAnnotations(ann)
					if err := unstructured.SetNestedField(u.Object, "PERMISSIVE", "spec", "mtls", "mode"); err != nil {
						return err
					}
				}
				j.policies = append(j.policies, u)
				j.gvrs = append(j.gvrs, gvr)
			}
		}
		if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dst}}); err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	applyNS := func(name string, l map[string]string) error {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace"}}
		u.SetName(name)
		u.SetLabels(l)
		_, err := b.dyn.Resource(nsGVR).Apply(ctx, name, u, metav1.ApplyOptions{FieldManager: "bench-floor", Force: true})
		return err
	}
	var writes atomic.Int64
	cpu, err := b.startCPUWindow(os.Getpid())
	if err != nil {
		return err
	}
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(floorClients)
	for _, j := range jobs {
		if gctx.Err() != nil {
			break // a job failed: Wait returns its error
		}
		g.Go(func() error {
			applyPolicy := func(gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
				_, err := b.dyn.Resource(gvr).Namespace(j.ns).Apply(gctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "bench-floor", Force: true})
				return err
			}
			var err error
			for i, u := range j.policies {
				if err == nil {
					err = applyPolicy(j.gvrs[i], u)
				}
			}
			if err == nil {
				err = applyNS(j.ns, j.first)
			}
			if err == nil && j.strict != nil {
				err = applyPolicy(paGVR, j.strict)
			}
			if err == nil {
				err = applyNS(j.ns, j.second)
			}
			if err != nil {
				return fmt.Errorf("namespace %s: %w", j.ns, err)
			}
			writes.Add(int64(2 + len(j.policies)))
			if j.strict != nil {
				writes.Add(1)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	res.FloorSeconds = round(time.Since(start).Seconds(), 2)
	if res.FloorCPU, err = cpu.stop(); err != nil {
		return err
	}
	res.FloorWrites = int(writes.Load())
	if res.FloorSeconds > 0 {
		res.FloorRatio = round(res.ReadyToStrictSeconds/res.FloorSeconds, 2)
	}
	return nil
}

func (b *bench) meshMetrics() string { return b.meshMetricsAddr }

func (b *bench) waitPodsRunning(ctx context.Context, namespaces []string) error {
	want := map[string]bool{}
	for _, ns := range namespaces {
		want[ns] = true
	}
	deadline := time.Now().Add(b.timeout)
	for {
		list := &corev1.PodList{}
		if err := b.k8s.List(ctx, list); err != nil {
			return err
		}
		running := 0
		for _, p := range list.Items {
			if want[p.Namespace] && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == len(namespaces) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d mesh Pods running after %s", running, len(namespaces), b.timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// sailReady: every Sail resource that exists reports Ready for its
// generation, and the Istio one exists (the operator creates it first).
func (b *bench) sailReady(ctx context.Context) bool {
	istio := false
	for _, kind := range sailKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "sailoperator.io", Version: "v1", Kind: kind + "List"})
		if err := b.k8s.List(ctx, list); err != nil {
			return false
		}
		for _, u := range list.Items {
			istio = istio || kind == "Istio"
			gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			ready := false
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				ready = ready || (cm["type"] == "Ready" && cm["status"] == "True")
			}
			if !ready || gen != u.GetGeneration() {
				return false
			}
		}
	}
	return istio
}

// strictWatch follows the namespaces through a watch and notes when the
// last of names has the state labels that say enrolled and STRICT. A watch,
// not a LIST per poll: the observer must not load the API server it times
// (the floor runs without one; docs/benchmark.md, Mesh operator, per M).
type strictWatch struct {
	stop func()

	mu     sync.Mutex
	want   map[string]bool
	strict map[string]bool
	at     time.Time
}

// watchStrict starts the watch and returns once its list is in.
func (b *bench) watchStrict(ctx context.Context, names []string) (*strictWatch, error) {
	w := &strictWatch{want: map[string]bool{}, strict: map[string]bool{}}
	for _, n := range names {
		w.want[n] = true
	}
	factory := informers.NewSharedInformerFactory(b.cs, 0)
	inf := factory.Core().V1().Namespaces().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.see(obj) },
		UpdateFunc: func(_, obj any) { w.see(obj) },
	}); err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	w.stop = func() { close(stop); factory.Shutdown() }
	factory.Start(stop)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("mesh: the namespace watch did not sync")
	}
	return w, nil
}

func (w *strictWatch) see(obj any) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.want[ns.Name] || !w.at.IsZero() {
		return
	}
	if ns.Labels[labels.MeshState] == labels.MeshStateEnrolled && ns.Labels[labels.MeshMTLS] == contract.MTLSStrict {
		w.strict[ns.Name] = true
	} else {
		delete(w.strict, ns.Name)
	}
	if len(w.strict) == len(w.want) {
		w.at = time.Now()
	}
}

// allStrictAt is when every namespace was first seen STRICT at once.
func (w *strictWatch) allStrictAt() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at, !w.at.IsZero()
}

func (b *bench) strictPeerAuthentications(ctx context.Context, names []string) (int, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "security.istio.io", Version: "v1", Kind: "PeerAuthenticationList"})
	if err := b.k8s.List(ctx, list); err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	for _, pa := range list.Items {
		if mode, _, _ := unstructured.NestedString(pa.Object, "spec", "mtls", "mode"); mode == "STRICT" && want[pa.GetNamespace()] {
			seen[pa.GetNamespace()] = true
		}
	}
	return len(seen), nil
}

// apiserverWrites reads the API server's write counts on meshWriteResources.
func (b *bench) apiserverWrites(ctx context.Context) (map[string]float64, error) {
	return cluster.APIServerWrites(ctx, b.bed.Cluster.REST, meshWriteResources)
}

// phaseOf is phase for any operator process and metrics address.
func (b *bench) phaseOf(addr string, p *harness.Process, ph *Phase, fn func() error) error {
	pid := p.Pid()
	before, err := scrapeAddr(b.metrics, addr)
	if err != nil {
		return err
	}
	cpu0, _ := cpuSeconds(pid)
	errs0 := reconcileErrors(p.LogPath)
	audit0 := auditOffset(b.auditLog)
	start := time.Now()
	if err := fn(); err != nil {
		return err
	}
	time.Sleep(time.Second) // in-flight writes land before the second scrape
	ph.Seconds = round(time.Since(start).Seconds(), 2)
	after, err := scrapeAddr(b.metrics, addr)
	if err != nil {
		return err
	}
	cpu1, _ := cpuSeconds(pid)
	ph.CPUSeconds = round(cpu1-cpu0, 2)
	ns := harness.MeshNamespace
	if p == b.bed.Fleet {
		ns = harness.FleetNamespace
	}
	if ph.ByResource, err = auditByResource(b.auditLog, audit0, auditOffset(b.auditLog), ns); err != nil {
		return err
	}
	ph.ReconcileErrors = reconcileErrors(p.LogPath) - errs0
	ph.Reconciles = after.reconciles - before.reconciles
	ph.Requests = Requests{}
	ph.Writes = 0
	for m, v := range after.requests {
		if d := v - before.requests[m]; d != 0 {
			ph.Requests[m] = d
			switch m {
			case "POST", "PUT", "PATCH", "DELETE":
				ph.Writes += d
			}
		}
	}
	return nil
}

func scrapeAddr(c *http.Client, addr string) (scraped, error) {
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return scraped{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return scraped{}, fmt.Errorf("metrics %s: %s", addr, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// meshLinearity reports, per write key of the mesh results, how the count
// grows with the namespace count M: a per namespace (the slope between the
// two largest M, rounded to a whole write) plus a fixed part. Writes per
// namespace are constant when the fixed parts c(M) - a·M of every M lie
// within maxFixedSpread of each other: a fixed cost may vary by a write or
// two with reconcile timing (status patches), but a per-namespace cost that
// grows with M would leave residuals that grow with M (at M = 10, 100, 300
// even 0.05 writes per namespace more would spread them by 14).
func meshLinearity(rs []MeshResult) []string {
	// One run per namespace count (the first that succeeded): repeats of a
	// count say nothing about how writes grow with it.
	var ok []MeshResult
	seen := map[int]bool{}
	for _, r := range rs {
		if r.Error == "" && !seen[r.Namespaces] {
			seen[r.Namespaces] = true
			ok = append(ok, r)
		}
	}
	if len(ok) < 2 {
		return nil
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].Namespaces < ok[j].Namespaces })
	keys := map[string]bool{}
	for _, r := range ok {
		for k := range r.WritesByResource {
			keys[k] = true
		}
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []string
	hi, lo := ok[len(ok)-1], ok[len(ok)-2]
	for _, k := range sorted {
		a := math.Round((hi.WritesByResource[k]-lo.WritesByResource[k])/float64(hi.Namespaces-lo.Namespaces)) + 0 // + 0: no "-0"
		minB, maxB := math.Inf(1), math.Inf(-1)
		var got []string
		for _, r := range ok {
			c := r.WritesByResource[k]
			b := c - a*float64(r.Namespaces)
			minB, maxB = math.Min(minB, b), math.Max(maxB, b)
			got = append(got, fmt.Sprintf("%g@%d", c, r.Namespaces))
		}
		fixed := fmtNum(minB)
		if maxB != minB {
			fixed = fmtNum(minB) + "–" + fmtNum(maxB)
		}
		verdict := fmt.Sprintf("%s: %s per namespace + %s fixed", k, fmtNum(a), fixed)
		if maxB-minB > maxFixedSpread {
			verdict = fmt.Sprintf("%s: %s (%s)", k, notConstant, strings.Join(got, ", "))
		}
		out = append(out, verdict)
	}
	return out
}

// maxFixedSpread is how much a fixed write count may vary between runs.
const maxFixedSpread = 2

const notConstant = "NOT constant per namespace"

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := listenLoopback()
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func listenLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
