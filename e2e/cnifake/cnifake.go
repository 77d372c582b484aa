// Package cnifake plays istio-cni in the local test bed, which has no
// container runtime and so no real one: while a Sail ZTunnel exists, it
// marks each Pod of a namespace labelled istio.io/dataplane-mode=ambient
// that has no proxy (and does not opt out) as redirected to ztunnel
// (ambient.istio.io/redirection=enabled), one Pod at a time as istio-cni
// does, and removes the mark when the namespace or ztunnel leaves. The mesh
// operator reads the mark as its cutover signal and the fleet operator as
// "captured".
package cnifake

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// Play runs until ctx ends, for the given namespaces (all when none given).
func Play(ctx context.Context, k8s client.Client, namespaces ...string) {
	for ctx.Err() == nil {
		playOnce(ctx, k8s, namespaces)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func playOnce(ctx context.Context, k8s client.Client, only []string) {
	zts := &unstructured.UnstructuredList{}
	zts.SetAPIVersion("sailoperator.io/v1")
	zts.SetKind("ZTunnelList")
	up := false
	if k8s.List(ctx, zts) == nil {
		for _, z := range zts.Items {
			up = up || z.GetDeletionTimestamp() == nil
		}
	}
	nsList := &corev1.NamespaceList{}
	pods := &corev1.PodList{}
	if k8s.List(ctx, nsList) != nil || k8s.List(ctx, pods) != nil {
		return
	}
	ambient := map[string]bool{}
	for _, ns := range nsList.Items {
		ambient[ns.Name] = ns.Labels[labels.IstioDataPlaneMode] == "ambient"
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if len(only) > 0 && !slices.Contains(only, p.Namespace) {
			continue
		}
		want := up && ambient[p.Namespace] && !podmesh.HasProxy(p) && p.DeletionTimestamp == nil && p.Labels[labels.IstioDataPlaneMode] != "none"
		if want == podmesh.Redirected(p) {
			continue
		}
		body := `{"metadata":{"annotations":{"` + labels.IstioAmbientRedirection + `":null}}}`
		if want {
			body = `{"metadata":{"annotations":{"` + labels.IstioAmbientRedirection + `":"enabled"}}}`
		}
		_ = k8s.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(body)))
	}
}
