//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestEdgeLeavingTheMeshRelaxesFirst: a namespace declared as an edge of a
// STRICT namespace leaves the mesh (spec.enrollNamespaces no longer names
// it). Its Pods go back to plaintext once its data-plane label is gone, so
// the namespace that declared it must be PERMISSIVE by the time that label
// goes, in the same reconcile, and stay so while the edge speaks
// plaintext (found by the transition explorer's enrollment-and-clients
// scenario: the routing source was cut off by STRICT).
func TestEdgeLeavingTheMeshRelaxesFirst(t *testing.T) {
	b := startEnrollmentBed(t, "lic-edge-leaving", events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	readyIstiod(t, admin)

	// "gateways" sorts before "shop": released first in a plain pass over
	// the namespace list.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gateways"}}))
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{
		labels.Mesh: labels.MeshEnabled, labels.AllowFromPrefix + "gateways": "true"}}}))
	captured := map[string]string{labels.IstioAmbientRedirection: "enabled"}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cache-0", Annotations: captured}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "gateways", Name: "gw", Annotations: captured}},
	} {
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "example.invalid/app"}}
		require.NoError(t, admin.Create(ctx, p))
	}
	paMode := func(namespace string) string { t.Helper(); return meshMTLSMode(t, admin, namespace) }
	dataPlaneLabel := func(namespace string) string {
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: namespace}, ns))
		return ns.Labels[labels.IstioDataPlaneMode]
	}

	m := &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient,
			EnrollNamespaces: []string{"gateways"}}}
	require.NoError(t, admin.Create(ctx, m))
	_, m = b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase)
	require.Equal(t, "strict", paMode("shop"), "the edge's Pod is captured: shop cuts over")
	require.Equal(t, "ambient", dataPlaneLabel("gateways"))

	// The edge leaves the mesh.
	m.Spec.EnrollNamespaces = nil
	require.NoError(t, admin.Update(ctx, m))
	b.reconcile(t)
	assert.Empty(t, dataPlaneLabel("gateways"), "the edge is released")
	assert.Equal(t, "permissive", paMode("shop"), "shop relaxed no later than the reconcile that releases its edge")

	// Before istio-cni has released the edge's Pod (still marked
	// redirected, its namespace no longer ambient), the next reconcile must
	// not take it for meshed and cut over again.
	b.reconcile(t)
	assert.Equal(t, "permissive", paMode("shop"), "a Pod about to be released is not meshed")

	// istio-cni releases the edge's Pod: plaintext from now on, and shop
	// stays PERMISSIVE, saying why.
	gw := &corev1.Pod{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "gateways", Name: "gw"}, gw))
	gw.Annotations = nil
	require.NoError(t, admin.Update(ctx, gw))
	_, m = b.reconcile(t)
	assert.Equal(t, "permissive", paMode("shop"))
	c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMTLSCutover))
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonAwaitingEdge), c.Reason)
	assert.Contains(t, c.Message, "shop (edge gateways: Pod gw)")
}
