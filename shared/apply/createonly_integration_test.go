//go:build integration

package apply

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestCreateOnlyAtTheAPIServer: an object the applier does not see is
// created only if nothing holds its name when the create arrives; an object
// of someone else's is never written, even one that appears between the
// applier's read and its create.
func TestCreateOnlyAtTheAPIServer(t *testing.T) {
	env := testenv.Start(t, clientgoscheme.Scheme)
	ctx := context.Background()
	mine := &metav1.ObjectMeta{Name: "owner", UID: "3f1c1a52-0000-4000-8000-000000000001"}
	desired := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "x"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: mine.Name, UID: mine.UID, Controller: ptr.To(true)}}},
			Data: map[string]string{"mode": "STRICT"},
		}
	}
	foreign := func(t *testing.T, name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string]string{"mode": "theirs"}}
		require.NoError(t, env.Client.Create(ctx, cm, client.FieldOwner("someone-else")))
		return cm
	}
	var gets, applies atomic.Int32
	counted := func(c client.WithWatch) client.Client {
		return interceptor.NewClient(c, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				gets.Add(1)
				return c.Get(ctx, key, obj, opts...)
			},
			Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
				applies.Add(1)
				return c.Apply(ctx, obj, opts...)
			},
		})
	}
	withWatch, err := client.NewWithWatch(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	applier := func(c client.Client) *Applier {
		return &Applier{Client: c, FieldManager: "ours", HashAnnotation: hashKey}
	}
	reset := func() { gets.Store(0); applies.Store(0) }

	t.Run("absent: created in one request, owned by our apply alone", func(t *testing.T) {
		reset()
		res, after, err := applier(counted(withWatch)).ApplyOver(ctx, desired("fresh"), mine, nil)
		require.NoError(t, err)
		assert.Equal(t, Created, res)
		assert.Equal(t, int32(0), gets.Load(), "no read: the caller's list said absent")
		assert.Equal(t, int32(1), applies.Load())
		live := &corev1.ConfigMap{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fresh"}, live))
		assert.Equal(t, "STRICT", live.Data["mode"])
		assert.True(t, metav1.IsControlledBy(live, mine))
		require.Len(t, live.ManagedFields, 1)
		assert.Equal(t, "ours", live.ManagedFields[0].Manager)
		assert.Equal(t, metav1.ManagedFieldsOperationApply, live.ManagedFields[0].Operation, "a later apply can drop what this one set")
		assert.Equal(t, live.ResourceVersion, after.GetResourceVersion(), "the answer is the created object")

		res, err = applier(counted(withWatch)).Apply(ctx, desired("fresh"), mine)
		require.NoError(t, err)
		assert.Equal(t, Unchanged, res, "applied again: nothing to write")
	})

	t.Run("someone else's object the caller's list missed: refused, untouched", func(t *testing.T) {
		theirs := foreign(t, "listed-missed")
		reset()
		_, _, err := applier(counted(withWatch)).ApplyOver(ctx, desired("listed-missed"), mine, nil)
		var conflict *ConflictError
		require.ErrorAs(t, err, &conflict)
		assert.Equal(t, int32(1), gets.Load(), "the refused create, then one read of the holder")
		live := &corev1.ConfigMap{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), live))
		assert.Equal(t, theirs.ResourceVersion, live.ResourceVersion, "not written")
		assert.Equal(t, "theirs", live.Data["mode"])
	})

	t.Run("someone else's object appearing between the read and the create: refused, untouched", func(t *testing.T) {
		appeared := false
		raced := interceptor.NewClient(withWatch, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if appeared || key.Name != "raced" {
					return c.Get(ctx, key, obj, opts...)
				}
				appeared = true
				err := c.Get(ctx, key, obj, opts...) // nothing there yet
				foreign(t, "raced")                  // and now there is
				return err
			},
		})
		_, err := applier(raced).Apply(ctx, desired("raced"), mine)
		require.True(t, appeared)
		var conflict *ConflictError
		require.ErrorAs(t, err, &conflict, "the object that appeared is someone else's")
		live := &corev1.ConfigMap{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "raced"}, live))
		assert.Equal(t, "theirs", live.Data["mode"], "not taken over")
		assert.False(t, metav1.IsControlledBy(live, mine))
		for _, mf := range live.ManagedFields {
			assert.NotEqual(t, "ours", mf.Manager, "nothing of ours was written to it: %+v", live.ManagedFields)
		}
	})

	t.Run("the holder gone again before it is read: an error, nothing created without the precondition", func(t *testing.T) {
		theirs := foreign(t, "vanishing")
		vanishing := interceptor.NewClient(withWatch, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if key.Name == "vanishing" {
					require.NoError(t, c.Delete(ctx, theirs))
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		_, _, err := applier(vanishing).ApplyOver(ctx, desired("vanishing"), mine, nil)
		require.Error(t, err)
		assert.True(t, apierrors.IsConflict(err), "the refused create is the reason: %v", err)
		err = env.Client.Get(ctx, client.ObjectKeyFromObject(theirs), &corev1.ConfigMap{})
		assert.True(t, apierrors.IsNotFound(err), "nothing was created in its place: %v", err)
	})
}
