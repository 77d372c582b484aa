//go:build integration

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestCNIReleaseIntegration: at teardown of an ambient mesh, ZTunnel and
// IstioCNI stay until istio-cni has released every Pod of the namespaces
// that left the mesh (annotation ambient.istio.io/redirection gone), with
// the wait reported and bounded. The test plays istio-cni by editing the
// annotation, and Sail with fakeSail.
func TestCNIReleaseIntegration(t *testing.T) {
	evs := &eventLog{r: events.NewFakeRecorder(500)}
	b := startEnrollmentBed(t, "lic-cni-release", evs.r)
	ctx, admin := context.Background(), b.admin
	serveSailAPI(t, admin, b.root, b.discovery)
	fake := fakeSail{t: t, c: admin}
	getSail := func(kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(kind))
		if err := admin.Get(ctx, client.ObjectKey{Name: "default"}, u); err != nil {
			return nil
		}
		return u
	}
	redirected := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ambient-app", Name: name,
			Annotations: map[string]string{labels.IstioAmbientRedirection: "enabled"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
	}
	release := func(p *corev1.Pod) {
		t.Helper()
		patch := []byte(`{"metadata":{"annotations":{"` + labels.IstioAmbientRedirection + `":null}}}`)
		require.NoError(t, admin.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)))
	}

	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ambient-app"}}))
	// A namespace the user put in ambient mode on their own: not ours to wait for.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "user-ambient",
		Labels: map[string]string{labels.IstioDataPlaneMode: "ambient"}}}))
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, DataPlane: v1alpha1.DataPlaneAmbient, EnrollNamespaces: []string{"ambient-app"}}}))
	b.reconcile(t)
	fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel)
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
	ns := &corev1.Namespace{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "ambient-app"}, ns))
	require.Equal(t, "ambient", ns.Labels[labels.IstioDataPlaneMode])

	// istio-cni captured the namespace's Pods.
	a, c := redirected("a"), redirected("c")
	require.NoError(t, admin.Create(ctx, a))
	require.NoError(t, admin.Create(ctx, c))
	u := redirected("u")
	u.Namespace = "user-ambient"
	require.NoError(t, admin.Create(ctx, u))

	require.NoError(t, admin.Delete(ctx, m))
	_, m = b.reconcile(t)
	require.NotNil(t, m)
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "ambient-app"}, ns))
	assert.Empty(t, ns.Labels[labels.IstioDataPlaneMode], "the namespace left the mesh first")
	for _, kind := range []string{sail.KindZTunnel, sail.KindIstioCNI} {
		z := getSail(kind)
		require.NotNil(t, z, kind)
		assert.Nil(t, z.GetDeletionTimestamp(), "%s stays while istio-cni still redirects Pods", kind)
	}
	rc := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReconciling))
	require.NotNil(t, rc)
	assert.Equal(t, string(v1alpha1.ReasonWaitingForCNIRelease), rc.Reason)
	assert.Contains(t, rc.Message, "ambient-app/a")
	assert.Contains(t, rc.Message, "ambient-app/c")
	assert.NotContains(t, rc.Message, "user-ambient/u", "a namespace still asking for ambient is not waited for")

	// istio-cni releases one Pod: the wait goes on for the other.
	release(a)
	fake.sync()
	_, m = b.reconcile(t)
	rc = meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReconciling))
	require.NotNil(t, rc)
	assert.Equal(t, string(v1alpha1.ReasonWaitingForCNIRelease), rc.Reason)
	assert.NotContains(t, rc.Message, "ambient-app/a")
	assert.Contains(t, rc.Message, "ambient-app/c")
	assert.Nil(t, getSail(sail.KindZTunnel).GetDeletionTimestamp())

	// The wait is bounded: past it the teardown goes on, with a warning.
	// (The deletion time is the API server's; the reconciler's clock is the test's.)
	b.clock.Advance(m.DeletionTimestamp.Add(DefaultCNIReleaseTimeout).Sub(b.clock.Now()) + time.Second)
	_, m = b.reconcile(t)
	require.NotNil(t, m)
	for _, kind := range []string{sail.KindZTunnel, sail.KindIstioCNI} {
		z := getSail(kind)
		assert.True(t, z == nil || z.GetDeletionTimestamp() != nil, "%s deleted after the bound", kind)
	}
	timedOut := 0
	for _, e := range evs.drain() {
		if strings.Contains(e, " CNIReleaseTimedOut ") && strings.Contains(e, "ambient-app/c") {
			timedOut++
		}
	}
	assert.Equal(t, 1, timedOut)
	for range 5 {
		fake.sync()
		if _, m = b.reconcile(t); m == nil {
			break
		}
	}
	assert.Nil(t, m, "the teardown finishes")
}
