package benchmark

// The fleet operator's scenarios: creating N fleets, the steady state, rolling
// one fleet, the reaction probe, the cold restart, the floors, the roll
// overhead (bench/results/history.md, per N).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

func (b *bench) all(ctx context.Context) error {
	// The fleet operator's CPU over this N, summed over its processes (the
	// cold restart and the floors each start a new one): retire adds what
	// the running one used since base, before it is stopped.
	cpuSpent := 0.0
	cpuBase, _ := cpuSeconds(b.bed.Fleet.Pid())
	retire := func() {
		if cpu, err := cpuSeconds(b.bed.Fleet.Pid()); err == nil {
			cpuSpent += cpu - cpuBase
		}
		cpuBase = 0
	}
	pid := b.bed.Fleet.Pid()
	if b.timelineOn {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		go b.timeline(ctx)
	}

	// 1+2: create N fleets and wait for all Ready.
	fleets, err := b.createFleets(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	var created Phase
	if err := b.phase(&created, func() error {
		if err := b.applyFleets(ctx, fleets); err != nil {
			return err
		}
		return b.waitFleetsReady(ctx, fleets, "1.0.0")
	}); err != nil {
		return err
	}
	b.res.ConvergenceSeconds = round(time.Since(start).Seconds(), 2)
	b.res.Create = created
	logf("N=%d: %d fleets Ready in %.1fs; %v, %.0f reconciles, operator CPU %.1f s", b.n, len(fleets), b.res.ConvergenceSeconds, created.Requests, created.Reconciles, created.CPUSeconds)

	// Steady state: poke every fleet (annotation → reconcile) and wait three
	// state intervals, so every fleet re-reads /state several times.
	if err := b.phase(&b.res.Steady, func() error {
		for _, f := range fleets {
			p := fmt.Sprintf(`{"metadata":{"annotations":{"bench.fleetmesh.dev/poke":%q}}}`, time.Now().Format(time.RFC3339Nano))
			if err := b.k8s.Patch(ctx, &fleetv1.CelldFleet{ObjectMeta: f.ObjectMeta}, client.RawPatch(types.MergePatchType, []byte(p))); err != nil {
				return err
			}
		}
		time.Sleep(b.steady)
		return nil
	}); err != nil {
		return err
	}
	logf("N=%d: steady %.0fs: %v", b.n, b.res.Steady.Seconds, b.res.Steady.Requests)
	if b.res.Steady.Writes != 0 {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: %v writes in steady state: %v", b.n, b.res.Steady.Writes, b.res.Steady.Requests))
	}

	// Template roll of one fleet.
	if err := b.phase(&b.res.TemplateRoll, func() error {
		f := fleets[0]
		if err := b.patchImage(ctx, f, imageV2); err != nil {
			return err
		}
		return b.waitFleetsReady(ctx, []*fleetv1.CelldFleet{f}, "1.1.0")
	}); err != nil {
		return err
	}
	logf("N=%d: roll of one fleet in %.1fs: %v", b.n, b.res.TemplateRoll.Seconds, b.res.TemplateRoll.Requests)

	// Reaction under load: an image change on one fleet until its first
	// member is deleted, 20 times on 20 fleets, the others in steady state.
	newPid := pid
	if b.probes {
		if err := b.reaction(ctx, fleets); err != nil {
			return fmt.Errorf("reaction: %w", err)
		}
		logf("N=%d: image change → first delete p50 %.2fs p99 %.2fs over %d tries", b.n, b.res.Reaction.P50, b.res.Reaction.P99, len(b.res.Reaction.Seconds))

		// Cold restart: SIGKILL at steady state, start again.
		if hwm, err := peakRSS(pid); err == nil {
			b.res.PeakRSSMiBBeforeRestart = round(hwm/1024, 1)
		}
		retire()
		if err := b.coldRestart(ctx); err != nil {
			return fmt.Errorf("cold restart: %w", err)
		}
		r := b.res.Restart
		logf("N=%d: cold restart: informers synced %.1fs, every fleet reconciled %.1fs (%.2f×; operator CPU %.1fs, machine %.2f cores busy), writes %g (%v), members replaced %d", b.n, r.InformersSyncedSeconds, r.AllReconciledSeconds, r.Ratio, r.OperatorCPUSeconds, r.MachineBusyCores, r.Phase.Writes, r.Phase.ByResource, r.MembersReplaced)
		newPid = b.bed.Fleet.Pid()
	}

	// 3: peak memory of the fleet operator, taken before it is stopped for
	// the floors.
	hwm, err := peakRSS(newPid)
	if err != nil {
		return err
	}
	if newPid != pid {
		b.res.PeakRSSMiBAfterRestart = round(hwm/1024, 1)
	} else {
		b.res.PeakRSSMiBBeforeRestart = round(hwm/1024, 1)
	}
	b.res.PeakRSSMiB = max(b.res.PeakRSSMiBBeforeRestart, b.res.PeakRSSMiBAfterRestart)
	b.res.RSSKiBPerFleet = round(b.res.PeakRSSMiB*1024/float64(b.n), 1)

	// 1: the control plane's floors, one client in sequence, then 8 in
	// parallel, the fleet operator stopped meanwhile.
	if err := b.floors(ctx, retire); err != nil {
		return err
	}
	newPid = b.bed.Fleet.Pid()

	// 4: roll overhead of a 5-member fleet.
	if err := b.rollOverhead(ctx); err != nil {
		return fmt.Errorf("roll overhead: %w", err)
	}
	logf("N=%d: 5-member roll %.1fs, members %.1fs, overhead %.1fs (%+v)", b.n, b.res.Roll.RollSeconds, b.res.Roll.SumMemberSeconds, b.res.Roll.OverheadSeconds, b.res.Roll.Breakdown)

	// CPU over the whole N, the floors left out.
	retire()
	b.res.CPUSecondsTotal = round(cpuSpent, 2)
	if b.bed.Fleet.Pid() != newPid {
		return fmt.Errorf("fleet operator restarted during the run")
	}
	return b.bed.Healthy()
}

// floors measures the sequential floor, and with the probes the parallel
// one, and the convergence ratios against them; with noFloors nothing. The
// fleet operator is stopped for them (retire is called first, to count its
// CPU) and started again after them, as the mesh floor runs without the
// mesh operator: running, it kept reading every member's /state (and the
// stand-ins answering), and its label-restricted caches took in the
// copies, which carry the fleets' labels: a load the floors carried and
// the convergence, starting from no member, did not.
func (b *bench) floors(ctx context.Context, retire func()) error {
	if b.noFloors {
		logf("N=%d: floors skipped (-no-floors)", b.n)
		return nil
	}
	retire()
	if err := b.bed.Fleet.Stop(30 * time.Second); err != nil {
		return err
	}
	if err := b.floor(ctx, "floor", 1, b.dyn, &b.res.FloorSeconds); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	b.res.Ratio = round(b.res.ConvergenceSeconds/b.res.FloorSeconds, 2)
	logf("N=%d: sequential floor %.1fs (%d objects), ratio %.2f", b.n, b.res.FloorSeconds, b.res.FloorObjects, b.res.Ratio)
	if b.probes {
		// The sequential copy goes first: each member's stand-in holds two
		// listening sockets in this process, and three copies of N=1,000
		// (18,000 sockets besides the connections) ran out of the 20,000
		// open files allowed here, so no Pod of the parallel copy was ever
		// served. It also gives the parallel floor the bed the sequential
		// one had.
		if err := b.dropCopy(ctx, "floor", true); err != nil {
			return fmt.Errorf("removing the sequential floor's copy: %w", err)
		}
		if err := b.floor(ctx, "pfloor", floorClients, b.dyn, &b.res.ParallelFloorSeconds); err != nil {
			return fmt.Errorf("parallel floor: %w", err)
		}
		b.res.ParallelRatio = round(b.res.ConvergenceSeconds/b.res.ParallelFloorSeconds, 2)
		logf("N=%d: parallel floor (%d clients) %.1fs, ratio %.2f", b.n, floorClients, b.res.ParallelFloorSeconds, b.res.ParallelRatio)
		// The paced floor: the parallel floor's clients held to the fleet
		// operator's own pace, so the pacing's share of the convergence
		// shows beside the unpaced floors.
		paced, err := b.pacedClient()
		if err != nil {
			return fmt.Errorf("paced floor: %w", err)
		}
		if err := b.dropCopy(ctx, "pfloor", true); err != nil {
			return fmt.Errorf("removing the parallel floor's copy: %w", err)
		}
		if err := b.floor(ctx, "qfloor", floorClients, paced, &b.res.PacedFloorSeconds); err != nil {
			return fmt.Errorf("paced floor: %w", err)
		}
		b.res.PacedRatio = round(b.res.ConvergenceSeconds/b.res.PacedFloorSeconds, 2)
		logf("N=%d: paced floor (%d clients at the operator's pace) %.1fs, ratio %.2f", b.n, floorClients, b.res.PacedFloorSeconds, b.res.PacedRatio)
	}
	// The last copy goes too, with the bench's connections to its
	// stand-ins: the fleet operator's first pass after its restart opens a
	// connection to every member at once, and next to 3,000 copied
	// stand-ins (two listening sockets each) and the bench's idle
	// connections to them that ran out of the 20,000 open files at N=1,000.
	last := "floor"
	if b.probes {
		last = "qfloor"
	}
	b.http.CloseIdleConnections()
	if err := b.dropCopy(ctx, last, false); err != nil {
		return fmt.Errorf("removing the last floor's copy: %w", err)
	}
	if err := b.resumeFleetOperator(); err != nil {
		return fmt.Errorf("starting the fleet operator after the floors: %w", err)
	}
	return nil
}

func (b *bench) createFleets(ctx context.Context) ([]*fleetv1.CelldFleet, error) {
	var out []*fleetv1.CelldFleet
	for i := 0; i < b.res.Namespaces; i++ {
		ns := fmt.Sprintf("bench-%d", i)
		if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, err
		}
	}
	for i := 0; i < b.n; i++ {
		out = append(out, newFleet(fmt.Sprintf("bench-%d", i%b.res.Namespaces), fmt.Sprintf("f%d", i), membersPerFleet))
	}
	return out, nil
}

func newFleet(ns, name string, replicas int32) *fleetv1.CelldFleet {
	return &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1.CelldFleetSpec{
			Replicas: ptr.To(replicas),
			Image:    imageV1,
			Storage:  &fleetv1.Storage{Size: resource.MustParse("1Gi")},
		},
	}
}

func (b *bench) applyFleets(ctx context.Context, fleets []*fleetv1.CelldFleet) error {
	for _, f := range fleets {
		if err := b.k8s.Create(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) patchImage(ctx context.Context, f *fleetv1.CelldFleet, image string) error {
	p := fmt.Sprintf(`{"spec":{"image":%q}}`, image)
	return b.k8s.Patch(ctx, &fleetv1.CelldFleet{ObjectMeta: f.ObjectMeta}, client.RawPatch(types.MergePatchType, []byte(p)))
}

// readyOn is the specs' readiness: Ready for the current generation, every
// member reporting version on /state.
func readyOn(f *fleetv1.CelldFleet, version string) bool {
	ready := meta.FindStatusCondition(f.Status.Conditions, "Ready")
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.ObservedGeneration != f.Generation {
		return false
	}
	for _, m := range f.Status.Members {
		if m.State == nil || m.State.Version != version || !m.State.Healthy {
			return false
		}
	}
	return f.Spec.Replicas != nil && len(f.Status.Members) == int(*f.Spec.Replicas)
}

func (b *bench) waitFleetsReady(ctx context.Context, fleets []*fleetv1.CelldFleet, version string) error {
	want := map[types.NamespacedName]bool{}
	for _, f := range fleets {
		want[client.ObjectKeyFromObject(f)] = true
	}
	pending := len(want)
	err := b.fleetsSeen.wait(ctx, time.Now().Add(b.timeout), func() (bool, error) {
		seen, err := b.fleetsSeen.fleets(ctx)
		if err != nil {
			return false, err
		}
		pending = len(want)
		for i := range seen {
			if f := &seen[i]; want[client.ObjectKeyFromObject(f)] && readyOn(f, version) {
				pending--
			}
		}
		return pending == 0, b.bed.Healthy()
	})
	if errors.Is(err, errDeadline) {
		return fmt.Errorf("%d of %d fleets not Ready on %s after %s", pending, len(want), version, b.timeout)
	}
	return err
}

// floorKinds are the kinds of the objects a fleet's controller reference
// marks as its own. Every fleet of the bed owns five: a ServiceAccount,
// two Services, a NetworkPolicy and a StatefulSet. The bed serves Istio's
// API but enrolls no namespace, so its fleets (mode auto) write no Istio
// object; until issue 42 they wrote the standby AuthorizationPolicy and
// PeerAuthentication there too (seven), and the Istio kinds stay listed so
// that a floor copies whatever of them a fleet owns.
var floorKinds = []schema.GroupVersionResource{
	{Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "services"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"},
	{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"},
}

// objectsPerFleet is how many objects of floorKinds each fleet owns.
const objectsPerFleet = 5

// floorClients is how many clients apply the parallel floor's objects at
// once: what the control plane can take, not what one client does.
const floorClients = 8

// dropCopy deletes a floor's namespaces (prefix-<i>) and waits until they
// are gone, their Pods (and so their stand-ins) with them; with volumes, it
// also waits for the volumes of their claims (before another floor).
func (b *bench) dropCopy(ctx context.Context, prefix string, volumes bool) error {
	for i := 0; i < b.res.Namespaces; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}}
		if err := b.k8s.Delete(ctx, ns); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	// The Pods without a grace period: a terminating namespace admits no
	// new ones, and kwok's graceful deletion of thousands of Pods would
	// take minutes. The rest of each namespace, and the volumes of its
	// claims, go before the next floor starts, so their deletion does not
	// load that floor.
	for i := 0; i < b.res.Namespaces; i++ {
		err := b.k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(fmt.Sprintf("%s-%d", prefix, i)), client.GracePeriodSeconds(0))
		if client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	deadline := time.Now().Add(b.timeout)
	for {
		list := &corev1.NamespaceList{}
		if err := b.k8s.List(ctx, list); err != nil {
			return err
		}
		left := 0
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, prefix+"-") {
				left++
			}
		}
		// The copy's volumes outlive its namespaces: the provisioner deletes
		// them once their claims are gone, through the same volume
		// controller that binds the next floor's claims (at N=1,000 that
		// took minutes, which the parallel floor spent beside it).
		pvs := &corev1.PersistentVolumeList{}
		if volumes {
			if err := b.k8s.List(ctx, pvs); err != nil {
				return err
			}
		}
		for _, pv := range pvs.Items {
			if ref := pv.Spec.ClaimRef; ref != nil && strings.HasPrefix(ref.Namespace, prefix+"-") {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d namespaces or volumes of %s-* still there after %s", left, prefix, b.timeout)
		}
		time.Sleep(time.Second)
	}
}

// floor copies every converged fleet's objects (stripped of status and
// server-set metadata) into fresh namespaces <prefix>-<i>, applies them
// server-side with the given number of concurrent clients (each object once,
// in the order a fleet's objects are listed; with one client, all in
// sequence), and waits until every Pod is Ready with a healthy /state. The
// time goes to *seconds.
func (b *bench) floor(ctx context.Context, prefix string, clients int, dyn dynamic.Interface, seconds *float64) error {
	var objs []*unstructured.Unstructured
	var gvrs []schema.GroupVersionResource
	for i := 0; i < b.res.Namespaces; i++ {
		src, dst := fmt.Sprintf("bench-%d", i), fmt.Sprintf("%s-%d", prefix, i)
		if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dst}}); err != nil {
			return err
		}
		for _, gvr := range floorKinds {
			list, err := b.dyn.Resource(gvr).Namespace(src).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for i := range list.Items {
				u := &list.Items[i]
				if !ownedByFleet(u) {
					continue
				}
				objs = append(objs, strip(u, dst))
				gvrs = append(gvrs, gvr)
			}
		}
	}
	b.res.FloorObjects = len(objs)
	if want := b.n * objectsPerFleet; len(objs) != want {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: floor %s copied %d objects, expected %d (SA, 2 Services, NetworkPolicy, StatefulSet per fleet: no enrollment in effect, no Istio object)", b.n, prefix, len(objs), want))
	}
	pods, err := observe(ctx, b.cfg, b.scheme, &corev1.Pod{})
	if err != nil {
		return err
	}
	defer pods.stop()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(clients)
	for i, u := range objs {
		if gctx.Err() != nil {
			break // an apply failed: Wait returns its error
		}
		g.Go(func() error {
			if _, err := dyn.Resource(gvrs[i]).Namespace(u.GetNamespace()).Apply(gctx, u.GetName(), u,
				metav1.ApplyOptions{FieldManager: "bench-floor", Force: true}); err != nil {
				return fmt.Errorf("apply %s %s/%s: %w", gvrs[i].Resource, u.GetNamespace(), u.GetName(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	var namespaces []string
	for i := 0; i < b.res.Namespaces; i++ {
		namespaces = append(namespaces, fmt.Sprintf("%s-%d", prefix, i))
	}
	// Any version: the fleets rolled earlier were copied on their new image.
	if err := b.waitPodsServing(ctx, pods, namespaces, b.n*membersPerFleet, ""); err != nil {
		return err
	}
	*seconds = round(time.Since(start).Seconds(), 2)
	return nil
}

// pacedClient is a dynamic client whose requests share one token bucket at
// the pace the fleet operator said it runs at (its start-up line's
// kubeAPIQPS and kubeAPIBurst: the chart's and the flags' defaults, or what
// the bed set), as the operator's own clients share theirs.
func (b *bench) pacedClient() (dynamic.Interface, error) {
	qps, burst, err := startupPace(b.bed.Fleet.LogPath)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(b.cfg)
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	return dynamic.NewForConfig(cfg)
}

// startupPace reads the pace from an operator's log: the first start-up
// line (shared/manager) with kubeAPIQPS.
func startupPace(logPath string) (qps float64, burst int, err error) {
	f, err := os.Open(logPath)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			QPS   *float64 `json:"kubeAPIQPS"`
			Burst int      `json:"kubeAPIBurst"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.QPS != nil {
			if *line.QPS <= 0 {
				return 0, 0, fmt.Errorf("%s: the operator runs unpaced (kubeAPIQPS %g): no paced floor to compare with", logPath, *line.QPS)
			}
			return *line.QPS, line.Burst, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	return 0, 0, fmt.Errorf("%s: no start-up line with kubeAPIQPS", logPath)
}

func ownedByFleet(u *unstructured.Unstructured) bool {
	for _, o := range u.GetOwnerReferences() {
		if o.Kind == "CelldFleet" && o.Controller != nil && *o.Controller {
			return true
		}
	}
	return false
}

// strip keeps what a client would apply: apiVersion, kind, name, labels,
// annotations and spec (minus what the API server allocates).
func strip(in *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": in.GetAPIVersion(),
		"kind":       in.GetKind(),
	}}
	u.SetNamespace(ns)
	u.SetName(in.GetName())
	u.SetLabels(in.GetLabels())
	ann := in.GetAnnotations()
	delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
	if len(ann) > 0 {
		u.SetAnnotations(ann)
	}
	for k, v := range in.Object {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			u.Object[k] = v
		}
	}
	if in.GetKind() == "Service" {
		unstructured.RemoveNestedField(u.Object, "spec", "clusterIP")
		unstructured.RemoveNestedField(u.Object, "spec", "clusterIPs")
	}
	if in.GetKind() == "StatefulSet" {
		// Claim templates carry status and server-set metadata too.
		if tmpls, ok, _ := unstructured.NestedSlice(u.Object, "spec", "volumeClaimTemplates"); ok {
			for i, t := range tmpls {
				if m, ok := t.(map[string]any); ok {
					delete(m, "status")
					if md, ok := m["metadata"].(map[string]any); ok {
						delete(md, "creationTimestamp")
					}
					tmpls[i] = m
				}
			}
			_ = unstructured.SetNestedSlice(u.Object, tmpls, "spec", "volumeClaimTemplates")
		}
		unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	}
	return u
}

// waitPodsServing waits for want celld Pods in namespaces that are Ready
// and whose /state reports healthy on version ("" for any).
func (b *bench) waitPodsServing(ctx context.Context, seen *observer, namespaces []string, want int, version string) error {
	in := map[string]bool{}
	for _, ns := range namespaces {
		in[ns] = true
	}
	served := map[types.UID]bool{}
	err := seen.wait(ctx, time.Now().Add(b.timeout), func() (bool, error) {
		pods, err := seen.pods(ctx)
		if err != nil {
			return false, err
		}
		// Read the /state of the Pods not served yet, 16 at a time; served
		// is written only after all reads are back.
		var todo []*corev1.Pod
		for i := range pods {
			if p := &pods[i]; in[p.Namespace] && !served[p.UID] && podReady(p) {
				todo = append(todo, p)
			}
		}
		ok := make([]bool, len(todo))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for j, p := range todo {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				ok[j] = b.serving(p.Status.PodIP, version)
			}()
		}
		wg.Wait()
		for j, p := range todo {
			if ok[j] {
				served[p.UID] = true
			}
		}
		return len(served) >= want, nil
	})
	if errors.Is(err, errDeadline) {
		return fmt.Errorf("%d of %d Pods serving after %s", len(served), want, b.timeout)
	}
	return err
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serving reads the member's /state as the operator does.
func (b *bench) serving(ip, version string) bool {
	resp, err := b.http.Get("http://" + ip + ":8081/state")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Healthy bool   `json:"healthy"`
		Version string `json:"version"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false
	}
	return st.Healthy && (version == "" || st.Version == version)
}

// rollOverhead rolls a 5-member fleet and subtracts, from the roll's
// duration, the time each new member took from Pod creation to Ready with a
// healthy /state on the new version. It also records each step's timeline,
// so the overhead splits into where it goes.
func (b *bench) rollOverhead(ctx context.Context) error {
	const ns = "bench-roll"
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	f := newFleet(ns, "roll", rollMembers)
	if err := b.k8s.Create(ctx, f); err != nil {
		return err
	}
	if err := b.waitFleetsReady(ctx, []*fleetv1.CelldFleet{f}, "1.0.0"); err != nil {
		return err
	}
	old := map[types.UID]string{}
	list := &corev1.PodList{}
	if err := b.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, p := range list.Items {
		old[p.UID] = p.Name
	}
	members := map[types.UID]*rollMember{}
	names := map[types.UID]string{}
	deleted := map[string]time.Time{} // old Pod name → first seen terminating or gone
	replacedAgain := 0
	start := time.Now()
	if err := b.patchImage(ctx, f, imageV2); err != nil {
		return err
	}
	deadline := start.Add(b.timeout)
	var end time.Time
	for {
		// The fleet is read before the Pods: once it reports Ready the
		// list that follows holds every replacement Ready, so the roll
		// ends with each new member seen serving. Read the other way
		// round, the last replacement could turn Ready between the two
		// reads and the loop ended without seeing it (CI, 8754249).
		got := &fleetv1.CelldFleet{}
		if err := b.k8s.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			return err
		}
		if end.IsZero() && readyOn(got, "1.1.0") {
			end = time.Now()
		}
		list := &corev1.PodList{}
		if err := b.k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		now := time.Now()
		present := map[types.UID]bool{}
		for i := range list.Items {
			p := &list.Items[i]
			present[p.UID] = true
			if name, isOld := old[p.UID]; isOld {
				if _, seen := deleted[name]; !seen && p.DeletionTimestamp != nil {
					deleted[name] = now
				}
				continue
			}
			m := members[p.UID]
			if m == nil {
				// creationTimestamp has one-second resolution and the Pod
				// was created before this poll saw it: the earlier of the
				// two upper bounds is within one poll of the truth.
				created := p.CreationTimestamp.Add(time.Second)
				if now.Before(created) {
					created = now
				}
				m = &rollMember{created: created}
				members[p.UID], names[p.UID] = m, p.Name
			}
			if m.ready.IsZero() && podReady(p) && b.serving(p.Status.PodIP, "1.1.0") {
				m.ready = now
				if !end.IsZero() {
					// The fleet's Ready already said it served.
					m.ready = end
				}
			}
		}
		for uid, name := range old {
			if _, seen := deleted[name]; !seen && !present[uid] {
				deleted[name] = now
			}
		}
		// A new Pod gone before it served was deleted in turn: kwok (0.8)
		// finishes a graceful deletion with a delete by name, without the
		// Pod's UID, and when it repeats one, that can hit the replacement
		// the StatefulSet controller has just made under the same name (seen
		// at N=1,000 in issue #20's eleventh round, bench/results/history.md). Its successor is the
		// member; waiting for the gone one to serve could never end.
		for uid, m := range members {
			if !present[uid] && m.ready.IsZero() {
				delete(members, uid)
				replacedAgain++
			}
		}
		if !end.IsZero() && servingCount(members) == len(members) {
			break
		}
		if now.After(deadline) || !end.IsZero() && now.Sub(end) > 30*time.Second {
			return fmt.Errorf("roll not done after %s: fleet Ready on the new version %v, %d of %d new members seen serving",
				now.Sub(start).Round(time.Second), !end.IsZero(), servingCount(members), len(members))
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := Roll{Members: rollMembers, RollSeconds: round(end.Sub(start).Seconds(), 2), MemberSeconds: map[string]float64{}}
	since := func(t time.Time) float64 { return round(t.Sub(start).Seconds(), 2) }
	for uid, m := range members {
		// Both ends are seen by the same 100 ms poll, so their errors
		// roughly cancel.
		d := m.ready.Sub(m.created).Seconds()
		r.MemberSeconds[names[uid]] = round(d, 2)
		r.SumMemberSeconds += d
		r.Steps = append(r.Steps, RollStep{Member: names[uid], Deleted: since(deleted[names[uid]]), Created: since(m.created), Serving: since(m.ready)})
	}
	if len(members) != rollMembers {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: roll replaced %d Pods, expected %d", b.n, len(members), rollMembers))
	}
	if replacedAgain > 0 {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: roll: %d new Pod(s) were deleted before they served (kwok's delete by name)", b.n, replacedAgain))
	}
	sort.Slice(r.Steps, func(i, j int) bool { return r.Steps[i].Deleted < r.Steps[j].Deleted })
	for i, st := range r.Steps {
		if i == 0 {
			r.Breakdown.FirstDelete = st.Deleted
		} else {
			r.Breakdown.NextDelete += st.Deleted - r.Steps[i-1].Serving
		}
		r.Breakdown.Recreate += st.Created - st.Deleted
		if i == len(r.Steps)-1 {
			r.Breakdown.FinalReady = r.RollSeconds - st.Serving
		}
	}
	r.Breakdown = RollBreakdown{FirstDelete: round(r.Breakdown.FirstDelete, 2), Recreate: round(r.Breakdown.Recreate, 2),
		NextDelete: round(r.Breakdown.NextDelete, 2), FinalReady: round(r.Breakdown.FinalReady, 2)}
	r.SumMemberSeconds = round(r.SumMemberSeconds, 2)
	r.OverheadSeconds = round(r.RollSeconds-r.SumMemberSeconds, 2)
	r.OverheadPerMember = round(r.OverheadSeconds/float64(rollMembers), 2)
	b.res.Roll = r
	return nil
}

// rollMember is one replacement Pod of the rolled fleet, as the poll saw it.
type rollMember struct {
	created time.Time
	ready   time.Time // first poll that saw it Ready with a healthy /state on the new version
}

func servingCount(members map[types.UID]*rollMember) int {
	n := 0
	for _, m := range members {
		if !m.ready.IsZero() {
			n++
		}
	}
	return n
}

// Reaction is the image change → first member delete probe.
type Reaction struct {
	// Seconds per try, in the order tried (one fleet each).
	Seconds []float64 `json:"seconds"`
	P50     float64   `json:"p50Seconds"`
	P99     float64   `json:"p99Seconds"`
}

const reactionTries = 20

// reaction patches the image of reactionTries fleets, one after another,
// and times each from the patch until the first of its members is seen
// terminating (a Pod watch, so no poll interval is added). The tries are
// spread over the state interval, so they land at every phase of the
// others' periodic /state reads. Then every probed fleet must be Ready on
// the new version before the next scenario.
func (b *bench) reaction(ctx context.Context, fleets []*fleetv1.CelldFleet) error {
	tries := min(reactionTries, len(fleets)-1)
	var probed []*fleetv1.CelldFleet
	var secs []float64
	for i := 0; i < tries; i++ {
		f := fleets[1+i*(len(fleets)-1)/tries]
		probed = append(probed, f)
		w, err := b.cs.CoreV1().Pods(f.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: labels.Instance + "=" + f.Name})
		if err != nil {
			return err
		}
		start := time.Now()
		if err := b.patchImage(ctx, f, imageV2); err != nil {
			w.Stop()
			return err
		}
		d, err := firstDelete(w, b.timeout)
		w.Stop()
		if err != nil {
			return fmt.Errorf("fleet %s/%s: %w", f.Namespace, f.Name, err)
		}
		secs = append(secs, round(d.Sub(start).Seconds(), 3))
		// Spread the next try over the state interval.
		time.Sleep(time.Duration(i%5) * StateInterval / 5 / 2)
	}
	sorted := append([]float64(nil), secs...)
	sort.Float64s(sorted)
	b.res.Reaction = Reaction{Seconds: secs, P50: percentile(sorted, 50), P99: percentile(sorted, 99)}
	return b.waitFleetsReady(ctx, probed, "1.1.0")
}

// firstDelete waits for the first Pod event showing a deletion and returns
// when it arrived.
func firstDelete(w watch.Interface, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return time.Time{}, fmt.Errorf("pod watch closed")
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if ev.Type == watch.Deleted || (isPod && p.DeletionTimestamp != nil) {
				return time.Now(), nil
			}
		case <-deadline:
			return time.Time{}, fmt.Errorf("no member deleted after %s", timeout)
		}
	}
}

// Restart is the cold restart at steady state.
type Restart struct {
	// InformersSyncedSeconds: from starting the new process until its
	// fleet controller logged "Starting workers", i.e. every informer it
	// waits for has listed what it watches (process start included).
	InformersSyncedSeconds float64 `json:"informersSyncedSeconds"`
	// AllReconciledSeconds: from starting the new process until every
	// fleet was reconciled once, seen from the members: the last fleet to
	// have all its members' /state read by the new process (a fleet's
	// first reconcile reads them all, after its applies and before its
	// status). The controller's counters confirm it afterwards: all N
	// fleets added, at least N reconciles, nothing queued or in progress.
	AllReconciledSeconds float64 `json:"allReconciledSeconds"`
	// Ratio = AllReconciled / InformersSynced (target ≤ 2).
	Ratio float64 `json:"ratio"`
	// From the new process's start until AllReconciled: the operator's CPU
	// seconds, and how many of the machine's cores were busy on average
	// (every process, from /proc/stat). A window with the machine's cores
	// all busy is bound by CPU, not by the latency of the members' /state.
	OperatorCPUSeconds float64 `json:"operatorCPUSecondsToAllReconciled"`
	MachineBusyCores   float64 `json:"machineBusyCoresToAllReconciled"`
	// Phase is the new process's requests from its start until a state
	// interval after AllReconciled (its counters start at zero).
	Phase Phase `json:"phase"`
	// MembersReplaced counts member Pods whose UID changed or which are
	// gone, MemberRestarts the sum of their containers' restartCount change.
	MembersReplaced int `json:"membersReplaced"`
	MemberRestarts  int `json:"memberRestarts"`
}

// fleetController is the fleet operator's controller name in its metrics.
const fleetController = "celldfleet"

// coldRestart SIGKILLs the fleet operator at steady state and starts it
// again: it must list, reconcile every fleet once, and write nothing.
func (b *bench) coldRestart(ctx context.Context) error {
	members := func() (map[string]corev1.Pod, error) {
		list := &corev1.PodList{}
		if err := b.k8s.List(ctx, list, client.MatchingLabels{labels.Name: "celld"}); err != nil {
			return nil, err
		}
		out := map[string]corev1.Pod{}
		for _, p := range list.Items {
			if strings.HasPrefix(p.Namespace, "bench-") {
				out[p.Namespace+"/"+p.Name] = p
			}
		}
		return out, nil
	}
	before, err := members()
	if err != nil {
		return err
	}
	p := b.bed.Fleet
	if err := p.Kill(); err != nil {
		return err
	}
	logStart := int64(0)
	if fi, err := os.Stat(p.LogPath); err == nil {
		logStart = fi.Size()
	}
	audit0 := auditOffset(b.auditLog)
	busy0, _ := machineBusySeconds()
	start := time.Now()
	if err := p.Start(); err != nil {
		return err
	}
	pid := p.Pid()
	if b.fleetPprof != "" {
		go b.profileRestart(start)
	}
	// The stand-ins note each member's first /state read from here on (the
	// old process is gone, the new one reads nothing before its workers
	// start). A fleet's first reconcile reads all its members; that is how
	// the bench sees the first pass go by without scraping the operator
	// while it is measured: at N=1,000 a scrape costs the operator about
	// 0.3 s of CPU (bench/results/history.md, seventh round).
	b.bed.Standins.ResetStateReads()
	fleetIPs := map[string][]string{}
	for _, m := range before {
		k := m.Namespace + "/" + m.Labels[labels.Instance]
		fleetIPs[k] = append(fleetIPs[k], m.Status.PodIP)
	}
	if len(fleetIPs) != b.n {
		return fmt.Errorf("%d fleets have member Pods before the restart, want %d", len(fleetIPs), b.n)
	}
	var synced, all time.Duration
	deadline := start.Add(b.timeout)
	for all == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("not every fleet reconciled after %s (informers synced: %v)", b.timeout, synced > 0)
		}
		if !p.Running() {
			return fmt.Errorf("fleet operator exited after the restart")
		}
		time.Sleep(100 * time.Millisecond)
		if synced == 0 {
			// The line's own time (the bench runs the operators with
			// --zap-time-encoding=rfc3339nano), not this tick's: the pass's end
			// below is exact too.
			at, found, err := logLineTime(p.LogPath, logStart, `"Starting workers"`, fleetController)
			if err != nil {
				return err
			}
			if found {
				synced = at.Sub(start)
			}
		}
		if synced == 0 {
			continue
		}
		if last, ok := lastFleetRead(fleetIPs, b.bed.Standins.FirstStateReads()); ok {
			all = last.Sub(start)
		}
	}
	// Then the controller's own counters confirm the pass. These scrapes
	// come after the moment measured.
	if err := b.waitFirstPass(deadline); err != nil {
		return fmt.Errorf("every fleet's members were read %.1fs after the restart, but %w", all.Seconds(), err)
	}
	r := &b.res.Restart
	if cpu, err := cpuSeconds(pid); err == nil {
		r.OperatorCPUSeconds = round(cpu, 2)
	}
	if busy1, err := machineBusySeconds(); err == nil && busy0 > 0 {
		r.MachineBusyCores = round((busy1-busy0)/all.Seconds(), 2)
	}
	r.InformersSyncedSeconds = round(synced.Seconds(), 2)
	r.AllReconciledSeconds = round(all.Seconds(), 2)
	r.Ratio = round(all.Seconds()/synced.Seconds(), 2)
	// Every fleet re-reads /state once more after its first reconcile.
	time.Sleep(StateInterval + 2*time.Second)
	after, err := scrapeAddr(b.metrics, b.fleetMetrics)
	if err != nil {
		return err
	}
	r.Phase.Seconds = round(time.Since(start).Seconds(), 2)
	r.Phase.Reconciles = after.reconciles
	r.Phase.Requests = Requests{}
	for m, v := range after.requests {
		if v != 0 {
			r.Phase.Requests[m] = v
			switch m {
			case "POST", "PUT", "PATCH", "DELETE":
				r.Phase.Writes += v
			}
		}
	}
	cpu, _ := cpuSeconds(pid)
	r.Phase.CPUSeconds = round(cpu, 2)
	r.Phase.ReconcileErrors = reconcileErrorsFrom(p.LogPath, logStart)
	if r.Phase.ByResource, err = auditByResource(b.auditLog, audit0, auditOffset(b.auditLog), harness.FleetNamespace); err != nil {
		return err
	}
	now, err := members()
	if err != nil {
		return err
	}
	for k, old := range before {
		cur, ok := now[k]
		if !ok || cur.UID != old.UID {
			r.MembersReplaced++
			continue
		}
		r.MemberRestarts += restarts(&cur) - restarts(&old)
	}
	if r.Phase.Writes != 0 || r.MembersReplaced != 0 || r.MemberRestarts != 0 {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: after the cold restart: %g writes (%v), %d members replaced, %d container restarts", b.n, r.Phase.Writes, r.Phase.ByResource, r.MembersReplaced, r.MemberRestarts))
	}
	return nil
}

// waitFirstPass waits until a freshly started fleet operator's counters
// show its first pass done: every fleet added and reconciled at least once,
// nothing queued or in progress.
func (b *bench) waitFirstPass(deadline time.Time) error {
	byQueue, byController := `name="`+fleetController+`"`, `controller="`+fleetController+`"`
	for {
		v, err := scrapeSeries(b.metrics, b.fleetMetrics,
			series{"workqueue_adds_total", []string{byQueue}}, series{"workqueue_depth", []string{byQueue}},
			series{"controller_runtime_active_workers", []string{byController}}, series{"controller_runtime_reconcile_total", []string{byController}})
		if err == nil && v[0] >= float64(b.n) && v[1] == 0 && v[2] == 0 && v[3] >= float64(b.n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the controller's counters never showed %d fleets reconciled and an empty queue (%v, %v)", b.n, v, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// resumeFleetOperator starts the fleet operator again after the floors
// and waits until its first pass over the fleets is done, so the phases
// after it meet an operator at rest, as the ones before them did. The
// stopped process gave its lease up, so the new one leads at once.
func (b *bench) resumeFleetOperator() error {
	if err := b.bed.Fleet.Start(); err != nil {
		return err
	}
	return b.waitFirstPass(time.Now().Add(b.timeout))
}

// lastFleetRead is when the last fleet had every member's /state read:
// the latest of reads (by member IP) over fleets' members, once each
// fleet's members were all read.
func lastFleetRead(fleets map[string][]string, reads map[string]time.Time) (time.Time, bool) {
	var last time.Time
	for _, ips := range fleets {
		for _, ip := range ips {
			t, ok := reads[ip]
			if !ok {
				return time.Time{}, false
			}
			if t.After(last) {
				last = t
			}
		}
	}
	return last, true
}

// restartProfile is how long the CPU profile of a restarted fleet
// operator runs (-pprof): the first pass at N=1,000 and a little after.
const restartProfile = 8 * time.Second

// profileRestart saves a CPU profile of the restarted fleet operator from
// as soon as its pprof endpoint answers (-pprof) and logs where it is.
func (b *bench) profileRestart(start time.Time) {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.fleetPprof, int(restartProfile.Seconds()))
	for time.Since(start) < 10*time.Second {
		resp, err := http.Get(url)
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		defer resp.Body.Close()
		path := filepath.Join(os.TempDir(), fmt.Sprintf("bench-restart-N%d-%s.pprof", b.n, start.UTC().Format("20060102T150405Z")))
		f, err := os.Create(path)
		if err == nil {
			_, err = io.Copy(f, resp.Body)
			err = errors.Join(err, f.Close())
		}
		logf("N=%d: CPU profile of the restarted fleet operator from %.2fs after its start, %s: %s (%v)", b.n, (time.Since(start) - restartProfile).Seconds(), restartProfile, path, err)
		return
	}
	logf("N=%d: the restarted fleet operator's pprof endpoint did not answer within 10 s", b.n)
}

func restarts(p *corev1.Pod) int {
	n := 0
	for _, c := range p.Status.ContainerStatuses {
		n += int(c.RestartCount)
	}
	return n
}

// logLineTime is the time ("ts", RFC 3339 with nanoseconds) of the first
// line after offset of the JSON log at path that contains every one of
// subs; found is false while there is none.
func logLineTime(path string, offset int64, subs ...string) (at time.Time, found bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return time.Time{}, false, nil
	}
	for _, line := range strings.Split(string(b[offset:]), "\n") {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if !ok {
			continue
		}
		var entry struct {
			TS string `json:"ts"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			return time.Time{}, false, fmt.Errorf("log line %q: %w", line, err)
		}
		at, err := time.Parse(time.RFC3339Nano, entry.TS)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("log line %q: its ts: %w", line, err)
		}
		return at, true, nil
	}
	return time.Time{}, false, nil
}
