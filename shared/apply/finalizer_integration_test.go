//go:build integration

package apply

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestFinalizersUnderConcurrency: adding and removing a finalizer from a
// copy read before someone else changed the list never drops their
// finalizer; the stale write fails with a conflict instead, and succeeds
// from a fresh read.
func TestFinalizersUnderConcurrency(t *testing.T) {
	env := testenv.Start(t, clientgoscheme.Scheme)
	ctx := context.Background()
	c := env.Client
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "default"}}
	require.NoError(t, c.Create(ctx, cm))

	require.NoError(t, AddFinalizer(ctx, c, cm, "example.com/ours"))
	require.NoError(t, AddFinalizer(ctx, c, cm, "example.com/ours"), "present: nothing to write")
	stale := cm.DeepCopy()

	// Someone else adds theirs.
	other := &corev1.ConfigMap{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cm), other))
	other.Finalizers = append(other.Finalizers, "example.com/theirs")
	require.NoError(t, c.Update(ctx, other))

	err := RemoveFinalizer(ctx, c, stale, "example.com/ours")
	assert.True(t, apierrors.IsConflict(err), "a stale removal is refused: %v", err)
	live := &corev1.ConfigMap{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cm), live))
	assert.ElementsMatch(t, []string{"example.com/ours", "example.com/theirs"}, live.Finalizers)

	staleAdd := cm.DeepCopy()
	staleAdd.Finalizers = nil
	err = AddFinalizer(ctx, c, staleAdd, "example.com/second")
	assert.True(t, apierrors.IsConflict(err), "a stale addition is refused: %v", err)

	require.NoError(t, RemoveFinalizer(ctx, c, live, "example.com/ours"))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cm), live))
	assert.Equal(t, []string{"example.com/theirs"}, live.Finalizers)
	live.Finalizers = nil
	require.NoError(t, c.Update(ctx, live))
}
