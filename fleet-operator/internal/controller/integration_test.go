//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	return s
}

// writeCounter counts every request that could change the cluster.
type writeCounter struct{ n atomic.Int64 }

func (w *writeCounter) client(c client.WithWatch) client.Client {
	count := func() { w.n.Add(1) }
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, o, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			count()
			return c.Apply(ctx, o, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, o, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			count()
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	})
}

type harness struct {
	t      *testing.T
	env    *testenv.Env
	writes *writeCounter
	r      *FleetReconciler
}

func newHarness(t *testing.T, env *testenv.Env, enforced bool) *harness {
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	writes := &writeCounter{}
	c := writes.client(wc)
	return &harness{t: t, env: env, writes: writes, r: &FleetReconciler{
		Client: c,
		Served: &served.Catalog{Discovery: discovery.NewDiscoveryClientForConfigOrDie(env.Config), MaxAge: servedMaxAge},
		Config: Config{
			OperatorNamespace: "fleet-system", OperatorServiceAccount: "fleet-operator",
			OperatorPodSelector: "app.kubernetes.io/name=fleet-operator", NetworkPolicyEnforced: enforced,
			StateTimeout: 200 * time.Millisecond, StateInterval: time.Minute,
			AllowedIngressAnnotations: []string{"*"},
		},
		Applier:  &apply.Applier{Client: c, FieldManager: names.Operator, HashAnnotation: HashAnnotation},
		State:    state.NewReader(200 * time.Millisecond),
		Recorder: &events.FakeRecorder{},
		Now:      time.Now,
	}}
}

// reconcile runs the pass an event would, and the pass after it when the
// first created the members' StatefulSet: that pass leaves the status to
// the one the members' creation wakes (membersAboutToAppear), and no
// StatefulSet controller runs here to create them.
func (h *harness) reconcile(f *v1alpha1.CelldFleet) {
	h.t.Helper()
	if h.reconcileOnce(f).RequeueAfter == membersAppearWait {
		h.reconcileOnce(f)
	}
}

func (h *harness) reconcileOnce(f *v1alpha1.CelldFleet) ctrl.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f)})
	require.NoError(h.t, err)
	return res
}

func (h *harness) get(obj client.Object, ns, name string) error {
	return h.env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj)
}

// istioCRDFile is Istio's own CRDs, as the tests install them.
func istioCRDFile(t *testing.T) string {
	return testenv.ModuleFile(t, "istio.io/api", "v1.32.0", "kubernetes/customresourcedefinitions.gen.yaml")
}

// startEnvWithCRDClient starts an API server of the test's own whose client
// can also read and delete CRDs (tests that remove Istio's API).
func startEnvWithCRDClient(t *testing.T) *testenv.Env {
	scheme := newScheme(t)
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	return testenv.Start(t, scheme, "fleet-operator/config/crd/bases")
}

func createNamespace(t *testing.T, c client.Client, name string) {
	require.NoError(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

func fleet(ns, name string) *v1alpha1.CelldFleet {
	return &v1alpha1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.CelldFleetSpec{
			Image:   "registry.example/celld:1.0.0",
			Storage: &v1alpha1.Storage{Size: resource.MustParse("1Gi")},
		},
	}
}

func TestIntegration(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	t.Run("CEL rejects what a user can get wrong", func(t *testing.T) { testCEL(t, env) })
	t.Run("defaults come from the schema", func(t *testing.T) { testDefaults(t, env) })
	t.Run("enforcement gate, ownership and zero-write steady state", func(t *testing.T) { testReconcile(t, env) })
	t.Run("a foreign object with our name is reported, never adopted", func(t *testing.T) { testConflict(t, env) })
	t.Run("reads through the restricted cache: no request in steady state, conflicts and drift still seen", func(t *testing.T) { testCachedReads(t, env) })
	t.Run("paused maintenance keeps the member template", func(t *testing.T) { testPaused(t, env) })
	t.Run("a larger disk leaves the immutable claim template alone", func(t *testing.T) { testGrowDisk(t, env) })
	t.Run("a new fleet's StatefulSet is written once, not again by the next pass", func(t *testing.T) { testStatefulSetWrittenOnce(t, env) })
	// These install Gateway API and Istio CRDs into the shared API server.
	t.Run("routing: CEL, Gateway API missing then present, Ingress, collisions, mode switch, removal", func(t *testing.T) { testRouting(t, env) })
	t.Run("mesh: blocked without Istio's API, then join and leave with Istio's own schemas", func(t *testing.T) { testMesh(t, env) })
	t.Run("mesh contract: ambient adaptation, shared edges, enrollment request, opt-out, teardown", func(t *testing.T) { testContract(t, env) })
	t.Run("a rejected route is reported in RoutingReady and the fleet carries on", func(t *testing.T) { testRejectedRoute(t, env) })
	t.Run("cleanup is decided from owned objects, never from status", func(t *testing.T) { testCleanupFromObjects(t, env) })
	t.Run("Ready is never True while a member lacks its proxy", func(t *testing.T) { testReadyNeedsProxy(t, env) })
	t.Run("a failed step keeps what is still true", func(t *testing.T) { testFailedStep(t, env) })
	t.Run("Degraded is read from the members, not from status", func(t *testing.T) { testDegradedFromMembers(t, env) })
	t.Run("a name another fleet holds is reported naming both fleets", func(t *testing.T) { testCollisionNamesBothFleets(t, env) })
	t.Run("proxies the fleet did not ask for are explained", func(t *testing.T) { testUnexplainedProxies(t, env) })
	t.Run("ambient: a ServiceAccount shared with non-members is reported", func(t *testing.T) { testAmbientSharedServiceAccount(t, env) })
	t.Run("ambient: a member missing keeps 8081 relaxed until its replacement is captured", func(t *testing.T) { testAmbientMemberMissing(t, env) })
}

func testCEL(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "cel")
	create := []struct {
		name    string
		mutate  func(f *v1alpha1.CelldFleet)
		message string
	}{
		{"negative replicas", func(f *v1alpha1.CelldFleet) { f.Spec.Replicas = ptr.To[int32](-1) }, "spec.replicas"},
		{"too many replicas", func(f *v1alpha1.CelldFleet) { f.Spec.Replicas = ptr.To[int32](101) }, "spec.replicas"},
		{"empty image", func(f *v1alpha1.CelldFleet) { f.Spec.Image = "" }, "spec.image"},
		{"image with a space", func(f *v1alpha1.CelldFleet) { f.Spec.Image = "celld 1.0" }, "spec.image must not contain spaces"},
		{"bad pull policy", func(f *v1alpha1.CelldFleet) { f.Spec.ImagePullPolicy = "Sometimes" }, "spec.imagePullPolicy"},
		{"reserved env name", func(f *v1alpha1.CelldFleet) { f.Spec.Env = []corev1.EnvVar{{Name: "CELLD_PEERS", Value: "x"}} }, "reserved for the operator"},
		{"bad service account", func(f *v1alpha1.CelldFleet) { f.Spec.ServiceAccountName = "Not_Valid" }, "spec.serviceAccountName must be a DNS subdomain"},
		{"reserved pod label", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"celld.eric.dev/fleet": "x"}
		}, "spec.podTemplate.labels may not use"},
		{"reserved selector label", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"app.kubernetes.io/instance": "x"}
		}, "spec.podTemplate.labels may not use"},
		{"reserved pod annotation", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Annotations = map[string]string{"celld.eric.dev/istio-control-plane": "x"}
		}, "spec.podTemplate.annotations may not use"},
		{"tiny disk", func(f *v1alpha1.CelldFleet) { f.Spec.Storage.Size = resource.MustParse("1Ki") }, "spec.storage.size must be at least 1Mi"},
		{"bad retention", func(f *v1alpha1.CelldFleet) { f.Spec.Storage.WhenDeleted = "Archive" }, "spec.storage.whenDeleted"},
		{"bad bucket", func(f *v1alpha1.CelldFleet) {
			f.Spec.ObjectStorage = &v1alpha1.ObjectStorage{Bucket: "Bad_Bucket", Region: "eu-west-1"}
		}, "spec.objectStorage.bucket must be a valid S3 bucket name"},
		{"bad region", func(f *v1alpha1.CelldFleet) {
			f.Spec.ObjectStorage = &v1alpha1.ObjectStorage{Bucket: "snapshots", Region: "mars"}
		}, "spec.objectStorage.region must look like an AWS region"},
		{"absolute prefix", func(f *v1alpha1.CelldFleet) {
			f.Spec.ObjectStorage = &v1alpha1.ObjectStorage{Bucket: "snapshots", Region: "eu-west-1", Prefix: "/abs"}
		}, "spec.objectStorage.prefix must not start with '/'"},
		{"grace period too long", func(f *v1alpha1.CelldFleet) {
			f.Spec.Scheduling.TerminationGracePeriodSeconds = ptr.To[int64](7200)
		}, "terminationGracePeriodSeconds"},
		{"name starting with a digit", func(f *v1alpha1.CelldFleet) { f.Name = "1fleet" }, "metadata.name must be a DNS label starting with a letter"},
		{"name too long", func(f *v1alpha1.CelldFleet) { f.Name = strings.Repeat("a", 48) }, "metadata.name must be at most 47 characters"},
		// Fleet a owns a-peers (Service) and a-routing (Ingress or HTTPRoute,
		// NetworkPolicy): a fleet with such a name would collide with it.
		{"name ending in -peers", func(f *v1alpha1.CelldFleet) { f.Name = "orders-peers" }, "metadata.name must not end in -peers or -routing"},
		{"name ending in -routing", func(f *v1alpha1.CelldFleet) { f.Name = "orders-routing" }, "metadata.name must not end in -peers or -routing"},
	}
	for _, tc := range create {
		t.Run("create: "+tc.name, func(t *testing.T) {
			f := fleet("cel", "f")
			tc.mutate(f)
			err := env.Client.Create(ctx, f)
			require.Error(t, err, "the API server must reject it")
			assert.Contains(t, err.Error(), tc.message)
		})
	}

	update := []struct {
		name    string
		mutate  func(f *v1alpha1.CelldFleet)
		message string
	}{
		{"shrink disk", func(f *v1alpha1.CelldFleet) { f.Spec.Storage.Size = resource.MustParse("512Mi") }, "spec.storage.size can only grow"},
		{"drop storage", func(f *v1alpha1.CelldFleet) { f.Spec.Storage = nil }, "spec.storage cannot be added to or removed from"},
		{"change storage class", func(f *v1alpha1.CelldFleet) { f.Spec.Storage.StorageClassName = ptr.To("fast") }, "spec.storage.storageClassName is immutable"},
	}
	base := fleet("cel", "updates")
	require.NoError(t, env.Client.Create(ctx, base))
	for _, tc := range update {
		t.Run("update: "+tc.name, func(t *testing.T) {
			f := &v1alpha1.CelldFleet{}
			require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(base), f))
			tc.mutate(f)
			err := env.Client.Update(ctx, f)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.message)
		})
	}
	t.Run("update: growing the disk is allowed", func(t *testing.T) {
		f := &v1alpha1.CelldFleet{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(base), f))
		f.Spec.Storage.Size = resource.MustParse("2Gi")
		require.NoError(t, env.Client.Update(ctx, f))
	})
}

func testDefaults(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "defaults")
	f := fleet("defaults", "d")
	require.NoError(t, env.Client.Create(ctx, f))
	got := &v1alpha1.CelldFleet{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f), got))
	assert.Equal(t, int32(3), *got.Spec.Replicas)
	assert.Equal(t, corev1.PullIfNotPresent, got.Spec.ImagePullPolicy)
	assert.Equal(t, v1alpha1.Retain, got.Spec.Storage.WhenDeleted)
	assert.Equal(t, v1alpha1.Retain, got.Spec.Storage.WhenScaledDown)
	assert.Equal(t, int64(60), *got.Spec.Scheduling.TerminationGracePeriodSeconds)
}

func testReconcile(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "gate")
	f := fleet("gate", "orders")
	require.NoError(t, env.Client.Create(ctx, f))

	// Not confirmed: networking exists, no workload, a condition tells the admin what to do.
	h := newHarness(t, env, false)
	h.reconcile(f)
	require.NoError(t, h.get(f, "gate", "orders"))
	blocked := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
	require.NotNil(t, blocked)
	assert.Equal(t, metav1.ConditionTrue, blocked.Status)
	assert.Equal(t, string(v1alpha1.ReasonNetworkPolicyNotConfirmed), blocked.Reason)
	assert.Contains(t, blocked.Message, "networkPolicyEnforced=true")
	assert.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionProvisioning)))
	assert.Equal(t, f.Generation, blocked.ObservedGeneration)
	for _, obj := range []struct {
		o    client.Object
		name string
	}{{&corev1.Service{}, "orders"}, {&corev1.Service{}, "orders-peers"}, {&networkingv1.NetworkPolicy{}, "orders"}} {
		require.NoError(t, h.get(obj.o, "gate", obj.name), obj.name)
		assertOwnedBy(t, obj.o, f)
	}
	assert.Error(t, h.get(&appsv1.StatefulSet{}, "gate", "orders"), "no member workload while the gate is closed")

	// Confirmed: the same fleet proceeds without being touched.
	h = newHarness(t, env, true)
	h.reconcile(f)
	require.NoError(t, h.get(f, "gate", "orders"))
	assert.False(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked)))
	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, "gate", "orders"))
	assertOwnedBy(t, sts, f)
	assert.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, sts.Spec.UpdateStrategy.Type)
	sa := &corev1.ServiceAccount{}
	require.NoError(t, h.get(sa, "gate", "orders"))
	assertOwnedBy(t, sa, f)

	// Steady state: nothing changed, so nothing is written, however often it runs.
	h.reconcile(f) // absorbs the status of the first confirmed pass
	h.writes.n.Store(0)
	for i := 0; i < 3; i++ {
		h.reconcile(f)
	}
	assert.Equal(t, int64(0), h.writes.n.Load(), "an unchanged fleet must reconcile with zero writes")

	// Drift by another writer is repaired with one write.
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, h.get(np, "gate", "orders"))
	np.Spec.Ingress = nil
	require.NoError(t, env.Client.Update(ctx, np))
	h.writes.n.Store(0)
	h.reconcile(f)
	assert.Equal(t, int64(1), h.writes.n.Load())
	require.NoError(t, h.get(np, "gate", "orders"))
	assert.Len(t, np.Spec.Ingress, 2, "the operator restores its ingress rules (no HBONE, no ambient probe source: no enrollment in effect)")
}

// testStatefulSetWrittenOnce: the pass after the one that created the
// members' StatefulSet finds it as it wants it. The API server fills in its
// claim template (volumeMode, status); the next pass takes
// the live template (claim templates are immutable), and when the first
// pass's template lacked those fields their hashes differed, so every new
// fleet's StatefulSet was written a second time, with nothing to change
// but the hash annotation (1,000 PATCHes at N=1,000, bench/results/history.md,
// eleventh round). This API server runs no StatefulSet controller, so only
// the operator changes the object.
func testStatefulSetWrittenOnce(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "once")
	for _, f := range []*v1alpha1.CelldFleet{fleet("once", "plain"), withStorageClass(fleet("once", "classed"), "gp3")} {
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.reconcile(f)
		created := &appsv1.StatefulSet{}
		require.NoError(t, h.get(created, "once", f.Name))
		for i := 0; i < 2; i++ {
			h.reconcile(f)
		}
		now := &appsv1.StatefulSet{}
		require.NoError(t, h.get(now, "once", f.Name))
		assert.Equal(t, created.ResourceVersion, now.ResourceVersion, "%s: the StatefulSet is not written again (hash annotation %s, then %s)",
			f.Name, created.Annotations[HashAnnotation], now.Annotations[HashAnnotation])
	}
}

func withStorageClass(f *v1alpha1.CelldFleet, class string) *v1alpha1.CelldFleet {
	f.Spec.Storage.StorageClassName = &class
	return f
}

func testConflict(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "conflict")
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "conflict", Name: "billing-peers", Labels: map[string]string{"team": "theirs"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9999}}},
	}
	require.NoError(t, env.Client.Create(ctx, foreign))
	f := fleet("conflict", "billing")
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	h.reconcile(f)

	require.NoError(t, h.get(f, "conflict", "billing"))
	c := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonOwnershipConflict), c.Reason)
	assert.Contains(t, c.Message, "Service conflict/billing-peers")
	got := &corev1.Service{}
	require.NoError(t, h.get(got, "conflict", "billing-peers"))
	assert.Empty(t, got.OwnerReferences, "a foreign object is never adopted")
	assert.Equal(t, int32(9999), got.Spec.Ports[0].Port)
	assert.Error(t, h.get(&appsv1.StatefulSet{}, "conflict", "billing"), "nothing proceeds past a conflict")
}

// testCachedReads runs the reconciler as the manager does: the Applier
// reads the watched kinds from a cache restricted by RestrictCache. An
// unchanged fleet then costs not a single request; a foreign object the
// restricted cache cannot hold is still found (by the uncached confirming
// read) and reported; drift by another writer is repaired once the cache
// shows it.
func testCachedReads(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "cached")
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cached", Name: "theirs-peers", Labels: map[string]string{"team": "theirs"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9999}}},
	}
	require.NoError(t, env.Client.Create(ctx, foreign))
	f, g := fleet("cached", "stock"), fleet("cached", "theirs")
	require.NoError(t, env.Client.Create(ctx, f))
	require.NoError(t, env.Client.Create(ctx, g))

	opts := cache.Options{Scheme: env.Client.Scheme()}
	RestrictCache(Config{}, &opts)
	informers, err := cache.New(env.Config, opts)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = informers.Start(cctx) }()
	owned := []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.ServiceAccount{}, &networkingv1.NetworkPolicy{}, &networkingv1.Ingress{}}
	for _, o := range owned {
		_, err := informers.GetInformer(ctx, o) // as the controller's Owns() watches do
		require.NoError(t, err)
	}
	require.True(t, informers.WaitForCacheSync(ctx))
	kinds, err := cachedKinds(env.Client.Scheme(), owned)
	require.NoError(t, err)

	// Every GET the Applier would send to the API server is unstructured.
	var uncached atomic.Int64
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	reads := interceptor.NewClient(wc, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*unstructured.Unstructured); ok {
				uncached.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	h := newHarness(t, env, true)
	c := h.writes.client(reads)
	h.r.Client = c
	h.r.Applier = &apply.Applier{Client: c, FieldManager: names.Operator, HashAnnotation: HashAnnotation, Cache: informers, CachedKinds: kinds}

	h.reconcile(f)
	cached := func(o client.Object, name string) func() bool {
		return func() bool {
			return informers.Get(ctx, types.NamespacedName{Namespace: "cached", Name: name}, o) == nil
		}
	}
	for _, o := range []struct {
		obj  client.Object
		name string
	}{{&appsv1.StatefulSet{}, "stock"}, {&corev1.Service{}, "stock"}, {&corev1.Service{}, "stock-peers"}, {&networkingv1.NetworkPolicy{}, "stock"}, {&corev1.ServiceAccount{}, "stock"}} {
		require.Eventually(t, cached(o.obj, o.name), 10*time.Second, 20*time.Millisecond, "the cache sees %s", o.name)
	}
	h.reconcile(f) // absorbs the status of the first pass
	// The Applier compares the cache's own objects, uncopied: as the
	// informers hold them now, they must still be after the passes.
	held := map[string]client.Object{}
	for _, o := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &networkingv1.NetworkPolicy{}, &corev1.ServiceAccount{}} {
		require.NoError(t, informers.Get(ctx, types.NamespacedName{Namespace: "cached", Name: "stock"}, o))
		held[fmt.Sprintf("%T", o)] = o
	}
	h.writes.n.Store(0)
	uncached.Store(0)
	for i := 0; i < 3; i++ {
		h.reconcile(f)
	}
	assert.Equal(t, int64(0), h.writes.n.Load(), "an unchanged fleet must reconcile with zero writes")
	assert.Equal(t, int64(0), uncached.Load(), "and without reading its objects from the API server")
	for kind, before := range held {
		now := before.DeepCopyObject().(client.Object)
		require.NoError(t, informers.Get(ctx, client.ObjectKeyFromObject(before), now))
		assert.Equal(t, before, now, "the cached %s is as it was before the passes", kind)
	}

	// The restricted cache never holds the foreign Service (no operator
	// label); the confirming read finds it and the fleet reports it.
	assert.Error(t, informers.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.Service{}))
	h.reconcile(g)
	assert.Positive(t, uncached.Load(), "cache misses are confirmed with the API server")
	require.NoError(t, h.get(g, "cached", "theirs"))
	blocked := meta.FindStatusCondition(g.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
	require.NotNil(t, blocked)
	assert.Equal(t, string(v1alpha1.ReasonOwnershipConflict), blocked.Reason)
	assert.Contains(t, blocked.Message, "Service cached/theirs-peers")
	got := &corev1.Service{}
	require.NoError(t, h.get(got, "cached", "theirs-peers"))
	assert.Empty(t, got.OwnerReferences, "a foreign object is never adopted")
	assert.Equal(t, int32(9999), got.Spec.Ports[0].Port)

	// Drift by another writer, once the cache shows it, is repaired with one write.
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, h.get(np, "cached", "stock"))
	np.Spec.Ingress = nil
	require.NoError(t, env.Client.Update(ctx, np))
	require.Eventually(t, func() bool {
		seen := &networkingv1.NetworkPolicy{}
		return informers.Get(ctx, client.ObjectKeyFromObject(np), seen) == nil && len(seen.Spec.Ingress) == 0
	}, 10*time.Second, 20*time.Millisecond)
	h.writes.n.Store(0)
	h.reconcile(f)
	assert.Equal(t, int64(1), h.writes.n.Load())
	require.NoError(t, h.get(np, "cached", "stock"))
	assert.Len(t, np.Spec.Ingress, 2, "the operator restores its ingress rules (no HBONE, no ambient probe source: no enrollment in effect)")
}

func testPaused(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "paused")
	f := fleet("paused", "p")
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	h.reconcile(f)

	require.NoError(t, h.get(f, "paused", "p"))
	f.Spec.Maintenance.Paused = true
	f.Spec.Image = "registry.example/celld:2.0.0"
	require.NoError(t, env.Client.Update(ctx, f))
	h.reconcile(f)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, "paused", "p"))
	assert.Equal(t, "registry.example/celld:1.0.0", sts.Spec.Template.Spec.Containers[0].Image, "paused: the template is not changed")
	require.NoError(t, h.get(f, "paused", "p"))
	prov := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionProvisioning))
	require.NotNil(t, prov)
	assert.Equal(t, string(v1alpha1.ReasonMaintenancePaused), prov.Reason, "the held change is visible in status")
	assert.Equal(t, PhasePaused, f.Status.Phase)

	require.NoError(t, h.get(f, "paused", "p"))
	f.Spec.Maintenance.Paused = false
	require.NoError(t, env.Client.Update(ctx, f))
	h.reconcile(f)
	require.NoError(t, h.get(sts, "paused", "p"))
	assert.Equal(t, "registry.example/celld:2.0.0", sts.Spec.Template.Spec.Containers[0].Image, "unpaused: the change goes through")
}

func assertOwnedBy(t *testing.T, obj client.Object, f *v1alpha1.CelldFleet) {
	t.Helper()
	ref := metav1.GetControllerOf(obj)
	require.NotNil(t, ref, "%T %s has no controller", obj, obj.GetName())
	assert.Equal(t, f.UID, ref.UID, fmt.Sprintf("%T %s", obj, obj.GetName()))
}

func testGrowDisk(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "grow")
	f := fleet("grow", "g")
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	h.reconcile(f)

	require.NoError(t, h.get(f, "grow", "g"))
	f.Spec.Storage.Size = resource.MustParse("5Gi")
	require.NoError(t, env.Client.Update(ctx, f))
	// The API server forbids changing volumeClaimTemplates; a reconcile that
	// tried would fail here.
	h.reconcile(f)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, "grow", "g"))
	got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	assert.Equal(t, "1Gi", got.String())
}

// memberPod is a member Pod as the StatefulSet controller and Istio's
// injector would create it; no kubelet runs it here.
func memberPod(ns, fleet string, ordinal int, proxy bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", fleet, ordinal), Labels: names.Selector(fleet)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "celld", Image: "celld"}}},
	}
	if proxy {
		p.Spec.InitContainers = []corev1.Container{{Name: mesh.ProxyContainer, Image: "proxyv2", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	}
	return p
}

func replacePods(t *testing.T, c client.Client, ns, fleet string, proxy bool) {
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		p := memberPod(ns, fleet, i, proxy)
		_ = c.Delete(ctx, p, client.GracePeriodSeconds(0))
		require.Eventually(t, func() bool { return c.Create(ctx, memberPod(ns, fleet, i, proxy)) == nil }, 10*time.Second, 100*time.Millisecond)
	}
}

func testMesh(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "mesh")
	f := fleet("mesh", "m")
	f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)

	// No Istio API: blocked with a reason, members untouched, no crash.
	h.reconcile(f)
	require.NoError(t, h.get(f, "mesh", "m"))
	c := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonIstioAPIUnavailable), c.Reason)
	assert.Error(t, h.get(&appsv1.StatefulSet{}, "mesh", "m"))

	// The API appears: the same fleet proceeds without being touched.
	env.InstallCRDs(t, istioCRDFile(t))
	require.Eventually(t, func() bool {
		h.reconcile(f)
		_ = h.get(f, "mesh", "m")
		return !meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
	}, 30*time.Second, time.Second, "the fleet recovers once security.istio.io/v1 is served")
	assert.Equal(t, "istio-system", f.Annotations[labels.IstioControlPlane], "the opt-in is recorded on the fleet")
	assert.Equal(t, "istio-system", f.Spec.Mesh.Istio.ControlPlaneNamespace, "schema default")
	assert.Equal(t, v1alpha1.AllowAll, f.Spec.Mesh.Istio.ApplicationAccess, "schema default")

	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, "mesh", "m"))
	assert.Equal(t, "true", sts.Spec.Template.Labels[labels.IstioInject])
	assert.Equal(t, "m", sts.Spec.Template.Labels[labels.Fleet])
	assert.Equal(t, "true", sts.Spec.Template.Annotations[labels.IstioNativeSidecar])

	ap := policy(mesh.AuthorizationPolicyKind)
	pa := policy(mesh.PeerAuthenticationKind)

	// Members without proxies (the join has begun): relaxed, PERMISSIVE.
	// No enrollment is in effect in the namespace (neither enrolled nor
	// labelled for ambient capture), so nothing can capture the members
	// still without their sidecar: the sidecar form, relaxed, and no HBONE
	// (mesh.Intent.MayBeCaptured).
	replacePods(t, env.Client, "mesh", "m", false)
	h.reconcile(f)
	require.NoError(t, h.get(ap, "mesh", "m-mesh"), "Istio's schema accepted the relaxed AuthorizationPolicy")
	assertPeerRuleRelaxed(t, ap, true)
	require.NoError(t, h.get(pa, "mesh", "m-mesh"), "Istio's schema accepted the PeerAuthentication")
	assertOwnedBy(t, pa, f)
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, h.get(np, "mesh", "m"))
	assert.True(t, hasEgressPort(np, 15012), "istiod egress while joining")
	assert.NotContains(t, ingressPorts(np), 15008, "no HBONE: no enrollment in effect, nothing captures a member")

	// Every member has a proxy: identity rule back, PeerAuthentication gone.
	replacePods(t, env.Client, "mesh", "m", true)
	h.reconcile(f)
	require.NoError(t, h.get(ap, "mesh", "m-mesh"))
	assertPeerRuleRelaxed(t, ap, false)
	assert.Error(t, h.get(policy(mesh.PeerAuthenticationKind), "mesh", "m-mesh"), "PeerAuthentication deleted once every proxy is seen")
	require.NoError(t, h.get(f, "mesh", "m"))
	assert.Equal(t, "Meshed", f.Status.Mesh)
	assert.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionMeshReady)))

	// applicationAccess is mutable and changes only the policy.
	before := sts.Spec.Template
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"istio":{"applicationAccess":"Policies"}}}}`))))
	h.reconcile(f)
	require.NoError(t, h.get(ap, "mesh", "m-mesh"))
	rules, _, _ := unstructured.NestedSlice(ap.Object, "spec", "rules")
	assert.Len(t, rules, 1, "with Policies nothing admits 8080")
	require.NoError(t, h.get(sts, "mesh", "m"))
	assert.Equal(t, before, sts.Spec.Template, "a policy-only change never touches the members")

	// Leave: relaxed again while proxies remain, injection explicitly off.
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":null}}`))))
	h.reconcile(f)
	require.NoError(t, h.get(sts, "mesh", "m"))
	assert.Equal(t, "false", sts.Spec.Template.Labels[labels.IstioInject], "replacements opt out of injection")
	require.NoError(t, h.get(ap, "mesh", "m-mesh"))
	assertPeerRuleRelaxed(t, ap, true)
	require.NoError(t, h.get(policy(mesh.PeerAuthenticationKind), "mesh", "m-mesh"))
	require.NoError(t, h.get(np, "mesh", "m"))
	assert.True(t, hasEgressPort(np, 15012), "old sidecars keep istiod while they run")

	// No proxy left: "mesh": null is mode auto, which still asks for the
	// mesh through the namespace, but no enrollment is in effect there:
	// both Istio objects are deleted, istiod egress closed, no HBONE, the
	// opt-out kept.
	replacePods(t, env.Client, "mesh", "m", false)
	h.reconcile(f)
	noMeshTrace(t, h, "mesh", "m", "left")
	require.NoError(t, h.get(f, "mesh", "m"))
	assert.Equal(t, "Left", f.Status.Mesh)
	assert.Contains(t, f.Annotations, labels.IstioControlPlane, "the opt-out survives")
	require.NoError(t, h.get(sts, "mesh", "m"))
	assert.Equal(t, "false", sts.Spec.Template.Labels[labels.IstioInject])
}

func policy(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

func assertPeerRuleRelaxed(t *testing.T, ap *unstructured.Unstructured, relaxed bool) {
	t.Helper()
	rules, _, _ := unstructured.NestedSlice(ap.Object, "spec", "rules")
	require.NotEmpty(t, rules)
	_, hasFrom := rules[0].(map[string]any)["from"]
	assert.Equal(t, !relaxed, hasFrom, "peer-port rule identity requirement")
}

// assertStandby checks that the fleet's Istio policy is the standby form of
// a fleet that asks for the mesh without being in it: the ambient policy,
// relaxed (8081 admits the peer identities and plaintext), so that a capture
// arriving before the fleet hears of an enrollment is covered.
func assertStandby(t *testing.T, h *harness, namespace, fleet string) {
	t.Helper()
	ap := policy(mesh.AuthorizationPolicyKind)
	require.NoError(t, h.get(ap, namespace, fleet+"-mesh"), "the standby policy exists")
	rules, _, _ := unstructured.NestedSlice(ap.Object, "spec", "rules")
	require.NotEmpty(t, rules)
	from, _, _ := unstructured.NestedSlice(rules[0].(map[string]any), "from")
	plaintext := false
	for _, src := range from {
		np, _, _ := unstructured.NestedStringSlice(src.(map[string]any), "source", "notPrincipals")
		plaintext = plaintext || (len(np) == 1 && np[0] == "*")
	}
	assert.True(t, plaintext, "standby: 8081 admits plaintext besides the peer identities")
	require.NoError(t, h.get(policy(mesh.PeerAuthenticationKind), namespace, fleet+"-mesh"), "standby: 8081 PERMISSIVE")
}

func hasEgressPort(np *networkingv1.NetworkPolicy, port int) bool {
	for _, e := range np.Spec.Egress {
		for _, p := range e.Ports {
			if p.Port != nil && p.Port.IntValue() == port {
				return true
			}
		}
	}
	return false
}

func routingFleet(ns, name string, r *v1alpha1.Routing) *v1alpha1.CelldFleet {
	f := fleet(ns, name)
	f.Spec.Routing = r
	return f
}

func gatewayRouting() *v1alpha1.Routing {
	return &v1alpha1.Routing{
		Hostnames: []string{"app.example.com"},
		Gateway:   &v1alpha1.GatewayRouting{Name: "public", Namespace: "edge", SectionName: "https"},
		Source:    v1alpha1.RoutingSource{Namespace: "edge", PodLabels: map[string]v1alpha1.LabelValue{"app": "public-gateway"}},
	}
}

func ingressRouting() *v1alpha1.Routing {
	return &v1alpha1.Routing{
		Hostnames: []string{"app.example.com", "*.app.example.com"},
		Ingress: &v1alpha1.IngressRouting{ClassName: "nginx", TLSSecretName: "app-tls",
			Annotations: map[string]string{"cert-manager.io/cluster-issuer": "letsencrypt", "nginx.ingress.kubernetes.io/proxy-body-size": "8m"}},
		Source: v1alpha1.RoutingSource{Namespace: "ingress-nginx", PodLabels: map[string]v1alpha1.LabelValue{"app.kubernetes.io/component": "controller"}},
	}
}

func routingCondition(t *testing.T, h *harness, f *v1alpha1.CelldFleet) *metav1.Condition {
	t.Helper()
	h.reconcile(f)
	require.NoError(t, h.get(f, f.Namespace, f.Name))
	return meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionRoutingReady))
}

func assertRouting(t *testing.T, c *metav1.Condition, status metav1.ConditionStatus, reason v1alpha1.ConditionReason) {
	t.Helper()
	require.NotNil(t, c, "RoutingReady missing")
	assert.Equal(t, status, c.Status, c.Message)
	assert.Equal(t, string(reason), c.Reason, c.Message)
}

func testRouting(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "routes")
	h := newHarness(t, env, true)

	t.Run("CEL", func(t *testing.T) {
		for name, tc := range map[string]struct {
			mutate func(r *v1alpha1.Routing)
			msg    string
		}{
			"both modes":       {func(r *v1alpha1.Routing) { r.Ingress = ingressRouting().Ingress }, "exactly one of gateway or ingress"},
			"no mode":          {func(r *v1alpha1.Routing) { r.Gateway = nil }, "exactly one of gateway or ingress"},
			"no hostnames":     {func(r *v1alpha1.Routing) { r.Hostnames = nil }, "spec.routing.hostnames"},
			"bad hostname":     {func(r *v1alpha1.Routing) { r.Hostnames = []string{"App.Example.com:443"} }, "must be DNS names"},
			"ip hostname":      {func(r *v1alpha1.Routing) { r.Hostnames = []string{"app.*.example.com"} }, "must be DNS names"},
			"no source labels": {func(r *v1alpha1.Routing) { r.Source.PodLabels = nil }, "spec.routing.source.podLabels"},
			"no source ns":     {func(r *v1alpha1.Routing) { r.Source.Namespace = "" }, "spec.routing.source.namespace"},
			"no gateway name":  {func(r *v1alpha1.Routing) { r.Gateway.Name = "" }, "spec.routing.gateway.name"},
			"legacy class": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "nginx", Annotations: map[string]string{"kubernetes.io/ingress.class": "nginx"}}
			}, "legacy kubernetes.io/ingress.class annotation is rejected"},
			"no class name": {func(r *v1alpha1.Routing) { r.Gateway = nil; r.Ingress = &v1alpha1.IngressRouting{} }, "spec.routing.ingress.className"},
			// What the target APIs (Ingress, HTTPRoute, NetworkPolicy) would
			// refuse is refused here, with the field named.
			"IPv4 hostname":         {func(r *v1alpha1.Routing) { r.Hostnames = []string{"192.0.2.10"} }, "must be DNS names"},
			"single-label hostname": {func(r *v1alpha1.Routing) { r.Hostnames = []string{"app"} }, "must be DNS names"},
			"single-label wildcard": {func(r *v1alpha1.Routing) { r.Hostnames = []string{"*.com"} }, "must be DNS names"},
			"hostname label too long": {func(r *v1alpha1.Routing) {
				r.Hostnames = []string{strings.Repeat("a", 64) + ".example.com"}
			}, "must be DNS names"},
			"gateway namespace":   {func(r *v1alpha1.Routing) { r.Gateway.Namespace = "Edge_NS" }, "spec.routing.gateway.namespace must be a namespace name"},
			"gateway sectionName": {func(r *v1alpha1.Routing) { r.Gateway.SectionName = "HTTPS!" }, "spec.routing.gateway.sectionName must be"},
			"ingress className": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "Nginx Class"}
			}, "spec.routing.ingress.className must be a DNS subdomain name"},
			"ingress tlsSecretName": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "nginx", TLSSecretName: "App_TLS"}
			}, "spec.routing.ingress.tlsSecretName must be a DNS subdomain name"},
			"ingress annotation key": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "nginx", Annotations: map[string]string{"bad key!": "x"}}
			}, "spec.routing.ingress.annotations keys must be"},
			// Configuration-injection annotations are refused whatever the
			// chart allows: the operator would write them with its own rights.
			"configuration snippet": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "nginx", Annotations: map[string]string{"nginx.ingress.kubernetes.io/configuration-snippet": "return 200;"}}
			}, "annotations ending in -snippet are refused"},
			"server snippet of any controller": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "nginx", Annotations: map[string]string{"example.com/server-snippet": "x"}}
			}, "annotations ending in -snippet are refused"},
			"external auth url": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "nginx", Annotations: map[string]string{"nginx.ingress.kubernetes.io/auth-url": "http://evil.example.com/"}}
			}, "nginx.ingress.kubernetes.io/auth-url and auth-signin are refused"},
			"external auth signin": {func(r *v1alpha1.Routing) {
				r.Gateway = nil
				r.Ingress = &v1alpha1.IngressRouting{ClassName: "nginx", Annotations: map[string]string{"nginx.ingress.kubernetes.io/auth-signin": "http://evil.example.com/"}}
			}, "nginx.ingress.kubernetes.io/auth-url and auth-signin are refused"},
			"source namespace":   {func(r *v1alpha1.Routing) { r.Source.Namespace = "Edge" }, "spec.routing.source.namespace must be a namespace name"},
			"source label key":   {func(r *v1alpha1.Routing) { r.Source.PodLabels = map[string]v1alpha1.LabelValue{"-app": "x"} }, "spec.routing.source.podLabels keys must be"},
			"source label value": {func(r *v1alpha1.Routing) { r.Source.PodLabels = map[string]v1alpha1.LabelValue{"app": "not ok!"} }, "spec.routing.source.podLabels values must be"},
			"source label value too long": {func(r *v1alpha1.Routing) {
				r.Source.PodLabels = map[string]v1alpha1.LabelValue{"app": v1alpha1.LabelValue(strings.Repeat("a", 64))}
			}, "spec.routing.source.podLabels.app: Too long"},
		} {
			t.Run(name, func(t *testing.T) {
				r := gatewayRouting()
				tc.mutate(r)
				err := env.Client.Create(ctx, routingFleet("routes", "bad", r))
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.msg)
			})
		}
	})

	gw := routingFleet("routes", "gw", gatewayRouting())
	require.NoError(t, env.Client.Create(ctx, gw))
	t.Run("without the Gateway API CRDs: GatewayAPIUnavailable, the fleet unaffected", func(t *testing.T) {
		assertRouting(t, routingCondition(t, h, gw), metav1.ConditionFalse, v1alpha1.ReasonGatewayAPIUnavailable)
		require.NoError(t, h.get(&appsv1.StatefulSet{}, "routes", "gw"), "members are provisioned regardless")
	})

	env.InstallCRDs(t, testenv.ModuleFile(t, "sigs.k8s.io/gateway-api", "v1.6.3", "config/crd/standard"))
	route := policy(routing.HTTPRouteGVK)
	t.Run("Gateway: waits for the configured parent's current-generation Accepted and ResolvedRefs", func(t *testing.T) {
		require.Eventually(t, func() bool {
			c := routingCondition(t, h, gw)
			return c != nil && c.Reason != string(v1alpha1.ReasonGatewayAPIUnavailable)
		}, 30*time.Second, time.Second)
		require.NoError(t, h.get(route, "routes", "gw-routing"), "the Gateway API schema accepted the HTTPRoute")
		assertOwnedBy(t, route, gw)
		assertRouting(t, routingCondition(t, h, gw), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway)
		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, h.get(np, "routes", "gw-routing"))

		gen := route.GetGeneration()
		setParent := func(accepted, resolved metav1.ConditionStatus, observed int64) {
			require.NoError(t, h.get(route, "routes", "gw-routing"))
			parent := map[string]any{
				"parentRef":      map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "namespace": "edge", "sectionName": "https"},
				"controllerName": "example.com/gateway-controller",
				"conditions": []any{
					map[string]any{"type": "Accepted", "status": string(accepted), "reason": "Test", "message": "from the test", "observedGeneration": observed, "lastTransitionTime": "2026-01-01T00:00:00Z"},
					map[string]any{"type": "ResolvedRefs", "status": string(resolved), "reason": "Test", "message": "from the test", "observedGeneration": observed, "lastTransitionTime": "2026-01-01T00:00:00Z"},
				},
			}
			require.NoError(t, unstructured.SetNestedSlice(route.Object, []any{parent}, "status", "parents"))
			require.NoError(t, env.Client.Status().Update(ctx, route), "playing the Gateway controller")
		}
		setParent(metav1.ConditionTrue, metav1.ConditionTrue, gen-1)
		assertRouting(t, routingCondition(t, h, gw), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway)
		setParent(metav1.ConditionFalse, metav1.ConditionTrue, gen)
		assertRouting(t, routingCondition(t, h, gw), metav1.ConditionFalse, v1alpha1.ReasonRouteNotAccepted)
		setParent(metav1.ConditionTrue, metav1.ConditionFalse, gen)
		assertRouting(t, routingCondition(t, h, gw), metav1.ConditionFalse, v1alpha1.ReasonRouteRefsNotResolved)
		setParent(metav1.ConditionTrue, metav1.ConditionTrue, gen)
		assertRouting(t, routingCondition(t, h, gw), metav1.ConditionTrue, v1alpha1.ReasonRouteAccepted)
		assert.True(t, meta.IsStatusConditionFalse(gw.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked)))

		// A hostname change is a new generation: the old verdict no longer counts.
		require.NoError(t, env.Client.Patch(ctx, gw, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"routing":{"hostnames":["shop.example.com"]}}}`))))
		assertRouting(t, routingCondition(t, h, gw), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway)
	})

	t.Run("Ingress: class, TLS for every host, annotations pruned, foreign ones kept, address", func(t *testing.T) {
		f := routingFleet("routes", "ing", ingressRouting())
		require.NoError(t, env.Client.Create(ctx, f))
		assertRouting(t, routingCondition(t, h, f), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress)
		ing := &networkingv1.Ingress{}
		require.NoError(t, h.get(ing, "routes", "ing-routing"))
		assert.Equal(t, "nginx", *ing.Spec.IngressClassName)
		require.Len(t, ing.Spec.TLS, 1)
		assert.ElementsMatch(t, []string{"app.example.com", "*.app.example.com"}, ing.Spec.TLS[0].Hosts)
		assert.Equal(t, "8m", ing.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"])

		// The ingress controller adds its own annotation and publishes an address.
		ing.Annotations["ingress.example.com/last-sync"] = "now"
		require.NoError(t, env.Client.Update(ctx, ing, client.FieldOwner("ingress-controller")))
		ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{IP: "192.0.2.10"}}
		require.NoError(t, env.Client.Status().Update(ctx, ing, client.FieldOwner("ingress-controller")))

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"routing":{"ingress":{"annotations":{"nginx.ingress.kubernetes.io/proxy-body-size":null}}}}}`))))
		assertRouting(t, routingCondition(t, h, f), metav1.ConditionTrue, v1alpha1.ReasonAddressAssigned)
		require.NoError(t, h.get(ing, "routes", "ing-routing"))
		assert.NotContains(t, ing.Annotations, "nginx.ingress.kubernetes.io/proxy-body-size", "a removed configured annotation is pruned")
		assert.Equal(t, "letsencrypt", ing.Annotations["cert-manager.io/cluster-issuer"])
		assert.Equal(t, "now", ing.Annotations["ingress.example.com/last-sync"], "a controller's annotation is kept")

		t.Run("switching to gateway waits for the old route's finalizer", func(t *testing.T) {
			ing.Finalizers = []string{"example.com/held"}
			require.NoError(t, env.Client.Update(ctx, ing, client.FieldOwner("ingress-controller")))
			require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
				[]byte(`{"spec":{"routing":{"ingress":null,"gateway":{"name":"public","namespace":"edge"}}}}`))))
			assertRouting(t, routingCondition(t, h, f), metav1.ConditionFalse, v1alpha1.ReasonRemovingOldRoute)
			assert.Error(t, h.get(policy(routing.HTTPRouteGVK), "routes", "ing-routing"), "no new route while the old one exists")
			require.NoError(t, h.get(ing, "routes", "ing-routing"))
			ing.Finalizers = nil
			require.NoError(t, env.Client.Update(ctx, ing))
			c := routingCondition(t, h, f)
			assertRouting(t, c, metav1.ConditionUnknown, v1alpha1.ReasonAwaitingGateway)
			require.NoError(t, h.get(policy(routing.HTTPRouteGVK), "routes", "ing-routing"))
		})

		t.Run("removing routing deletes the route, then its policy", func(t *testing.T) {
			require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"routing":null}}`))))
			assert.Nil(t, routingCondition(t, h, f), "no routing, no condition")
			assert.Error(t, h.get(policy(routing.HTTPRouteGVK), "routes", "ing-routing"))
			assert.Error(t, h.get(&networkingv1.NetworkPolicy{}, "routes", "ing-routing"))
			require.NoError(t, h.get(&networkingv1.NetworkPolicy{}, "routes", "ing"), "the fleet policy stays")
		})
	})

	t.Run("a foreign object named FLEET-routing is reported, never adopted", func(t *testing.T) {
		foreign := &networkingv1.Ingress{
			ObjectMeta: metav1.ObjectMeta{Namespace: "routes", Name: "taken-routing", Annotations: map[string]string{"team": "theirs"}},
			Spec:       networkingv1.IngressSpec{DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "theirs", Port: networkingv1.ServiceBackendPort{Number: 80}}}},
		}
		require.NoError(t, env.Client.Create(ctx, foreign))
		f := routingFleet("routes", "taken", ingressRouting())
		require.NoError(t, env.Client.Create(ctx, f))
		c := routingCondition(t, h, f)
		assertRouting(t, c, metav1.ConditionFalse, v1alpha1.ReasonOwnershipConflict)
		assert.Contains(t, c.Message, "taken-routing")
		got := &networkingv1.Ingress{}
		require.NoError(t, h.get(got, "routes", "taken-routing"))
		assert.Empty(t, got.OwnerReferences)
		assert.Equal(t, "theirs", got.Spec.DefaultBackend.Service.Name)
		require.NoError(t, h.get(f, "routes", "taken"))
		assert.False(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked)), "routing is separate from the fleet's own health")
	})

	t.Run("routing continues while maintenance is paused", func(t *testing.T) {
		require.NoError(t, env.Client.Patch(ctx, gw, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"maintenance":{"paused":true},"routing":{"hostnames":["paused.example.com"]}}}`))))
		routingCondition(t, h, gw)
		require.NoError(t, h.get(route, "routes", "gw-routing"))
		hosts, _, _ := unstructured.NestedStringSlice(route.Object, "spec", "hostnames")
		assert.Equal(t, []string{"paused.example.com"}, hosts)
	})
}

// enroll plays the mesh operator: it writes the state labels of the contract.
func enroll(t *testing.T, c client.Client, ns, dataPlane string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"enrolled",%q:%q,%q:"strict",%q:"namespace"}}}`,
		labels.MeshState, labels.MeshDataPlane, dataPlane, labels.MeshMTLS, labels.MeshIsolation)
	require.NoError(t, c.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("mesh-operator")))
}

func unenroll(t *testing.T, c client.Client, ns string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null,%q:null,%q:null,%q:null}}}`, labels.MeshState, labels.MeshDataPlane, labels.MeshMTLS, labels.MeshIsolation)
	require.NoError(t, c.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("mesh-operator")))
}

func namespaceLabels(t *testing.T, h *harness, ns string) map[string]string {
	t.Helper()
	n := &corev1.Namespace{}
	require.NoError(t, h.get(n, "", ns))
	return n.Labels
}

func ingressPorts(np *networkingv1.NetworkPolicy) []int {
	var out []int
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			out = append(out, p.Port.IntValue())
		}
	}
	return out
}

func testContract(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "shared")
	h := newHarness(t, env, true)
	a, b := fleet("shared", "a"), fleet("shared", "b")
	a.Spec.Routing = &v1alpha1.Routing{Hostnames: []string{"a.example.com"},
		Ingress: &v1alpha1.IngressRouting{ClassName: "nginx"},
		Source:  v1alpha1.RoutingSource{Namespace: "edge", PodLabels: map[string]v1alpha1.LabelValue{"app": "edge"}}}
	require.NoError(t, env.Client.Create(ctx, a))
	require.NoError(t, env.Client.Create(ctx, b))
	h.reconcile(a)
	h.reconcile(b)
	edgeOperator := labels.AllowFromPrefix + "fleet-system"
	edgeRouting := labels.AllowFromPrefix + "edge"
	// The edges go with the enrollment request, before any mesh enrolls the
	// namespace; without a mesh nobody reads them.
	assert.Equal(t, "true", namespaceLabels(t, h, "shared")[edgeOperator], "edges declared with the request")
	assert.Equal(t, "true", namespaceLabels(t, h, "shared")[edgeRouting], "edges declared with the request")

	t.Run("ambient-enrolled namespace: HBONE from the same sources, ports restricted by the AuthorizationPolicy, edges declared", func(t *testing.T) {
		enroll(t, env.Client, "shared", "ambient")
		h.reconcile(a)
		h.reconcile(b)
		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, h.get(np, "shared", "a"))
		assert.ElementsMatch(t, []int{8080, 15008, 8081, 15008, 8081}, ingressPorts(np), "and 8081 for the ambient probe address")
		require.NoError(t, h.get(np, "shared", "a-routing"))
		assert.ElementsMatch(t, []int{8080, 15008}, ingressPorts(np))
		ap := policy(mesh.AuthorizationPolicyKind)
		require.NoError(t, h.get(ap, "shared", "a-mesh"))
		assertPeerRuleRelaxed(t, ap, false)
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, "shared", "a"))
		assert.NotContains(t, sts.Spec.Template.Labels, labels.IstioInject, "ambient capture needs no template change")
		require.NoError(t, h.get(a, "shared", "a"))
		assert.Equal(t, "Ambient", a.Status.Mesh)
		l := namespaceLabels(t, h, "shared")
		assert.Equal(t, "true", l[edgeOperator], "the operator namespace, for /state reads")
		assert.Equal(t, "true", l[edgeRouting], "the routing source")

		h.writes.n.Store(0)
		h.reconcile(a)
		h.reconcile(b)
		assert.Equal(t, int64(0), h.writes.n.Load(), "declared labels are not rewritten")
	})

	t.Run("two fleets declaring the same edge: it stays until the last one goes", func(t *testing.T) {
		require.NoError(t, env.Client.Delete(ctx, b))
		h.reconcile(b)
		assert.Error(t, h.get(&v1alpha1.CelldFleet{}, "shared", "b"), "the finalizer is released")
		l := namespaceLabels(t, h, "shared")
		assert.Equal(t, "true", l[edgeOperator], "fleet a still declares it")
		require.NoError(t, env.Client.Delete(ctx, a))
		h.reconcile(a)
		l = namespaceLabels(t, h, "shared")
		assert.NotContains(t, l, edgeOperator, "gone with the last writer")
		assert.NotContains(t, l, edgeRouting)
		assert.Equal(t, "enrolled", l[labels.MeshState], "the mesh operator's labels are not ours to touch")
	})

	t.Run("the namespace leaves the mesh: policies revert to the no-mesh form, no label left", func(t *testing.T) {
		c := fleet("shared", "c")
		require.NoError(t, env.Client.Create(ctx, c))
		h.reconcile(c)
		require.NoError(t, h.get(policy(mesh.AuthorizationPolicyKind), "shared", "c-mesh"))
		unenroll(t, env.Client, "shared")
		h.reconcile(c)
		// c is auto and still asks for the mesh, but no enrollment is in
		// effect and no member is captured: no Istio object, no HBONE.
		noMeshTrace(t, h, "shared", "c", "the namespace left")
		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, h.get(np, "shared", "c"))
		assert.ElementsMatch(t, []int{8080, 8081}, ingressPorts(np))
		for k, v := range namespaceLabels(t, h, "shared") {
			if k == labels.Mesh {
				assert.Equal(t, labels.MeshEnabled, v, "c is auto: its enrollment request stays, inert without a mesh")
				continue
			}
			if strings.HasPrefix(k, labels.AllowFromPrefix) {
				continue // the edges of the fleets' requests, inert likewise
			}
			assert.NotContains(t, k, "core.navique.com", "no other contract label left behind")
		}
		require.NoError(t, h.get(c, "shared", "c"))
		assert.Empty(t, c.Status.Mesh)
	})

	t.Run("mode enabled asks for enrollment and waits; disabled opts out", func(t *testing.T) {
		d := fleet("shared", "d")
		d.Spec.Mesh = &v1alpha1.Mesh{Mode: v1alpha1.MeshEnabled}
		require.NoError(t, env.Client.Create(ctx, d))
		h.reconcile(d)
		assert.Equal(t, "enabled", namespaceLabels(t, h, "shared")[labels.Mesh])
		require.NoError(t, h.get(d, "shared", "d"))
		cond := meta.FindStatusCondition(d.Status.Conditions, string(v1alpha1.ConditionMeshReady))
		require.NotNil(t, cond)
		assert.Equal(t, string(v1alpha1.ReasonAwaitingEnrollment), cond.Reason)

		require.NoError(t, env.Client.Patch(ctx, d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"mode":"disabled"}}}`))))
		enroll(t, env.Client, "shared", "sidecar")
		h.reconcile(d)
		n := &corev1.Namespace{}
		require.NoError(t, h.get(n, "", "shared"))
		assert.Empty(t, contract.LabelsHeldBy(n, declarationManager(d)), "d's request is withdrawn (c, in auto, still asks)")
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, "shared", "d"))
		assert.Equal(t, "false", sts.Spec.Template.Labels[labels.IstioInject])
		assert.Equal(t, "none", sts.Spec.Template.Labels[labels.IstioDataPlaneMode])
	})
}
