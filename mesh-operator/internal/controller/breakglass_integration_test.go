//go:build integration

package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// istiodAvailable reads the adopted istiod's availability from the world:
// the ground truth of "the control plane is Ready" for these tests.
func istiodAvailable(w *world, namespace, name string) bool {
	u := w.get(gvrDeployments, namespace, name)
	if u == nil {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == string(appsv1.DeploymentAvailable) && m["status"] == string(corev1.ConditionTrue) {
			return true
		}
	}
	return false
}

// TestBreakGlassWhileNotReadyIntegration (issue 15 item 6): with the
// control plane unhealthy, a maintenance window and mtls.mode permissive
// still relax enrolled namespaces to PERMISSIVE; only tightening waits for
// Ready. Every state the API server went through is judged: no namespace is
// tightened while istiod is unavailable, and a namespace at PERMISSIVE
// admits plaintext (isolation strict's baseline never outlives STRICT).
func TestBreakGlassWhileNotReadyIntegration(t *testing.T) {
	b := startEnrollmentBed(t, "lic-breakglass", events.NewFakeRecorder(1000))
	ctx, admin, clock := context.Background(), b.admin, b.clock
	reconcile := func() *v1alpha1.ServiceMesh { t.Helper(); _, m := b.reconcile(t); return m }
	setSpec := func(mutate func(*v1alpha1.ServiceMeshSpec)) {
		t.Helper()
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m := &v1alpha1.ServiceMesh{}
			if err := admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m); err != nil {
				return err
			}
			mutate(&m.Spec)
			return admin.Update(ctx, m)
		}))
	}
	paMode := func(namespace string) string { t.Helper(); return meshMTLSMode(t, admin, namespace) }

	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod", Labels: map[string]string{"app": "istiod"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "istiod"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.30.1"}}}}}}
	require.NoError(t, admin.Create(ctx, dep))
	setAvailable := func(ok bool) {
		t.Helper()
		require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(dep), dep))
		st := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ok]
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, AvailableReplicas: map[bool]int32{true: 1}[ok], ReadyReplicas: map[bool]int32{true: 1}[ok],
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: st, Reason: "Test"}}}
		require.NoError(t, admin.Status().Update(ctx, dep))
	}
	setAvailable(true)

	always := corev1.ContainerRestartPolicyAlways
	for _, n := range []string{"pay", "shop"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
		require.NoError(t, admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "app", Labels: map[string]string{"app": "app"}},
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: podmesh.ProxyContainer, Image: "example.invalid/proxyv2", RestartPolicy: &always}},
				Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}))
	}
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar,
			Isolation: v1alpha1.IsolationStrict}}))
	m := reconcile()
	require.Equal(t, PhaseReady, m.Status.Phase)
	for _, n := range []string{"pay", "shop"} {
		require.Equal(t, "strict", paMode(n), n)
	}

	log := startWorldLog(t, b.env.Config, transitionWatched...)

	// The control plane fails; someone needs plaintext into pay for debugging.
	setAvailable(false)
	m = reconcile()
	require.NotEqual(t, PhaseReady, m.Status.Phase)
	require.NoError(t, admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pay", Name: "debug"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "curl", Image: "example.invalid/curl"}}}}))

	until := metav1.NewTime(clock.Now().Add(time.Hour).Truncate(time.Second))
	setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil = &until })
	m = reconcile()
	require.NotEqual(t, PhaseReady, m.Status.Phase, "still not Ready")
	for _, n := range []string{"pay", "shop"} {
		assert.Equal(t, "permissive", paMode(n), "%s: the window relaxes even while the control plane is not Ready", n)
	}
	c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMaintenanceWindow))
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonWindowOpen), c.Reason)
	assert.Equal(t, []string{"pay", "shop"}, m.Status.PermissiveNamespaces)

	// The window is closed early and mtls.mode permissive takes over: still relaxed.
	setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil, s.MTLS.Mode = nil, v1alpha1.MTLSPermissive })
	m = reconcile()
	assert.Equal(t, "permissive", paMode("pay"))
	assert.Equal(t, []string{"pay", "shop"}, m.Status.PermissiveNamespaces)
	assert.Equal(t, string(v1alpha1.ReasonNoWindow), meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMaintenanceWindow)).Reason)

	// Back to strict while the control plane is still not Ready: tightening waits.
	setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.Mode = v1alpha1.MTLSStrict })
	clock.Advance(2 * time.Hour)
	m = reconcile()
	require.NotEqual(t, PhaseReady, m.Status.Phase)
	assert.Equal(t, []string{"pay", "shop"}, m.Status.PermissiveNamespaces)
	for _, n := range []string{"pay", "shop"} {
		assert.Equal(t, "permissive", paMode(n), "%s: not tightened before Ready", n)
	}
	require.NoError(t, admin.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "pay", Name: "debug"}}, client.GracePeriodSeconds(0)))

	// Ready again: STRICT returns where the workloads had cut over.
	setAvailable(true)
	m = reconcile()
	require.Equal(t, PhaseReady, m.Status.Phase)
	for _, n := range []string{"pay", "shop"} {
		assert.Equal(t, "strict", paMode(n), n)
	}

	v := &violations{t: t}
	prev := map[string]string{}
	states := log.replay(func(w *world) {
		ready := istiodAvailable(w, "istio-system", "istiod")
		for _, n := range []string{"pay", "shop"} {
			mode := w.paMode(n)
			if mode == "STRICT" && prev[n] == "PERMISSIVE" && !ready {
				v.add(w, "%s tightened to STRICT while istiod is not Available", n)
			}
			prev[n] = mode
			if mode != "PERMISSIVE" {
				continue
			}
			// At PERMISSIVE every Pod of the namespace, meshed or not,
			// reaches the app: the baseline went before the PeerAuthentication relaxed.
			for _, p := range w.pods(n) {
				if d := w.judge(n, map[string]string{"app": "app"}, caller(&p, podmesh.DataPlaneSidecar, 8080)); !d.Allowed {
					v.add(w, "%s is PERMISSIVE but Pod %s cannot reach the app: %s", n, p.Name, d.Why)
				}
			}
			if d := w.judge(n, map[string]string{"app": "app"}, authzeval.Request{Port: 8080}); !d.Allowed {
				v.add(w, "%s is PERMISSIVE but drops plaintext: %s", n, d.Why)
			}
		}
	})
	v.assertNone(states)
}
