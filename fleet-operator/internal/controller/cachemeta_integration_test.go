//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"

	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestCacheDropsOnlyUnreadManagedFields: the manager's cache keeps member
// Pods, the fleets and the objects the operator applies for them without
// their managed fields (it reads none of them: memory at 1,000 fleets and
// 3,000 members), while a namespace keeps them: which contract labels a
// writer holds is read from them.
func TestCacheDropsOnlyUnreadManagedFields(t *testing.T) {
	ctx := context.Background()
	scheme := newScheme(t)
	env := testenv.Start(t, scheme, "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "shop")
	runningMember(t, env.Client, "shop", "web", 0, false, "rev1", "")
	h := newHarness(t, env, true)
	f := fleet("shop", "web")
	require.NoError(t, env.Client.Create(ctx, f))
	h.reconcile(f)

	opts := cache.Options{Scheme: scheme}
	RestrictCache(h.r.Config, &opts)
	c, err := cache.New(env.Config, opts)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = c.Start(cctx) }()
	require.True(t, c.WaitForCacheSync(cctx))

	pod := memberPod("shop", "web", 0, false)
	live := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Namespace: "shop", Name: pod.Name}, live))
	require.NotEmpty(t, live.ManagedFields, "the API server records who wrote the Pod")
	cached := &corev1.Pod{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "shop", Name: pod.Name}, cached))
	assert.Empty(t, cached.ManagedFields, "a cached member Pod carries no managed fields")
	assert.Equal(t, live.Status.Phase, cached.Status.Phase)

	for _, list := range []client.ObjectList{&v1alpha1.CelldFleetList{}, &appsv1.StatefulSetList{}, &corev1.ServiceList{},
		&corev1.ServiceAccountList{}, &networkingv1.NetworkPolicyList{}} {
		require.NoError(t, c.List(ctx, list, client.InNamespace("shop")))
		items, err := meta.ExtractList(list)
		require.NoError(t, err)
		require.NotEmpty(t, items, "%T: the fleet's objects are cached", list)
		for _, item := range items {
			o := item.(client.Object)
			assert.Empty(t, o.GetManagedFields(), "%T %s is cached without managed fields", o, o.GetName())
		}
	}

	ns := &corev1.Namespace{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "shop"}, ns))
	assert.NotEmpty(t, ns.ManagedFields, "a cached namespace keeps its managed fields")
}
