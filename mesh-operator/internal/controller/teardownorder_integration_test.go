//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// judgeEdgeCallers checks, at every state the log recorded, that the Pods
// of the declared edge reach the dependant's workload (podLabels). An
// ambient Pod's mTLS lasts only while its namespace (or the Pod itself)
// asks for ambient: once the label goes, istio-cni may release it into
// plaintext at any moment, so from then on it is judged as plaintext.
func judgeEdgeCallers(t *testing.T, log *worldLog, edge, dependant string, podLabels map[string]string) {
	t.Helper()
	v := &violations{t: t}
	states := log.replay(func(w *world) {
		for _, p := range w.pods(edge) {
			p := p
			if w.nsLabels(edge)[labels.IstioDataPlaneMode] != "ambient" && p.Labels[labels.IstioDataPlaneMode] != "ambient" {
				delete(p.Annotations, labels.IstioAmbientRedirection)
			}
			req := caller(&p, podmesh.DataPlaneAmbient, 8080)
			if d := w.judge(dependant, podLabels, req); !d.Allowed {
				v.add(w, "Pod %s/%s of the declared edge (mTLS %v) cannot reach %s (mesh-mtls %q): %s", edge, p.Name, req.MTLS, dependant, w.paMode(dependant), d.Why)
			}
		}
	})
	v.assertNone(states)
}

// edgeAndDependant is an ambient mesh (mode adopt) in which "shop" declares
// "gateways" as an edge and is STRICT, both enrolled as enroll lists them
// ("gateways" sorts first: released first in a plain pass over the names).
func edgeAndDependant(t *testing.T, licenseID string, enrollNamespaces []string, shopLabels map[string]string) *enrollmentBed {
	t.Helper()
	b := startEnrollmentBed(t, licenseID, events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	readyIstiod(t, admin)
	shopLabels[labels.AllowFromPrefix+"gateways"] = "true"
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gateways"}}))
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: shopLabels}}))
	captured := map[string]string{labels.IstioAmbientRedirection: "enabled"}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cache-0", Annotations: captured}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "gateways", Name: "gw", Annotations: captured}},
	} {
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "example.invalid/app"}}
		require.NoError(t, admin.Create(ctx, p))
	}
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient,
			EnrollNamespaces: enrollNamespaces}}))
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
	require.Equal(t, "strict", meshMTLSMode(t, admin, "shop"), "the edge's Pod is captured: shop cuts over")
	return b
}

// TestTeardownReleasesDependantsBeforeEdges (issue 40 item 5): deleting
// the ServiceMesh releases every namespace; the edge's Pods go plaintext
// once its data-plane label is gone, so no namespace that declared it may
// still be STRICT (or keep the allow-nothing baseline) by then. Judged at
// every state the API server went through.
func TestTeardownReleasesDependantsBeforeEdges(t *testing.T) {
	b := edgeAndDependant(t, "lic-teardown-order", []string{"gateways"}, map[string]string{labels.Mesh: labels.MeshEnabled})
	ctx := context.Background()
	log := startWorldLog(t, b.env.Config, transitionWatched...)

	m := &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}
	require.NoError(t, b.admin.Delete(ctx, m))
	for i := 0; i < 5 && m != nil; i++ {
		_, m = b.reconcile(t)
	}
	require.Nil(t, m, "the ServiceMesh is gone")
	judgeEdgeCallers(t, log, "gateways", "shop", nil)
}

// TestLeavingTogetherReleasesDependantsBeforeEdges: the normal leaving
// path, with the edge and the namespace that declared it leaving in the
// same reconcile (both taken off spec.enrollNamespaces): the same order.
func TestLeavingTogetherReleasesDependantsBeforeEdges(t *testing.T) {
	b := edgeAndDependant(t, "lic-leaving-together", []string{"gateways", "shop"}, map[string]string{})
	ctx := context.Background()
	log := startWorldLog(t, b.env.Config, transitionWatched...)

	m := &v1alpha1.ServiceMesh{}
	require.NoError(t, b.admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
	m.Spec.EnrollNamespaces = nil
	require.NoError(t, b.admin.Update(ctx, m))
	b.reconcile(t)
	_, m = b.reconcile(t)
	require.Empty(t, m.Status.EnrolledNamespaces)
	judgeEdgeCallers(t, log, "gateways", "shop", nil)
}
