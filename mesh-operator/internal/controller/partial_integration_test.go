//go:build integration

package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestPartialEnrollmentIntegration (issue 15 item 9): a namespace's
// policies go on before its data-plane label, and when they cannot be
// applied (a same-named policy the operator does not own) the namespace is
// not left captured without configuration: the data-plane label never goes
// on, or is rolled back, and the conflict is reported. Every observed state
// is judged: a namespace never carries the operator's data-plane label
// without the operator's mesh-mtls.
func TestPartialEnrollmentIntegration(t *testing.T) {
	evs := &eventLog{r: events.NewFakeRecorder(1000)}
	b := startEnrollmentBed(t, "lic-partial", evs.r)
	ctx, admin := context.Background(), b.admin
	// reconcileErr runs a pass and returns what status says of its failed step.
	reconcileErr := func() (*v1alpha1.ServiceMesh, string) {
		t.Helper()
		_, m := b.reconcile(t)
		return m, failedStep(m)
	}
	nsLabels := func(name string) map[string]string {
		t.Helper()
		n := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, n))
		return n.Labels
	}
	foreignPA := func(namespace string) *unstructured.Unstructured {
		pa := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": "DISABLE"}}}}
		pa.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(enroll.KindPeerAuthentication))
		pa.SetNamespace(namespace)
		pa.SetName(enroll.PeerAuthenticationName)
		return pa
	}
	getPolicy := func(kind, namespace, name string) *unstructured.Unstructured {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind))
		err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u)
		if apierrors.IsNotFound(err) {
			return nil
		}
		require.NoError(t, err)
		return u
	}

	readyIstiod(t, admin)

	for _, n := range []string{"taken", "fine"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"team": "t"}}}))
	}
	require.NoError(t, admin.Create(ctx, foreignPA("taken")))
	log := startWorldLog(t, b.env.Config, transitionWatched...)
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient,
			EnrollNamespaces: []string{"taken", "fine"}}}))

	t.Run("a conflicting policy: the data-plane label never goes on; the conflict is reported", func(t *testing.T) {
		m, err := reconcileErr()
		require.NotEmpty(t, err)
		assert.Contains(t, err, "not owned by")
		l := nsLabels("taken")
		assert.NotContains(t, l, labels.IstioDataPlaneMode, "not captured without the operator's policies")
		assert.NotContains(t, l, labels.MeshState)
		assert.Equal(t, labels.MeshEnabled, l[labels.Mesh], "the request stays: it is what was asked for")
		assert.Nil(t, getPolicy(enroll.KindAuthorizationPolicy, "taken", enroll.IsolationPolicyName), "no half of the policy set")
		assert.Equal(t, "ambient", nsLabels("fine")[labels.IstioDataPlaneMode], "other namespaces are enrolled")
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionEnrollmentConflict))
		require.NotNil(t, c, "the conflict is a condition, not only an event")
		assert.Equal(t, metav1.ConditionTrue, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonPolicyConflict), c.Reason)
		assert.Contains(t, c.Message, "PeerAuthentication taken/mesh-mtls")
		assert.NotContains(t, m.Status.EnrolledNamespaces, "taken")
	})

	t.Run("a conflict appearing on an enrolled namespace rolls its data-plane label back", func(t *testing.T) {
		require.Equal(t, "ambient", nsLabels("fine")[labels.IstioDataPlaneMode])
		ours := getPolicy(enroll.KindPeerAuthentication, "fine", enroll.PeerAuthenticationName)
		require.NotNil(t, ours)
		require.NoError(t, admin.Delete(ctx, ours))
		require.NoError(t, admin.Create(ctx, foreignPA("fine")))
		m, err := reconcileErr()
		require.NotEmpty(t, err)
		l := nsLabels("fine")
		assert.NotContains(t, l, labels.IstioDataPlaneMode, "rolled back")
		assert.NotContains(t, l, labels.MeshState, "state labels gone: nothing they claimed is in place")
		assert.Equal(t, labels.MeshEnabled, l[labels.Mesh])
		assert.Equal(t, "t", l["team"])
		assert.Nil(t, getPolicy(enroll.KindAuthorizationPolicy, "fine", enroll.IsolationPolicyName))
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionEnrollmentConflict))
		require.NotNil(t, c)
		assert.Contains(t, c.Message, "PeerAuthentication fine/mesh-mtls")
		assert.GreaterOrEqual(t, evs.count("EnrollmentConflict", "fine"), 1)
	})

	t.Run("once the foreign policies are gone, both are enrolled and the condition clears", func(t *testing.T) {
		for _, n := range []string{"taken", "fine"} {
			require.NoError(t, admin.Delete(ctx, foreignPA(n)))
		}
		m, err := reconcileErr()
		require.Empty(t, err)
		assert.Equal(t, []string{"fine", "taken"}, m.Status.EnrolledNamespaces)
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionEnrollmentConflict))
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		for _, n := range []string{"taken", "fine"} {
			assert.Equal(t, "ambient", nsLabels(n)[labels.IstioDataPlaneMode], n)
			assert.Equal(t, labels.MeshStateEnrolled, nsLabels(n)[labels.MeshState], n)
		}
	})

	// The data-plane label is never put on a namespace that lacks the
	// operator's mesh-mtls. (The test itself removes mesh-mtls under a
	// labelled namespace once; the end state above shows the rollback.)
	v := &violations{t: t}
	had := map[string]bool{}
	states := log.replay(func(w *world) {
		for _, n := range []string{"taken", "fine"} {
			has := w.nsLabels(n)[labels.IstioDataPlaneMode] != ""
			pa := w.get(gvrPeerAuths, n, enroll.PeerAuthenticationName)
			if has && !had[n] && (pa == nil || metav1.GetControllerOf(pa) == nil) {
				v.add(w, "the data-plane label went on %s before the operator's mesh-mtls", n)
			}
			had[n] = has
		}
	})
	v.assertNone(states)
}
