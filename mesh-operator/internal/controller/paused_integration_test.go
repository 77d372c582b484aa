//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestReconcilePausedIntegration: core.navique.com/reconcile-paused holds
// the operator's reverts on every object it manages, not only on the
// policies: its Sail resources and the labels it owns on an enrolled
// namespace. Removing the annotation hands the object back.
func TestReconcilePausedIntegration(t *testing.T) {
	b := startEnrollmentBed(t, "lic-paused", events.NewFakeRecorder(500))
	ctx, admin := context.Background(), b.admin
	serveSailAPI(t, admin, b.root, b.discovery)
	fake := fakeSail{t: t, c: admin}
	istio := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(sail.KindIstio))
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: sail.IstioName}, u))
		return u
	}
	patch := func(obj client.Object, p string) {
		t.Helper()
		require.NoError(t, admin.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(p))))
	}
	nsLabels := func() map[string]string {
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "paused-app"}, ns))
		return ns.Labels
	}
	appNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "paused-app"}}
	require.NoError(t, admin.Create(ctx, appNS))
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, Version: "1.30", DataPlane: v1alpha1.DataPlaneSidecar, EnrollNamespaces: []string{"paused-app"}}}))
	b.reconcile(t)
	fake.sync(sail.KindIstio)
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
	require.Equal(t, "enabled", nsLabels()[labels.IstioInjection])

	t.Run("a paused Istio is not reverted, and is listed", func(t *testing.T) {
		u := istio()
		patch(u, `{"metadata":{"annotations":{"`+labels.ReconcilePaused+`":"true"}},"spec":{"version":"v1.29.0"}}`)
		fake.sync(sail.KindIstio)
		_, m := b.reconcile(t)
		assert.Equal(t, "v1.29.0", istio().Object["spec"].(map[string]any)["version"], "a paused Istio keeps the hand edit")
		assert.Contains(t, m.Status.PausedObjects, "Istio/default")
		// Still judged: readiness is read from it.
		assert.Equal(t, PhaseReady, m.Status.Phase)

		patch(u, `{"metadata":{"annotations":{"`+labels.ReconcilePaused+`":null}}}`)
		_, m = b.reconcile(t)
		assert.Equal(t, "v1.30-latest", istio().Object["spec"].(map[string]any)["version"], "handed back: reverted")
		assert.NotContains(t, m.Status.PausedObjects, "Istio/default")
	})

	t.Run("a paused namespace keeps hand edits of the labels the operator owns, and is listed", func(t *testing.T) {
		// (Not istio-injection=disabled: that is an admin's opt-out, which
		// the operator never replaces, paused or not.)
		patch(appNS, `{"metadata":{"annotations":{"`+labels.ReconcilePaused+`":"true"},"labels":{"`+labels.MeshIsolation+`":"off"}}}`)
		fake.sync(sail.KindIstio)
		_, m := b.reconcile(t)
		assert.Equal(t, "off", nsLabels()[labels.MeshIsolation], "a paused namespace keeps the hand edit")
		assert.Contains(t, m.Status.PausedObjects, "Namespace/paused-app")

		patch(appNS, `{"metadata":{"annotations":{"`+labels.ReconcilePaused+`":null}}}`)
		_, m = b.reconcile(t)
		assert.Equal(t, "namespace", nsLabels()[labels.MeshIsolation], "handed back: reverted")
		assert.NotContains(t, m.Status.PausedObjects, "Namespace/paused-app")
	})

	t.Run("a paused ZTunnel is not removed when the data plane no longer needs it", func(t *testing.T) {
		setDataPlane := func(dp v1alpha1.DataPlane) {
			t.Helper()
			m := &v1alpha1.ServiceMesh{}
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
			m.Spec.DataPlane = dp
			require.NoError(t, admin.Update(ctx, m))
		}
		ztunnel := func() *unstructured.Unstructured {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(sail.GVK(sail.KindZTunnel))
			if err := admin.Get(ctx, client.ObjectKey{Name: sail.ZTunnelName}, u); err != nil {
				return nil
			}
			return u
		}
		setDataPlane(v1alpha1.DataPlaneAmbient)
		b.reconcile(t)
		z := ztunnel()
		require.NotNil(t, z, "ambient creates the ZTunnel")
		patch(z, `{"metadata":{"annotations":{"`+labels.ReconcilePaused+`":"true"}}}`)
		setDataPlane(v1alpha1.DataPlaneSidecar)
		fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel)
		_, m := b.reconcile(t)
		z = ztunnel()
		require.NotNil(t, z)
		assert.Nil(t, z.GetDeletionTimestamp(), "a paused ZTunnel stays")
		assert.Contains(t, m.Status.PausedObjects, "ZTunnel/default")

		patch(z, `{"metadata":{"annotations":{"`+labels.ReconcilePaused+`":null}}}`)
		b.reconcile(t)
		z = ztunnel()
		assert.True(t, z == nil || z.GetDeletionTimestamp() != nil, "handed back: removed")
	})
}
