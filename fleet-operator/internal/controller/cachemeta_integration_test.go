//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestCacheDropsOnlyUnreadManagedFields: the manager's cache keeps member
// Pods without their managed fields (the operator never applies them and
// reads none: memory at 3,000 members), while a namespace keeps them: which
// contract labels a writer holds is read from them.
func TestCacheDropsOnlyUnreadManagedFields(t *testing.T) {
	ctx := context.Background()
	scheme := newScheme(t)
	env := testenv.Start(t, scheme, "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "shop")
	runningMember(t, env.Client, "shop", "web", 0, false, "rev1", "")

	opts := cache.Options{Scheme: scheme}
	RestrictCache(newHarness(t, env, true).r.Config, &opts)
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

	ns := &corev1.Namespace{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "shop"}, ns))
	assert.NotEmpty(t, ns.ManagedFields, "a cached namespace keeps its managed fields")
}
