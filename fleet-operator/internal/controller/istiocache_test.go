package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

// A policy event wakes only the fleet that controls the policy: not an
// owner that is no controller, nor a namesake kind of another group.
func TestControllingFleet(t *testing.T) {
	obj := func(refs ...metav1.OwnerReference) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetNamespace("ns")
		u.SetName("f-mesh")
		u.SetOwnerReferences(refs)
		return u
	}
	ours := metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "CelldFleet", Name: "f", Controller: ptr.To(true)}
	assert.Equal(t, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "f"}}}, controllingFleet(context.Background(), obj(ours)))
	notController := ours
	notController.Controller = nil
	assert.Empty(t, controllingFleet(context.Background(), obj(notController)))
	other := ours
	other.APIVersion = "example.com/v1"
	assert.Empty(t, controllingFleet(context.Background(), obj(other)))
	assert.Empty(t, controllingFleet(context.Background(), obj()))
}

// The controller's start waits for the caches of the Istio kinds served
// until they have listed, but a cache that never lists (its list is
// refused, or hangs) holds the start back for initialSyncWait at most:
// the operator starts and reads from the API server instead. Where Istio
// is not served nothing is started and nothing is waited for.
func TestStartingSourceWaitsBoundedForTheIstioCaches(t *testing.T) {
	defer func(w time.Duration) { initialSyncWait = w }(initialSyncWait)
	initialSyncWait = 300 * time.Millisecond

	caches := func(synced bool) (*optionalCaches, map[schema.GroupVersionKind]*controllertest.FakeInformer) {
		informers := map[schema.GroupVersionKind]*controllertest.FakeInformer{}
		oc := &optionalCaches{started: make(chan struct{}), byKind: map[schema.GroupKind]*kindCache{}}
		oc.newCache = func(gvk schema.GroupVersionKind, _ func(error)) (cache.Cache, error) {
			inf := controllertest.NewFakeInformer()
			if synced {
				inf.Synced()
			}
			informers[gvk] = inf
			return &informertest.FakeInformers{InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{gvk: inf}}, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = oc.Start(ctx) }()
		return oc, informers
	}
	served := func(ok bool) func(schema.GroupVersionKind) (bool, error) {
		return func(schema.GroupVersionKind) (bool, error) { return ok, nil }
	}
	wait := func(oc *optionalCaches, ok bool) time.Duration {
		start := time.Now()
		assert.NoError(t, oc.source(served(ok)).(startingSource).WaitForSync(context.Background()))
		return time.Since(start)
	}

	oc, informers := caches(true)
	took := wait(oc, true)
	assert.Len(t, informers, len(followedKinds()), "a cache per Istio kind is started before the workers")
	assert.True(t, oc.synced())
	assert.Less(t, took, initialSyncWait, "synced caches are not waited on longer than their list")

	oc, informers = caches(false)
	took = wait(oc, true)
	assert.Len(t, informers, len(followedKinds()))
	assert.False(t, oc.synced())
	assert.GreaterOrEqual(t, took, initialSyncWait, "a cache that has not listed is waited for")
	assert.Less(t, took, initialSyncWait+time.Second, "but no longer than initialSyncWait")

	oc, informers = caches(true)
	took = wait(oc, false)
	assert.Empty(t, informers, "no cache where Istio is not served")
	assert.Less(t, took, initialSyncWait)
}
