package apply

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// AddFinalizer adds name to obj's finalizers, RemoveFinalizer takes it off;
// both write nothing when there is nothing to change. The merge patch
// carries obj's resourceVersion: a merge patch replaces the whole
// finalizer list, so without that lock a stale obj would drop a finalizer
// someone else added since it was read. A changed object fails with a
// conflict and the reconcile retries from a fresh read. obj is updated
// from the answer.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) error {
	if controllerutil.ContainsFinalizer(obj, name) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, name)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", name, err)
	}
	return nil
}

// RemoveFinalizer: see AddFinalizer. Callers that treat an object already
// gone as done check apierrors.IsNotFound on the (wrapped) error.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) error {
	if !controllerutil.ContainsFinalizer(obj, name) {
		return nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, name)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing finalizer %s: %w", name, err)
	}
	return nil
}
