package main

// The fleet operator's scenarios: creating N fleets, the steady state, rolling
// one fleet, the floors, the roll overhead (docs/benchmark.md, per N).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

func (b *bench) all(ctx context.Context) error {
	pid := b.bed.Fleet.Pid()
	cpu0, _ := cpuSeconds(pid)

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
	logf("N=%d: %d fleets Ready in %.1fs; %v", b.n, len(fleets), b.res.ConvergenceSeconds, created.Requests)

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

	// 1: the control plane's floor.
	if err := b.floor(ctx, fleets); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	b.res.Ratio = round(b.res.ConvergenceSeconds/b.res.FloorSeconds, 2)
	logf("N=%d: floor %.1fs (%d objects), ratio %.2f", b.n, b.res.FloorSeconds, b.res.FloorObjects, b.res.Ratio)

	// 4: roll overhead of a 5-member fleet.
	if err := b.rollOverhead(ctx); err != nil {
		return fmt.Errorf("roll overhead: %w", err)
	}
	logf("N=%d: 5-member roll %.1fs, members %.1fs, overhead %.1fs (%+v)", b.n, b.res.Roll.RollSeconds, b.res.Roll.SumMemberSeconds, b.res.Roll.OverheadSeconds, b.res.Roll.Breakdown)

	// 3: memory and CPU over the whole N.
	hwm, err := peakRSS(pid)
	if err != nil {
		return err
	}
	b.res.PeakRSSMiB = round(hwm/1024, 1)
	cpu1, _ := cpuSeconds(pid)
	b.res.CPUSecondsTotal = round(cpu1-cpu0, 2)
	if b.bed.Fleet.Pid() != pid {
		return fmt.Errorf("fleet operator restarted during the run")
	}
	return b.bed.Healthy()
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
	deadline := time.Now().Add(*flagTimeout)
	for {
		list := &fleetv1.CelldFleetList{}
		if err := b.k8s.List(ctx, list); err != nil {
			return err
		}
		pending := 0
		for i := range list.Items {
			f := &list.Items[i]
			if want[client.ObjectKeyFromObject(f)] && !readyOn(f, version) {
				pending++
			}
		}
		seen := 0
		for i := range list.Items {
			if want[client.ObjectKeyFromObject(&list.Items[i])] {
				seen++
			}
		}
		pending += len(want) - seen
		if pending == 0 {
			return nil
		}
		if err := b.bed.Healthy(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d fleets not Ready on %s after %s", pending, len(want), version, *flagTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

var floorKinds = []schema.GroupVersionResource{
	{Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "services"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
}

// floor copies every converged fleet's objects (stripped of status and
// server-set metadata) into fresh namespaces, applies them server-side with
// one client, and waits until every Pod is Ready with a healthy /state.
func (b *bench) floor(ctx context.Context, fleets []*fleetv1.CelldFleet) error {
	var objs []*unstructured.Unstructured
	var gvrs []schema.GroupVersionResource
	for i := 0; i < b.res.Namespaces; i++ {
		src, dst := fmt.Sprintf("bench-%d", i), fmt.Sprintf("floor-%d", i)
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
	if want := b.n * 5; len(objs) != want {
		b.anom = append(b.anom, fmt.Sprintf("N=%d: floor copied %d objects, expected %d (SA, 2 Services, NetworkPolicy, StatefulSet per fleet)", b.n, len(objs), want))
	}
	start := time.Now()
	for i, u := range objs {
		if _, err := b.dyn.Resource(gvrs[i]).Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), u,
			metav1.ApplyOptions{FieldManager: "bench-floor", Force: true}); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", gvrs[i].Resource, u.GetNamespace(), u.GetName(), err)
		}
	}
	var namespaces []string
	for i := 0; i < b.res.Namespaces; i++ {
		namespaces = append(namespaces, fmt.Sprintf("floor-%d", i))
	}
	// Any version: the fleet rolled earlier was copied on its new image.
	if err := b.waitPodsServing(ctx, namespaces, b.n*membersPerFleet, ""); err != nil {
		return err
	}
	b.res.FloorSeconds = round(time.Since(start).Seconds(), 2)
	return nil
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
func (b *bench) waitPodsServing(ctx context.Context, namespaces []string, want int, version string) error {
	deadline := time.Now().Add(*flagTimeout)
	served := map[types.UID]bool{}
	for {
		var pods []corev1.Pod
		for _, ns := range namespaces {
			list := &corev1.PodList{}
			if err := b.k8s.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/name": "celld"}); err != nil {
				return err
			}
			pods = append(pods, list.Items...)
		}
		ok := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := range pods {
			p := &pods[i]
			mu.Lock()
			done := served[p.UID]
			if done {
				ok++
			}
			mu.Unlock()
			if done {
				continue
			}
			if !podReady(p) {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if b.serving(p.Status.PodIP, version) {
					mu.Lock()
					served[p.UID] = true
					ok++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if ok >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Pods serving after %s", ok, want, *flagTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
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
	type member struct {
		created time.Time
		ready   time.Time
	}
	members := map[types.UID]*member{}
	names := map[types.UID]string{}
	deleted := map[string]time.Time{} // old Pod name → first seen terminating or gone
	start := time.Now()
	if err := b.patchImage(ctx, f, imageV2); err != nil {
		return err
	}
	deadline := start.Add(*flagTimeout)
	for {
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
				m = &member{created: created}
				members[p.UID], names[p.UID] = m, p.Name
			}
			if m.ready.IsZero() && podReady(p) && b.serving(p.Status.PodIP, "1.1.0") {
				m.ready = now
			}
		}
		for uid, name := range old {
			if _, seen := deleted[name]; !seen && !present[uid] {
				deleted[name] = now
			}
		}
		got := &fleetv1.CelldFleet{}
		if err := b.k8s.Get(ctx, client.ObjectKeyFromObject(f), got); err != nil {
			return err
		}
		if readyOn(got, "1.1.0") {
			break
		}
		if now.After(deadline) {
			return fmt.Errorf("roll not done after %s", *flagTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	end := time.Now()
	r := Roll{Members: rollMembers, RollSeconds: round(end.Sub(start).Seconds(), 2), MemberSeconds: map[string]float64{}}
	since := func(t time.Time) float64 { return round(t.Sub(start).Seconds(), 2) }
	for uid, m := range members {
		if m.ready.IsZero() {
			return fmt.Errorf("member %s never seen serving", names[uid])
		}
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
