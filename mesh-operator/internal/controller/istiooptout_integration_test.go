//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// conditionWithReason is the condition of m whose reason is reason ("" none).
func conditionWithReason(m *v1alpha1.ServiceMesh, reason string) *metav1.Condition {
	for i := range m.Status.Conditions {
		if m.Status.Conditions[i].Reason == reason {
			return &m.Status.Conditions[i]
		}
	}
	return nil
}

// TestAdminIstioOptOutIntegration (issue 41 item 5): an admin's Istio
// opt-out on a namespace (istio-injection=disabled; istio.io/dataplane-mode=none
// in ambient), written with the admin's own field manager, is never
// replaced by the operator's enabled/ambient when the namespace asks for
// enrollment, nor deleted when it leaves; the ServiceMesh reports the
// namespace as opted out (a condition and a Warning event).
func TestAdminIstioOptOutIntegration(t *testing.T) {
	for _, tc := range []struct {
		dp         v1alpha1.DataPlane
		key, value string
	}{
		{v1alpha1.DataPlaneSidecar, labels.IstioInjection, "disabled"},
		{v1alpha1.DataPlaneAmbient, labels.IstioDataPlaneMode, "none"},
	} {
		t.Run(string(tc.dp), func(t *testing.T) {
			evs := &eventLog{r: events.NewFakeRecorder(1000)}
			b := startEnrollmentBed(t, "lic-optout-"+string(tc.dp), evs.r)
			ctx, admin := context.Background(), b.admin
			readyIstiod(t, admin)
			adminLabels := func(ns, body string) {
				t.Helper()
				require.NoError(t, admin.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
					client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{`+body+`}}}`)), client.FieldOwner("kubectl-label")))
			}
			nsLabels := func(ns string) map[string]string {
				t.Helper()
				n := &corev1.Namespace{}
				require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: ns}, n))
				return n.Labels
			}
			hasPA := func(ns string) bool {
				t.Helper()
				return meshPolicyExists(t, admin, ns, enroll.KindPeerAuthentication, enroll.PeerAuthenticationName)
			}
			optOut := fmt.Sprintf("%q:%q", tc.key, tc.value)

			// legacy asks for enrollment, and an admin opted it out of Istio.
			// shop asks, enrolled as usual; later the admin opts it out too.
			require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}}))
			adminLabels("legacy", fmt.Sprintf("%q:%q,%s", labels.Mesh, labels.MeshEnabled, optOut))
			require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
			require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
				Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: tc.dp}}))

			_, m := b.reconcile(t)
			require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
			_, m = b.reconcile(t)
			assert.Equal(t, tc.value, nsLabels("legacy")[tc.key], "the admin's opt-out stands")
			assert.NotContains(t, m.Status.EnrolledNamespaces, "legacy")
			assert.False(t, hasPA("legacy"), "an opted-out namespace gets none of the mesh's policies")
			assert.Empty(t, nsLabels("legacy")[labels.MeshState])
			assert.Contains(t, m.Status.EnrolledNamespaces, "shop")
			c := conditionWithReason(m, "NamespaceOptedOut")
			if assert.NotNil(t, c, "the ServiceMesh reports the opted-out namespace: %+v", m.Status.Conditions) {
				assert.Equal(t, metav1.ConditionTrue, c.Status)
				assert.Contains(t, c.Message, "legacy")
				assert.Contains(t, c.Message, tc.key+"="+tc.value)
			}
			assert.Equal(t, 1, evs.count("NamespaceOptedOut", "legacy"), "a Warning event names it")
			b.reconcile(t)
			assert.Equal(t, 1, evs.count("NamespaceOptedOut", "legacy"), "once, not every pass (the log counts every event so far)")

			// The admin opts an enrolled namespace out: it leaves, and the
			// admin's label is neither replaced nor deleted.
			adminLabels("shop", optOut)
			b.reconcile(t)
			_, m = b.reconcile(t)
			assert.Equal(t, tc.value, nsLabels("shop")[tc.key], "the admin's opt-out on an enrolled namespace stands")
			assert.NotContains(t, m.Status.EnrolledNamespaces, "shop")
			assert.Empty(t, nsLabels("shop")[labels.MeshState], "shop left the mesh")
			if c := conditionWithReason(m, "NamespaceOptedOut"); assert.NotNil(t, c) {
				assert.Contains(t, c.Message, "shop")
			}

			// legacy stops asking: it leaves (it never joined); the admin's label stays.
			require.NoError(t, admin.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}},
				client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, labels.Mesh))), client.FieldOwner("kubectl-label")))
			b.reconcile(t)
			_, m = b.reconcile(t)
			assert.Equal(t, tc.value, nsLabels("legacy")[tc.key], "leaving never deletes the admin's label")
			if c := conditionWithReason(m, "NamespaceOptedOut"); c != nil {
				assert.False(t, strings.Contains(c.Message, "legacy"), "legacy no longer asks: %s", c.Message)
			}
		})
	}
}

// meshPolicyExists: the operator's policy kind/name exists in ns.
func meshPolicyExists(t *testing.T, c client.Client, ns, kind, name string) bool {
	t.Helper()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind + "List"))
	require.NoError(t, c.List(context.Background(), list, client.InNamespace(ns)))
	for _, p := range list.Items {
		if p.Name == name {
			return true
		}
	}
	return false
}
