//go:build integration

package controller

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/pacing"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestNewFleetsAreCreatedWithoutReads: the operator creates a new fleet's
// objects without first asking the API server whether they exist (its cache
// says they do not, and the create-only apply is refused if anything holds
// the name), and its own creates do not wake a pass that finds the newest
// of them missing from the cache and reads it. Before, every create was
// preceded by a GET, and the pass the first creates woke read the
// StatefulSet again (bench/results/history.md, twelfth round). And every write to
// a fleet changes it: a pass woken right after the previous one (by the
// finalizer it added) no longer sends the status it has just written again
// because the cache has yet to show it. Nor is the fleet read to add its
// finalizer (bench/results/history.md, fourteenth round).
func TestNewFleetsAreCreatedWithoutReads(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "fresh")
	var n requestCounter
	startOperator(t, env, n.wrap(env.Config), newHarness(t, env, true).r.Config)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &v1alpha1.CelldFleetList{}, client.InNamespace("fresh"))
	require.NoError(t, err)
	defer w.Stop()

	const fleets = 4
	for i := 0; i < fleets; i++ {
		f := fleet("fresh", "f"+strconv.Itoa(i))
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, env.Client.Create(ctx, f))
	}
	for i := 0; i < fleets; i++ {
		key := types.NamespacedName{Namespace: "fresh", Name: "f" + strconv.Itoa(i)}
		require.Eventually(t, func() bool { return env.Client.Get(ctx, key, &appsv1.StatefulSet{}) == nil }, 30*time.Second, 50*time.Millisecond)
	}
	time.Sleep(3 * time.Second) // the passes after the first: the look that writes the status (membersAppearWait), events
	seen := n.reset()
	changed := 0
	for drained := false; !drained; {
		select {
		case e := <-w.ResultChan():
			if e.Type == watch.Modified {
				changed++
			}
		case <-time.After(time.Second):
			drained = true
		}
	}
	assert.Equal(t, changed, seen["PATCH celldfleets"], "every write to a fleet (its finalizer, its status) changed it; all requests: %v", seen)
	assert.Zero(t, seen["GET celldfleets"], "the finalizer goes on with the cached resourceVersion as its lock, without a read; all requests: %v", seen)
	for _, kind := range []string{"statefulsets", "services", "serviceaccounts", "networkpolicies"} {
		assert.Zero(t, seen["GET "+kind], "reads of %s; all requests: %v", kind, seen)
		assert.Equal(t, map[string]int{"statefulsets": fleets, "services": 2 * fleets, "serviceaccounts": fleets, "networkpolicies": fleets}[kind], seen["PATCH "+kind],
			"one create-only apply per object, none refused; all requests: %v", seen)
	}
}

// TestFinalizerAddedToAFleetTheCacheLagsBehind: the finalizer's patch
// carries the cached resourceVersion as its lock. When someone wrote the
// fleet since (here another finalizer), the lock fails, the fleet is read
// and the finalizer is added to what it holds now: the other writer's
// finalizer stays, and the reconcile's own copy is left as it was.
func TestFinalizerAddedToAFleetTheCacheLagsBehind(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "behind")
	h := newHarness(t, env, true)
	f := fleet("behind", "f")
	require.NoError(t, env.Client.Create(ctx, f))
	cached := f.DeepCopy()
	const other = "example.com/someone-else"
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+other+`"]}}`))))

	added, err := h.r.addDeclarationsFinalizer(ctx, cached)
	require.NoError(t, err)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f), f))
	assert.ElementsMatch(t, []string{other, DeclarationsFinalizer}, f.Finalizers)
	assert.Equal(t, f.ResourceVersion, added.ResourceVersion, "the fleet as written")
	assert.Empty(t, cached.Finalizers, "the reconcile's copy is not switched to the newer fleet")

	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
}

// TestNewFleetsStatusWaitsForItsMembers: the pass that creates a fleet's
// StatefulSet writes no status; the StatefulSet controller creates the
// members moments later, and the pass their creation wakes writes the
// first status, listing them. At 1,000 new fleets the status without
// members was a thousand writes that lived about a second
// (bench/results/history.md, sixteenth round). A pass that finds no member (here
// nothing creates them) writes the status anyway.
func TestNewFleetsStatusWaitsForItsMembers(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "fresh")
	h := newHarness(t, env, true)

	f := fleet("fresh", "members")
	require.NoError(t, env.Client.Create(ctx, f))
	assert.Equal(t, membersAppearWait, h.reconcileOnce(f).RequeueAfter, "the next look at the latest writes the status")
	require.NoError(t, h.get(&appsv1.StatefulSet{}, "fresh", "members"), "the pass created the StatefulSet")
	require.NoError(t, h.get(f, "fresh", "members"))
	assert.Zero(t, f.Status.ObservedGeneration, "no status before the members exist: %+v", f.Status)

	for i := 0; i < 3; i++ {
		require.NoError(t, env.Client.Create(ctx, memberPod("fresh", "members", i, false)))
	}
	h.reconcileOnce(f)
	require.NoError(t, h.get(f, "fresh", "members"))
	assert.Equal(t, f.Generation, f.Status.ObservedGeneration)
	require.Len(t, f.Status.Members, 3, "the first status lists the members")
	assert.Equal(t, "Provisioning", f.Status.Phase)

	// No member appears: the next pass reports the fleet all the same.
	lonely := fleet("fresh", "lonely")
	require.NoError(t, env.Client.Create(ctx, lonely))
	h.reconcileOnce(lonely)
	h.reconcileOnce(lonely)
	require.NoError(t, h.get(lonely, "fresh", "lonely"))
	assert.Equal(t, lonely.Generation, lonely.Status.ObservedGeneration)
	assert.Empty(t, lonely.Status.Members)
}

// TestPassWaitsForTheCacheToShowItsOwnWrites: a pass whose cache has yet
// to show what the previous pass wrote (the fleet's finalizer, the
// StatefulSet it created) is put off for pacing.DefaultRetry and writes
// nothing, instead of deciding from the world before those writes (the
// refused create-only apply of a StatefulSet it cannot see and a read of
// it). Once the cache shows them the pass runs: it writes the fleet's
// first status (the creating pass held it: membersAboutToAppear), once;
// the pass after it finds nothing to write.
func TestPassWaitsForTheCacheToShowItsOwnWrites(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "fresh")
	h := newHarness(t, env, true)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	// A cache that is behind: it shows the fleet as created and no
	// StatefulSet, while frozen.
	var frozen atomic.Pointer[v1alpha1.CelldFleet]
	behind := interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			stale := frozen.Load()
			switch o := obj.(type) {
			case *v1alpha1.CelldFleet:
				if stale != nil && key == client.ObjectKeyFromObject(stale) {
					stale.DeepCopyInto(o)
					return nil
				}
			case *appsv1.StatefulSet:
				if stale != nil && key.Name == stale.Name {
					return apierrors.NewNotFound(appsv1.Resource("statefulsets"), key.Name)
				}
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	c := h.writes.client(behind)
	h.r.Client, h.r.Applier.Client = c, c

	f := fleet("fresh", "members")
	require.NoError(t, env.Client.Create(ctx, f))
	created := f.DeepCopy()
	assert.Equal(t, membersAppearWait, h.reconcileOnce(f).RequeueAfter)
	require.NoError(t, h.get(&appsv1.StatefulSet{}, "fresh", "members"), "the pass created the StatefulSet")
	require.NoError(t, h.get(f, "fresh", "members"))
	assert.Zero(t, f.Status.ObservedGeneration, "the creating pass holds the status: %+v", f.Status)
	assert.Contains(t, f.Finalizers, DeclarationsFinalizer)

	frozen.Store(created)
	before := h.writes.n.Load()
	res := h.reconcileOnce(f)
	assert.Equal(t, pacing.DefaultRetry, res.RequeueAfter, "put off: the cache has yet to show the pass's own writes")
	assert.Equal(t, before, h.writes.n.Load(), "a deferred pass writes nothing")

	frozen.Store(nil)
	res = h.reconcileOnce(f)
	assert.NotEqual(t, pacing.DefaultRetry, res.RequeueAfter, "the cache shows them: the pass runs")
	assert.Equal(t, before+1, h.writes.n.Load(), "and writes the first status, nothing else")
	require.NoError(t, h.get(f, "fresh", "members"))
	assert.Equal(t, f.Generation, f.Status.ObservedGeneration)
	assert.Empty(t, f.Status.Members, "no member yet (nothing creates them here)")
	assert.Equal(t, PhaseProvisioning, f.Status.Phase)

	before = h.writes.n.Load()
	h.reconcileOnce(f)
	assert.Equal(t, before, h.writes.n.Load(), "the pass after it finds nothing to write")
}
