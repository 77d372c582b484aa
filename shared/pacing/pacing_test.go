package pacing

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time       { return c.t }
func (c *fakeClock) step(d time.Duration) { c.t = c.t.Add(d) }
func cm(name, rv string) *corev1.ConfigMap { // an owner or a child, as a cache holds it
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

// cacheAt is a reader that shows the given objects with their
// resourceVersions, as an informer that is behind would.
type cacheAt map[string]client.Object

func (c cacheAt) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	o, ok := c[key.Name]
	if !ok {
		return fake.NewClientBuilder().Build().Get(context.Background(), key, obj) // NotFound
	}
	obj.SetName(o.GetName())
	obj.SetNamespace(o.GetNamespace())
	obj.SetResourceVersion(o.GetResourceVersion())
	return nil
}

func (c cacheAt) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

func TestGateDefersUntilTheCacheShowsOwnWrites(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	g := &Gate{Controller: "test-gate", Now: clock.now}
	owner := types.NamespacedName{Namespace: "ns", Name: "owner"}
	deferred := func() float64 { return testutil.ToFloat64(deferredMetric.WithLabelValues("test-gate")) }

	_, wait := g.Defer(ctx, cacheAt{}, owner, cm("owner", "5"))
	assert.False(t, wait, "nothing written: nothing to wait for")

	// The pass wrote the owner's status (rv 7) and created a child (rv 8).
	g.Wrote(owner, cm("owner", "7"))
	g.Wrote(owner, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child", ResourceVersion: "8"}})

	g.Wrote(owner, cm("owner", "6")) // a copy from before the status write: ignored
	res, wait := g.Defer(ctx, cacheAt{}, owner, cm("owner", "6"))
	assert.True(t, wait, "the cache shows the owner from before its status write")
	assert.Equal(t, DefaultRetry, res.RequeueAfter)
	assert.Equal(t, 1.0, deferred())

	_, wait = g.Defer(ctx, cacheAt{}, owner, cm("owner", "7"))
	assert.True(t, wait, "the owner is caught up, the child is missing from the cache")
	_, wait = g.Defer(ctx, cacheAt{"child": &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child", ResourceVersion: "8"}}}, owner, cm("owner", "6"))
	assert.False(t, wait, "both met: the owner's expectation was dropped when the cache showed it, the child is there now")
	assert.Equal(t, 2.0, deferred())
	assert.Empty(t, g.pending, "nothing left to wait for")

	// Someone else's later write counts as caught up too.
	g.Wrote(owner, cm("owner", "9"))
	_, wait = g.Defer(ctx, cacheAt{}, owner, cm("owner", "12"))
	assert.False(t, wait)

	// A cache that never shows the write holds the owner at most MaxWait.
	g.Wrote(owner, cm("owner", "20"))
	_, wait = g.Defer(ctx, cacheAt{}, owner, cm("owner", "12"))
	assert.True(t, wait)
	clock.step(DefaultMaxWait)
	_, wait = g.Defer(ctx, cacheAt{}, owner, cm("owner", "12"))
	assert.False(t, wait, "past MaxWait the reconcile runs on what the cache shows")

	g.Wrote(owner, cm("owner", "30"))
	g.Forget(owner)
	_, wait = g.Defer(ctx, cacheAt{}, owner, cm("owner", "12"))
	assert.False(t, wait, "a forgotten owner has nothing to wait for")
}

// TestGateWaitsBrieflyForAMissingChild: a child the cache does not hold
// at all is waited for at most MissingWait (an informer delivers a create
// within milliseconds); one still missing was deleted since, and the
// owner's reconcile must run to see that and repair it, not wait MaxWait.
func TestGateWaitsBrieflyForAMissingChild(t *testing.T) {
	ctx := context.Background()
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	g := &Gate{Controller: "test-gate-missing", Now: clock.now}
	owner := types.NamespacedName{Namespace: "ns", Name: "owner"}
	g.Wrote(owner, cm("child", "8"))
	_, wait := g.Defer(ctx, cacheAt{}, owner, cm("owner", "5"))
	assert.True(t, wait, "just created: the cache has yet to show it")
	clock.step(DefaultMissingWait)
	_, wait = g.Defer(ctx, cacheAt{}, owner, cm("owner", "5"))
	assert.False(t, wait, "still missing after MissingWait: deleted since, the reconcile runs")

	g.Wrote(owner, cm("owner", "9"))
	clock.step(DefaultMissingWait)
	_, wait = g.Defer(ctx, cacheAt{"owner": cm("owner", "7")}, owner)
	assert.True(t, wait, "an object the cache shows older than written is waited for up to MaxWait")
}

func TestOlder(t *testing.T) {
	assert.True(t, Older("9", "10"), "numerically, not as strings")
	assert.False(t, Older("10", "10"))
	assert.False(t, Older("11", "10"))
	assert.True(t, Older("", "10"), "not in the cache")
	assert.False(t, Older("abc", "10"), "what cannot be compared never holds a reconcile")
}

type st struct {
	Phase   string
	Members map[string]string
}

func TestStatusVerdict(t *testing.T) {
	w := Status[st]{Controller: "test-status"}
	phase := func(s st) any { return s.Phase }
	a := st{Phase: "Provisioning", Members: map[string]string{"m-0": "Starting"}}
	b := st{Phase: "Provisioning", Members: map[string]string{"m-0": "Healthy"}}
	c := st{Phase: "Ready", Members: map[string]string{"m-0": "Healthy"}}
	assert.Equal(t, Unchanged, w.Verdict(a, a, phase, Details))
	assert.Equal(t, Unchanged, w.Verdict(a, a, phase, Everything), "nothing changed: nothing to hold either")
	assert.Equal(t, Write, w.Verdict(a, b, phase, Settled), "nothing settling: any change is written")
	assert.Equal(t, Write, w.Verdict(a, c, phase, Settled))
	assert.Equal(t, Hold, w.Verdict(a, b, phase, Details), "only insignificant fields, while details settle: held")
	assert.Equal(t, Write, w.Verdict(a, c, phase, Details), "a significant change never waits for details")
	assert.Equal(t, Hold, w.Verdict(a, c, phase, Everything), "the whole status is about to be replaced: held")
	assert.Equal(t, 2.0, testutil.ToFloat64(coalescedMetric.WithLabelValues("test-status")))
}

func TestTable(t *testing.T) {
	type in struct{ starting, idle, blocked, routePending bool }
	table := Table[in]{
		Rows: []Row[in]{
			{Fact: "blocked", Holds: func(i in) bool { return i.blocked }, Final: true},
			{Fact: "starting", Holds: func(i in) bool { return i.starting }, After: 250 * time.Millisecond, Urgent: true},
			{Fact: "idle", Holds: func(i in) bool { return i.idle }, Times: 6},
		},
		Caps: []Cap[in]{{Fact: "route pending", Holds: func(i in) bool { return i.routePending }, At: 10 * time.Second}},
	}
	base := 30 * time.Second
	low, urgent := ptr.To(handler.LowPriority), ptr.To(0)
	for _, tc := range []struct {
		in   in
		want Look
	}{
		{in{}, Look{After: base, Priority: low, Fact: "default"}},
		{in{starting: true, idle: true}, Look{After: 250 * time.Millisecond, Priority: urgent, Fact: "starting"}},
		{in{idle: true}, Look{After: 6 * base, Priority: low, Fact: "idle"}},
		{in{idle: true, routePending: true}, Look{After: 10 * time.Second, Priority: low, Fact: "idle, capped: route pending"}},
		{in{starting: true, routePending: true}, Look{After: 250 * time.Millisecond, Priority: urgent, Fact: "starting"}},
		{in{blocked: true, routePending: true}, Look{After: base, Priority: low, Fact: "blocked"}},
	} {
		assert.Equal(t, tc.want, table.Next(tc.in, base), "%+v", tc.in)
	}
}

func TestFilters(t *testing.T) {
	f := UpdateFilter("test-filter", "phase", func(p *corev1.Pod) any { return p.Status.Phase })
	pod := func(phase corev1.PodPhase, node string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	assert.False(t, f.Update(event.UpdateEvent{ObjectOld: pod("Pending", ""), ObjectNew: pod("Pending", "n1")}), "nothing read changed")
	assert.True(t, f.Update(event.UpdateEvent{ObjectOld: pod("Pending", ""), ObjectNew: pod("Running", "")}))
	assert.True(t, f.Update(event.UpdateEvent{ObjectOld: cm("a", "1"), ObjectNew: cm("a", "2")}), "another type passes")
	assert.True(t, f.Create(event.CreateEvent{Object: pod("Pending", "")}), "creates pass")
	assert.Equal(t, 1.0, testutil.ToFloat64(droppedMetric.WithLabelValues("test-filter", "phase")))

	c := CreateFilter("test-filter", "creates", func(o client.Object) bool { return o.GetName() == "keep" })
	assert.False(t, c.Create(event.CreateEvent{Object: cm("drop", "1")}))
	assert.True(t, c.Create(event.CreateEvent{Object: cm("keep", "1")}))
	assert.True(t, c.Update(event.UpdateEvent{ObjectOld: cm("drop", "1"), ObjectNew: cm("drop", "2")}))
	assert.Equal(t, 1.0, testutil.ToFloat64(droppedMetric.WithLabelValues("test-filter", "creates")))
}
