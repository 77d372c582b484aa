package apply

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

const hashKey = "example.com/applied-hash"

var serviceKind = schema.GroupKind{Kind: "Service"}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	return s
}

var owner = &metav1.ObjectMeta{Name: "owner", UID: "uid-owner"}

func ownerRef(uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Owner", Name: "owner", UID: uid, Controller: ptr.To(true)}}
}

func desiredService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", Labels: map[string]string{"app": "x"}, OwnerReferences: ownerRef(owner.UID)},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "x"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

// counters count the requests each client saw, by verb; createOnly are
// the applies that create only if nothing holds the name.
type counters struct{ apiGets, cacheGets, applies, createOnly, deletes int }

// fixture is an Applier whose Client (the API server) and Cache (the
// informers) are separate fake stores, so the test controls what each holds.
type fixture struct {
	a     *Applier
	n     *counters
	api   client.Client
	cache client.Client
	// applied is the last applied configuration.
	applied map[string]any
}

func newFixture(t *testing.T, apiObjs, cacheObjs []client.Object, apiErr, cacheErr error) *fixture {
	s := scheme(t)
	f := &fixture{n: &counters{}}
	f.api = fake.NewClientBuilder().WithScheme(s).WithObjects(apiObjs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			f.n.apiGets++
			if apiErr != nil {
				return apiErr
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
			u, ok := obj.(interface{ UnstructuredContent() map[string]any })
			if !ok {
				t.Fatalf("apply of %T", obj)
			}
			content := u.UnstructuredContent()
			meta, _ := content["metadata"].(map[string]any)
			if meta["resourceVersion"] == createOnlyResourceVersion {
				// The API server's answer to this precondition: a conflict
				// when any object holds the name (see the integration test).
				f.n.createOnly++
				if apiErr != nil {
					return apiErr
				}
				held := &unstructured.Unstructured{Object: map[string]any{"apiVersion": content["apiVersion"], "kind": content["kind"]}}
				if err := c.Get(ctx, client.ObjectKey{Namespace: meta["namespace"].(string), Name: meta["name"].(string)}, held); err == nil {
					return apierrors.NewConflict(schema.GroupResource{Resource: "services"}, meta["name"].(string), errors.New("the object has been modified"))
				}
			} else {
				f.n.applies++
			}
			f.applied = content
			return nil
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			f.n.deletes++
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	f.cache = fake.NewClientBuilder().WithScheme(s).WithObjects(cacheObjs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			f.n.cacheGets++
			if _, isU := obj.(*unstructured.Unstructured); isU && s.Recognizes(obj.GetObjectKind().GroupVersionKind()) {
				t.Errorf("a kind in the scheme must be read typed from the cache, got unstructured %s", obj.GetObjectKind().GroupVersionKind())
			}
			if cacheErr != nil {
				return cacheErr
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	f.a = &Applier{Client: f.api, FieldManager: "test", HashAnnotation: hashKey, Cache: f.cache, CachedKinds: []schema.GroupKind{serviceKind}}
	return f
}

// liveService is what the API server would hold after applying desired:
// desired plus the hash annotation and server defaults.
func liveService(t *testing.T, uid types.UID) *corev1.Service {
	f := newFixture(t, nil, nil, nil, nil)
	res, err := f.a.Apply(context.Background(), desiredService(), owner)
	require.NoError(t, err)
	require.Equal(t, Created, res)
	svc := &corev1.Service{}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(f.applied, svc))
	svc.OwnerReferences = ownerRef(uid)
	svc.Spec.ClusterIP = "10.0.0.1" // server-set fields are ignored by the comparison
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.Ports[0].Protocol = corev1.ProtocolTCP
	svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	return svc
}

func TestCachedUnchangedCostsNoRequest(t *testing.T) {
	live := liveService(t, owner.UID)
	f := newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
	res, err := f.a.Apply(context.Background(), desiredService(), owner)
	require.NoError(t, err)
	assert.Equal(t, Unchanged, res)
	assert.Equal(t, counters{cacheGets: 1}, *f.n, "read from the cache only, nothing sent to the API server")
}

func TestCachedDifferenceIsApplied(t *testing.T) {
	live := liveService(t, owner.UID)
	live.Spec.Selector = map[string]string{"app": "y"} // edited by someone
	f := newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
	res, err := f.a.Apply(context.Background(), desiredService(), owner)
	require.NoError(t, err)
	assert.Equal(t, Updated, res)
	assert.Equal(t, counters{cacheGets: 1, applies: 1}, *f.n)
}

func TestCachedChangedHashIsApplied(t *testing.T) {
	live := liveService(t, owner.UID)
	live.Annotations[hashKey] = "0000" // applied from another desired object (a field dropped since)
	f := newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
	res, err := f.a.Apply(context.Background(), desiredService(), owner)
	require.NoError(t, err)
	assert.Equal(t, Updated, res)
	assert.Equal(t, 1, f.n.applies)
}

func TestCachedForeignObjectIsAConflict(t *testing.T) {
	live := liveService(t, "uid-someone-else")
	f := newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
	_, err := f.a.Apply(context.Background(), desiredService(), owner)
	var conflict *ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Equal(t, counters{cacheGets: 1}, *f.n, "never written")
}

// A cache miss is confirmed against the API server: the cache may not have
// seen the object yet, or (label-selected caches) may never see a foreign
// one. The create it leads to succeeds only if nothing holds the name on
// the API server when it arrives.
// TestCacheMissGoesToACreateOnlyApply: a cache miss is not confirmed with a
// read; the create-only apply is refused when anything holds the name, and
// only then is the holder read and judged.
func TestCacheMissGoesToACreateOnlyApply(t *testing.T) {
	t.Run("foreign object only the API server shows: conflict, no write", func(t *testing.T) {
		live := liveService(t, "uid-someone-else")
		live.Labels = nil
		f := newFixture(t, []client.Object{live}, nil, nil, nil)
		_, err := f.a.Apply(context.Background(), desiredService(), owner)
		var conflict *ConflictError
		require.ErrorAs(t, err, &conflict)
		assert.Equal(t, counters{cacheGets: 1, createOnly: 1, apiGets: 1}, *f.n, "the refused create, then the read")
	})
	t.Run("our object the cache has not seen yet: unchanged, no write", func(t *testing.T) {
		f := newFixture(t, []client.Object{liveService(t, owner.UID)}, nil, nil, nil)
		res, err := f.a.Apply(context.Background(), desiredService(), owner)
		require.NoError(t, err)
		assert.Equal(t, Unchanged, res)
		assert.Equal(t, counters{cacheGets: 1, createOnly: 1, apiGets: 1}, *f.n, "the refused create, then the read")
	})
	t.Run("absent everywhere: created in one request", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil, nil)
		res, err := f.a.Apply(context.Background(), desiredService(), owner)
		require.NoError(t, err)
		assert.Equal(t, Created, res)
		assert.Equal(t, counters{cacheGets: 1, createOnly: 1}, *f.n)
		assert.NotEmpty(t, f.applied["metadata"].(map[string]any)["annotations"].(map[string]any)[hashKey], "created with the hash annotation")
	})
	t.Run("a kind read uncached: read first, then created only if still absent", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil, nil)
		f.a.CachedKinds = nil
		res, err := f.a.Apply(context.Background(), desiredService(), owner)
		require.NoError(t, err)
		assert.Equal(t, Created, res)
		assert.Equal(t, counters{apiGets: 1, createOnly: 1}, *f.n)
	})
	t.Run("ApplyOver without a live object: the caller's list stands for the read", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil, nil)
		f.a.CachedKinds = nil
		res, _, err := f.a.ApplyOver(context.Background(), desiredService(), owner, nil)
		require.NoError(t, err)
		assert.Equal(t, Created, res)
		assert.Equal(t, counters{createOnly: 1}, *f.n)
	})
}

func TestReadErrorsStopBeforeAnyWrite(t *testing.T) {
	boom := errors.New("injected")
	t.Run("cache error", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil, boom)
		_, err := f.a.Apply(context.Background(), desiredService(), owner)
		require.ErrorIs(t, err, boom)
		assert.Equal(t, counters{cacheGets: 1}, *f.n)
	})
	t.Run("the read after a refused create fails", func(t *testing.T) {
		f := newFixture(t, []client.Object{liveService(t, owner.UID)}, nil, apierrors.NewServiceUnavailable("injected"), nil)
		_, err := f.a.Apply(context.Background(), desiredService(), owner)
		require.True(t, apierrors.IsServiceUnavailable(err), "%v", err)
		assert.Equal(t, 0, f.n.applies)
	})
	t.Run("uncached read error", func(t *testing.T) {
		f := newFixture(t, nil, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "svc", boom), nil)
		f.a.CachedKinds = nil
		_, err := f.a.Apply(context.Background(), desiredService(), owner)
		require.True(t, apierrors.IsForbidden(err), "%v", err)
		assert.Equal(t, counters{apiGets: 1}, *f.n)
	})
}

func TestKindsNotListedAreReadUncached(t *testing.T) {
	live := liveService(t, owner.UID)
	for name, a := range map[string]func(*fixture){
		"kind not listed": func(f *fixture) { f.a.CachedKinds = []schema.GroupKind{{Group: "apps", Kind: "StatefulSet"}} },
		"no cache":        func(f *fixture) { f.a.Cache = nil },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
			a(f)
			res, err := f.a.Apply(context.Background(), desiredService(), owner)
			require.NoError(t, err)
			assert.Equal(t, Unchanged, res)
			assert.Equal(t, counters{apiGets: 1}, *f.n)
		})
	}
}

func TestDeleteReadsCachedKindsFromTheCache(t *testing.T) {
	target := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Service"))
		u.SetNamespace("ns")
		u.SetName("svc")
		return u
	}
	t.Run("ours: deleted", func(t *testing.T) {
		live := liveService(t, owner.UID)
		f := newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
		deleted, err := f.a.Delete(context.Background(), target(), owner)
		require.NoError(t, err)
		assert.True(t, deleted)
		assert.Equal(t, counters{cacheGets: 1, deletes: 1}, *f.n)
	})
	t.Run("foreign: conflict, left in place", func(t *testing.T) {
		live := liveService(t, "uid-someone-else")
		f := newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
		_, err := f.a.Delete(context.Background(), target(), owner)
		var conflict *ConflictError
		require.ErrorAs(t, err, &conflict)
		assert.Equal(t, 0, f.n.deletes)
	})
	t.Run("absent: nothing to do", func(t *testing.T) {
		f := newFixture(t, nil, nil, nil, nil)
		deleted, err := f.a.Delete(context.Background(), target(), owner)
		require.NoError(t, err)
		assert.False(t, deleted)
		assert.Equal(t, counters{cacheGets: 1, apiGets: 1}, *f.n)
	})
	t.Run("stale cache, already gone: nothing to do", func(t *testing.T) {
		live := liveService(t, owner.UID)
		f := newFixture(t, nil, []client.Object{live}, nil, nil)
		deleted, err := f.a.Delete(context.Background(), target(), owner)
		require.NoError(t, err)
		assert.False(t, deleted)
		assert.Equal(t, 1, f.n.deletes, "the delete is sent and finds nothing")
	})
}

// TestApplyAndReadReturnsTheObjectAfterwards: a created object is the
// API server's answer (the cache may not hold it yet); an unchanged one is
// the live object, read from the cache and not read again.
func TestApplyAndReadReturnsTheObjectAfterwards(t *testing.T) {
	f := newFixture(t, nil, nil, nil, nil)
	res, after, err := f.a.ApplyAndRead(context.Background(), desiredService(), owner)
	require.NoError(t, err)
	assert.Equal(t, Created, res)
	assert.Equal(t, "svc", after.GetName())
	assert.NotEmpty(t, after.GetAnnotations()[hashKey], "the object as the create answered it")

	live := liveService(t, owner.UID)
	f = newFixture(t, []client.Object{live.DeepCopy()}, []client.Object{live.DeepCopy()}, nil, nil)
	res, after, err = f.a.ApplyAndRead(context.Background(), desiredService(), owner)
	require.NoError(t, err)
	assert.Equal(t, Unchanged, res)
	svc, ok := after.(*corev1.Service)
	require.True(t, ok, "the typed live object, got %T", after)
	assert.Equal(t, "10.0.0.1", svc.Spec.ClusterIP)
	assert.Equal(t, counters{cacheGets: 1}, *f.n)
}
