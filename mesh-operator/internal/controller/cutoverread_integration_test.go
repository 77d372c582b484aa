//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestCutoverSeesPodCreatedJustBeforeLabel: the cutover reads the Pods from
// a state bounded by the namespace's label apply rather than the newest
// revision (issue #20). A Pod created the moment before the data-plane
// label lands was admitted without it, is not captured, and must hold
// STRICT back; once it is captured, STRICT follows.
func TestCutoverSeesPodCreatedJustBeforeLabel(t *testing.T) {
	b := startEnrollmentBed(t, "lic-cutover-read", events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	readyIstiod(t, admin)
	const ns = "team-late"
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))

	late := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
	b.operatorThrough(t, createBeforeLabelApply(t, admin, late))

	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient}}))
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase)
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(late), &corev1.Pod{}), "the Pod was created during the pass")
	assert.Equal(t, contract.MTLSPermissive, meshMTLSMode(t, admin, ns), "a Pod admitted before the data-plane label holds STRICT back")
	nsObj := &corev1.Namespace{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: ns}, nsObj))
	assert.Equal(t, contract.MTLSPermissive, nsObj.Labels[labels.MeshMTLS])

	// Captured now (what a restart under the label would do): STRICT.
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(late), late))
	late.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"}
	require.NoError(t, admin.Update(ctx, late))
	b.reconcile(t)
	assert.Equal(t, contract.MTLSStrict, meshMTLSMode(t, admin, ns), "once the Pod is captured the namespace cuts over")
}
