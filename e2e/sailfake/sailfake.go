// Package sailfake plays the Sail Operator's controller in the local test
// bed, which has no container runtime to run the real one: it keeps the
// finalizer on every Sail resource, releases it on deletion, and reports
// Ready for the current generation. With the project's minimal Sail CRDs
// (mesh-operator/config/sail-test-crds) installed, the mesh operator then
// sees a Sail-managed control plane become Ready.
package sailfake

import (
	"context"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// Finalizer is the one the Sail Operator puts on its resources.
const Finalizer = "sailoperator.io/sail-operator"

var kinds = []string{"Istio", "IstioCNI", "ZTunnel"}

// Serve installs the Sail API from the project's minimal Sail CRDs (under
// the repository root) and plays its controller every half second until
// stop is called; stop waits for it to finish.
func Serve(ctx context.Context, cfg *rest.Config, c client.Client, root string) (stop func(), err error) {
	var crds []string
	for _, name := range []string{"istios", "istiocnis", "ztunnels"} {
		crds = append(crds, filepath.Join(root, "mesh-operator/config/sail-test-crds/sailoperator.io_"+name+".yaml"))
	}
	if err := cluster.InstallManifests(ctx, cfg, crds...); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx, c, 500*time.Millisecond) }()
	return func() { cancel(); <-done }, nil
}

// Run reconciles every Sail resource every interval until ctx ends.
func Run(ctx context.Context, c client.Client, interval time.Duration) {
	for ctx.Err() == nil {
		for _, kind := range kinds {
			sync(ctx, c, kind)
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

func sync(ctx context.Context, c client.Client, kind string) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: "sailoperator.io", Version: "v1", Kind: kind + "List"})
	if err := c.List(ctx, list); err != nil {
		return // the CRDs may not be installed (yet)
	}
	for i := range list.Items {
		u := &list.Items[i]
		has := false
		for _, f := range u.GetFinalizers() {
			has = has || f == Finalizer
		}
		switch {
		case u.GetDeletionTimestamp() != nil:
			if has {
				u.SetFinalizers(nil)
				_ = c.Update(ctx, u)
			}
			continue
		case !has:
			u.SetFinalizers(append(u.GetFinalizers(), Finalizer))
			if err := c.Update(ctx, u); err != nil {
				continue
			}
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		if gen == u.GetGeneration() && len(conds) == 2 {
			continue // already reported for this generation
		}
		status := map[string]any{
			"observedGeneration": u.GetGeneration(),
			"conditions": []any{
				map[string]any{"type": "Reconciled", "status": "True", "reason": "Reconciled", "message": "SIMULATED by e2e/sailfake (local test bed)", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)},
				map[string]any{"type": "Ready", "status": "True", "reason": "Healthy", "message": "SIMULATED by e2e/sailfake: no Sail Operator or data plane runs on the local test bed", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)},
			},
			"state": "Healthy",
		}
		if kind == "Istio" {
			status["activeRevisionName"] = u.GetName()
		}
		u.Object["status"] = status
		if err := c.Status().Update(ctx, u); err != nil && !apierrors.IsConflict(err) && !meta.IsNoMatchError(err) {
			continue
		}
	}
}
