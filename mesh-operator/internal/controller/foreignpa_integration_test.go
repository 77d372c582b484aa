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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestForeignPeerAuthenticationIntegration (issue 40 item 6): a user's own
// namespace-wide PeerAuthentication beside mesh-mtls. Istio applies the
// oldest namespace-wide one, so while the user's is older its mode is in
// force: the operator must say so (MTLSCutover, a Warning event naming it)
// and never claim STRICT there (status, the mesh-mtls state label, the
// strict baseline), at every state the API server went through; it never
// edits or deletes the user's policy. A namespace-wide policy of the user's
// that is newer than mesh-mtls changes nothing.
func TestForeignPeerAuthenticationIntegration(t *testing.T) {
	evs := &eventLog{r: events.NewFakeRecorder(1000)}
	b := startEnrollmentBed(t, "lic-foreign-pa", evs.r)
	ctx, admin := context.Background(), b.admin
	readyIstiod(t, admin)
	userPA := func(namespace, name, mode string) *unstructured.Unstructured {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": mode}}}}
		u.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(enroll.KindPeerAuthentication))
		u.SetNamespace(namespace)
		u.SetName(name)
		require.NoError(t, admin.Create(ctx, u))
		return u
	}
	cutover := func(m *v1alpha1.ServiceMesh) *metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMTLSCutover))
		require.NotNil(t, c)
		return c
	}
	nsLabel := func(name string) string {
		t.Helper()
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, ns))
		return ns.Labels[labels.MeshMTLS]
	}

	// shop's workloads are captured: the operator's decision is STRICT. The
	// user's own PERMISSIVE policy was there first.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cache-0", Annotations: map[string]string{labels.IstioAmbientRedirection: "enabled"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
	require.NoError(t, admin.Create(ctx, p))
	theirs := userPA("shop", "default", "PERMISSIVE")

	log := startWorldLog(t, b.env.Config, transitionWatched...)
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient,
			Isolation: v1alpha1.IsolationStrict}}))
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase)
	c := cutover(m)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(v1alpha1.ReasonForeignPeerAuthentication), c.Reason)
	assert.Contains(t, c.Message, "PeerAuthentication shop/default (PERMISSIVE)")
	assert.Contains(t, m.Status.PermissiveNamespaces, "shop", "the mode in force is the user's PERMISSIVE")
	assert.Equal(t, "permissive", nsLabel("shop"))
	assert.Equal(t, 1, evs.count(string(v1alpha1.ReasonForeignPeerAuthentication), "shop/default"), "a Warning event names the user's policy")
	_, m = b.reconcile(t)
	assert.Equal(t, string(v1alpha1.ReasonForeignPeerAuthentication), cutover(m).Reason)
	assert.Equal(t, 1, evs.count(string(v1alpha1.ReasonForeignPeerAuthentication), "shop/default"), "reported once, not every pass")

	// The user's policy is left exactly as it was.
	now := &unstructured.Unstructured{}
	now.SetGroupVersionKind(theirs.GroupVersionKind())
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(theirs), now))
	assert.Equal(t, theirs.GetResourceVersion(), now.GetResourceVersion(), "the user's PeerAuthentication is never written")

	// The user removes theirs: the operator's STRICT is in force now.
	require.NoError(t, admin.Delete(ctx, theirs))
	_, m = b.reconcile(t)
	assert.Equal(t, string(v1alpha1.ReasonCutOver), cutover(m).Reason)
	assert.Equal(t, "strict", nsLabel("shop"))
	assert.NotContains(t, m.Status.PermissiveNamespaces, "shop")

	// A namespace-wide policy of the user's that is newer than mesh-mtls
	// is not the one Istio applies: nothing changes.
	userPA("shop", "zz-later", "PERMISSIVE")
	_, m = b.reconcile(t)
	assert.Equal(t, string(v1alpha1.ReasonCutOver), cutover(m).Reason)
	assert.Equal(t, "strict", nsLabel("shop"))

	// Judged at every state: while an older policy of the user's is in
	// force, nothing says STRICT and the allow-nothing baseline (which
	// would drop the plaintext the user's PERMISSIVE admits) is absent.
	v := &violations{t: t}
	states := log.replay(func(w *world) {
		// The user's default was created before the ServiceMesh: older
		// than mesh-mtls whenever both exist.
		f := w.get(gvrPeerAuths, "shop", theirs.GetName())
		if f == nil {
			return
		}
		if l := w.nsLabels("shop")[labels.MeshMTLS]; l == "strict" {
			v.add(w, "namespace shop is labelled mesh-mtls=strict while the user's %s (PERMISSIVE) is in force", f.GetName())
		}
		if w.get(gvrAuthzPolicies, "shop", enroll.BaselinePolicyName) != nil {
			v.add(w, "the allow-nothing baseline stands while the user's PERMISSIVE %s is in force", f.GetName())
		}
		if sm := w.get(gvrServiceMeshes, "", "cluster"); sm != nil {
			conds, _, _ := unstructured.NestedSlice(sm.Object, "status", "conditions")
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				if cm["type"] == string(v1alpha1.ConditionMTLSCutover) && cm["reason"] == string(v1alpha1.ReasonCutOver) {
					v.add(w, "MTLSCutover says CutOver while the user's %s is in force", f.GetName())
				}
			}
		}
	})
	v.assertNone(states)
}
