//go:build integration

package controller

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// TestSidecarReleaseIntegration (issue 40 item 5): at teardown of a
// sidecar mesh the namespaces leave first, but their Pods keep the sidecar
// they were injected with until restarted, and that proxy needs istiod for
// its configuration and certificates. So the Istio stays (reported, with an
// event) until no such Pod runs; a failed Pod list holds it too. The test
// plays Sail with fakeSail.
func TestSidecarReleaseIntegration(t *testing.T) {
	evs := &eventLog{r: events.NewFakeRecorder(500)}
	b := startEnrollmentBed(t, "lic-sidecar-release", evs.r)
	ctx, admin := context.Background(), b.admin
	serveSailAPI(t, admin, b.root, b.discovery)
	fake := fakeSail{t: t, c: admin}
	istio := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(sail.KindIstio))
		if err := admin.Get(ctx, client.ObjectKey{Name: "default"}, u); err != nil {
			return nil
		}
		return u
	}
	always := corev1.ContainerRestartPolicyAlways
	pod := func(namespace, name string, how podmesh.How, l map[string]string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
		if how == podmesh.Sidecar {
			p.Spec.InitContainers = []corev1.Container{{Name: podmesh.ProxyContainer, Image: "example.invalid/proxyv2", RestartPolicy: &always}}
		}
		require.NoError(t, admin.Create(ctx, p))
		return p
	}
	reconciling := func(m *v1alpha1.ServiceMesh) *metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReconciling))
		require.NotNil(t, c)
		return c
	}

	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-app"}}))
	// A namespace the user has injected on their own: not ours to wait for.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "user-sidecar",
		Labels: map[string]string{labels.IstioInjection: "enabled"}}}))
	m := &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, DataPlane: v1alpha1.DataPlaneSidecar, EnrollNamespaces: []string{"sidecar-app"}}}
	require.NoError(t, admin.Create(ctx, m))
	b.reconcile(t)
	fake.sync(sail.KindIstio)
	_, m = b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
	ns := &corev1.Namespace{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "sidecar-app"}, ns))
	require.Equal(t, "enabled", ns.Labels[labels.IstioInjection])

	// Injected workloads, one Pod without a sidecar, a gateway that asks
	// for its proxy itself, and the user's own injected namespace.
	a := pod("sidecar-app", "a", podmesh.Sidecar, nil)
	pod("sidecar-app", "c", podmesh.Sidecar, nil)
	pod("sidecar-app", "plain", podmesh.None, nil)
	pod("sidecar-app", "gateway", podmesh.Sidecar, map[string]string{labels.IstioInject: "true"})
	pod("user-sidecar", "u", podmesh.Sidecar, nil)

	require.NoError(t, admin.Delete(ctx, m))
	_, m = b.reconcile(t)
	require.NotNil(t, m)
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "sidecar-app"}, ns))
	assert.Empty(t, ns.Labels[labels.IstioInjection], "the namespace left the mesh first")
	require.NotNil(t, istio())
	assert.Nil(t, istio().GetDeletionTimestamp(), "istiod stays while Pods of the namespace that left still run its sidecar")
	rc := reconciling(m)
	assert.Equal(t, string(v1alpha1.ReasonWaitingForSidecarRelease), rc.Reason)
	assert.Contains(t, rc.Message, "sidecar-app/a")
	assert.Contains(t, rc.Message, "sidecar-app/c")
	for _, not := range []string{"sidecar-app/plain", "sidecar-app/gateway", "user-sidecar/u"} {
		assert.NotContains(t, rc.Message, not)
	}
	waits := 0
	for _, e := range evs.drain() {
		if strings.Contains(e, " WaitingForSidecarRelease ") && strings.Contains(e, "sidecar-app/a") {
			waits++
		}
	}
	assert.Equal(t, 1, waits, "an event says why the teardown waits")

	// Unknown is not absent: a failed Pod list holds the Istio.
	b.operatorThrough(t, func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && req.URL.Path == "/api/v1/pods" {
				return nil, errors.New("injected: the Pod list fails")
			}
			return rt.RoundTrip(req)
		})
	})
	_, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
	require.Error(t, err)
	assert.Nil(t, istio().GetDeletionTimestamp(), "a failed Pod list holds istiod")
	b.operatorThrough(t)

	// One Pod restarted without its sidecar: the wait goes on for the other.
	require.NoError(t, admin.Delete(ctx, a, client.GracePeriodSeconds(0)))
	_, m = b.reconcile(t)
	rc = reconciling(m)
	assert.Equal(t, string(v1alpha1.ReasonWaitingForSidecarRelease), rc.Reason)
	assert.NotContains(t, rc.Message, "sidecar-app/a")
	assert.Contains(t, rc.Message, "sidecar-app/c")
	assert.Nil(t, istio().GetDeletionTimestamp())

	require.NoError(t, admin.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "sidecar-app", Name: "c"}}, client.GracePeriodSeconds(0)))
	for range 5 {
		fake.sync()
		if _, m = b.reconcile(t); m == nil {
			break
		}
	}
	assert.Nil(t, m, "the teardown finishes once no Pod that left runs a sidecar")
	assert.Nil(t, istio())
}
