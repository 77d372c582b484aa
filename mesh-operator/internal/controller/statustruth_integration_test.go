//go:build integration

package controller

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// Issue 40 item 4: the status says what the cluster is. Each test walks a
// change on a real API server and checks the status the reconcile wrote.

// setMeshSpec changes the singleton's spec.
func setMeshSpec(t *testing.T, admin client.Client, mutate func(*v1alpha1.ServiceMeshSpec)) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &v1alpha1.ServiceMesh{}
		if err := admin.Get(context.Background(), client.ObjectKey{Name: "cluster"}, m); err != nil {
			return err
		}
		mutate(&m.Spec)
		return admin.Update(context.Background(), m)
	}))
}

// conditionIn reads a condition of a ServiceMesh as the world log holds it.
func conditionIn(u *unstructured.Unstructured, typ v1alpha1.ConditionType) (status, reason string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == string(typ) {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			return s, r
		}
	}
	return "", ""
}

// TestCutoverStatusWhileNotReadyIntegration (a): with the control plane not
// Ready, a maintenance window and then a dataPlane migration relax the
// enrolled namespaces to PERMISSIVE in hold-only passes; MTLSCutover must
// stop saying CutOver. Judged at every status write: MTLSCutover=True only
// while every enrolled namespace's PeerAuthentication is STRICT, and never
// True next to a non-empty status.permissiveNamespaces.
func TestCutoverStatusWhileNotReadyIntegration(t *testing.T) {
	b := startEnrollmentBed(t, "lic-cutover-status", events.NewFakeRecorder(1000))
	ctx, admin, clock := context.Background(), b.admin, b.clock
	reconcile := func() *v1alpha1.ServiceMesh { t.Helper(); _, m := b.reconcile(t); return m }
	paMode := func(namespace string) string { t.Helper(); return meshMTLSMode(t, admin, namespace) }
	cutover := func(m *v1alpha1.ServiceMesh) metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMTLSCutover))
		require.NotNil(t, c)
		return *c
	}

	readyIstiod(t, admin)
	dep := &appsv1.Deployment{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "istio-system", Name: "istiod"}, dep))
	setAvailable := func(ok bool) {
		t.Helper()
		require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(dep), dep))
		st := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ok]
		n := map[bool]int32{true: 1}[ok]
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, AvailableReplicas: n, ReadyReplicas: n,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: st, Reason: "Test"}}}
		require.NoError(t, admin.Status().Update(ctx, dep))
	}
	always := corev1.ContainerRestartPolicyAlways
	for _, n := range []string{"pay", "shop"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
		require.NoError(t, admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "app", Labels: map[string]string{"app": "app"}},
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: podmesh.ProxyContainer, Image: "example.invalid/proxyv2", RestartPolicy: &always}},
				Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}))
	}
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar}}))
	m := reconcile()
	require.Equal(t, PhaseReady, m.Status.Phase)
	for _, n := range []string{"pay", "shop"} {
		require.Equal(t, "strict", paMode(n), n)
	}
	require.Equal(t, string(v1alpha1.ReasonCutOver), cutover(m).Reason)

	log := startWorldLog(t, b.env.Config, transitionWatched...)

	// The control plane fails; still STRICT everywhere, which the status says.
	setAvailable(false)
	m = reconcile()
	require.NotEqual(t, PhaseReady, m.Status.Phase)
	assert.Equal(t, string(v1alpha1.ReasonCutOver), cutover(m).Reason, "nothing relaxed yet")

	// A maintenance window relaxes them in a hold-only pass.
	until := metav1.NewTime(clock.Now().Add(time.Hour).Truncate(time.Second))
	setMeshSpec(t, admin, func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil = &until })
	m = reconcile()
	require.NotEqual(t, PhaseReady, m.Status.Phase)
	require.Equal(t, []string{"pay", "shop"}, m.Status.PermissiveNamespaces)
	c := cutover(m)
	assert.Equal(t, metav1.ConditionFalse, c.Status, c.Message)
	assert.Equal(t, string(v1alpha1.ReasonHeldPermissive), c.Reason)
	assert.Contains(t, c.Message, "pay (Maintenance), shop (Maintenance)")

	// The window ends while still not Ready: PERMISSIVE stays until Ready.
	clock.Advance(2 * time.Hour)
	m = reconcile()
	require.Equal(t, []string{"pay", "shop"}, m.Status.PermissiveNamespaces)
	c = cutover(m)
	assert.Equal(t, string(v1alpha1.ReasonHeldPermissive), c.Reason, c.Message)
	assert.Contains(t, c.Message, "pay (AwaitingReady), shop (AwaitingReady)")

	// Ready again: STRICT and CutOver return.
	setMeshSpec(t, admin, func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil = nil })
	setAvailable(true)
	m = reconcile()
	require.Equal(t, PhaseReady, m.Status.Phase)
	assert.Equal(t, "strict", paMode("pay"))
	assert.Equal(t, string(v1alpha1.ReasonCutOver), cutover(m).Reason)

	// A dataPlane migration started while the control plane is not Ready:
	// the hold-only pass relaxes both namespaces.
	setAvailable(false)
	reconcile()
	setMeshSpec(t, admin, func(s *v1alpha1.ServiceMeshSpec) { s.DataPlane = v1alpha1.DataPlaneAmbient })
	m = reconcile()
	require.NotEqual(t, PhaseReady, m.Status.Phase)
	require.Equal(t, []string{"pay", "shop"}, m.Status.PermissiveNamespaces)
	c = cutover(m)
	assert.Equal(t, metav1.ConditionFalse, c.Status, c.Message)
	assert.Equal(t, string(v1alpha1.ReasonHeldPermissive), c.Reason)
	assert.Contains(t, c.Message, "pay (Migrating), shop (Migrating)")

	v := &violations{t: t}
	states := log.replay(func(w *world) {
		sm := w.get(gvrServiceMeshes, "", "cluster")
		if sm == nil || rvOf(sm) != w.rv {
			return // the status is judged where it was written
		}
		status, reason := conditionIn(sm, v1alpha1.ConditionMTLSCutover)
		if status != string(metav1.ConditionTrue) {
			return
		}
		permissive, _, _ := unstructured.NestedStringSlice(sm.Object, "status", "permissiveNamespaces")
		if len(permissive) > 0 {
			v.add(w, "MTLSCutover=True/%s next to permissiveNamespaces %v", reason, permissive)
		}
		enrolled, _, _ := unstructured.NestedStringSlice(sm.Object, "status", "enrolledNamespaces")
		for _, n := range enrolled {
			if mode := w.paMode(n); mode != "STRICT" {
				v.add(w, "MTLSCutover=True/%s while %s is %s", reason, n, mode)
			}
		}
	})
	v.assertNone(states)
}

// sailBed is an enrollment bed with the Sail API served and the test
// playing the Sail controller.
func sailBed(t *testing.T, licenseID string) (*enrollmentBed, fakeSail) {
	t.Helper()
	b := startEnrollmentBed(t, licenseID, events.NewFakeRecorder(1000))
	serveSailAPI(t, b.admin, b.root, b.discovery)
	return b, fakeSail{t: t, c: b.admin}
}

func readSail(t *testing.T, c client.Client, kind string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sail.GVK(kind))
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: "default"}, u))
	return u
}

// TestAdoptOwnControlPlaneIntegration (b): a managed mesh switched to mode
// adopt while its own Istio is the only control plane. The operator keeps
// observing it (its readiness, its namespace and revision for enrollment),
// changes it no more, and says it is its own: not NoMeshFound.
func TestAdoptOwnControlPlaneIntegration(t *testing.T) {
	b, fake := sailBed(t, "lic-adopt-own")
	ctx, admin := context.Background(), b.admin
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, DataPlane: v1alpha1.DataPlaneSidecar}}))
	b.reconcile(t)
	fake.sync(sail.KindIstio)
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase)
	require.Equal(t, v1alpha1.ManagementManaged, m.Status.ControlPlane.Management)
	istio := readSail(t, admin, sail.KindIstio)
	require.True(t, metav1.IsControlledBy(istio, m))

	setMeshSpec(t, admin, func(s *v1alpha1.ServiceMeshSpec) { s.Mode = v1alpha1.ModeAdopt })
	_, m = b.reconcile(t)
	ready := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
	require.NotNil(t, ready)
	assert.Equal(t, PhaseReady, m.Status.Phase, "%s: %s", ready.Reason, ready.Message)
	assert.NotEqual(t, string(v1alpha1.ReasonNoMeshFound), ready.Reason)
	require.NotNil(t, m.Status.ControlPlane)
	version, _, _ := unstructured.NestedString(istio.Object, "spec", "version")
	assert.Equal(t, &v1alpha1.ControlPlaneStatus{Management: v1alpha1.ManagementManaged, Namespace: "istio-system", Revision: "default",
		Version: version, DataPlane: v1alpha1.DataPlaneSidecar, Resources: []string{"Istio/default"}},
		m.Status.ControlPlane)
	cpr := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionControlPlaneReady))
	require.NotNil(t, cpr)
	assert.Equal(t, metav1.ConditionTrue, cpr.Status)
	assert.Contains(t, cpr.Message, "the operator's own")
	assert.Equal(t, "sail", m.Status.Provider)

	// Mode adopt changes the control plane no more: a new version is not applied.
	rv := readSail(t, admin, sail.KindIstio).GetResourceVersion()
	setMeshSpec(t, admin, func(s *v1alpha1.ServiceMeshSpec) { s.Version = "1.31" })
	_, m = b.reconcile(t)
	assert.Equal(t, rv, readSail(t, admin, sail.KindIstio).GetResourceVersion(), "adopt never writes the control plane")
	assert.Equal(t, PhaseReady, m.Status.Phase)

	// Its readiness is still followed.
	u := readSail(t, admin, sail.KindIstio)
	u.Object["status"].(map[string]any)["conditions"] = []any{map[string]any{"type": "Ready", "status": "False", "reason": "Test"}}
	require.NoError(t, admin.Status().Update(ctx, u))
	_, m = b.reconcile(t)
	assert.Equal(t, PhaseProgressing, m.Status.Phase)
	assert.Equal(t, string(v1alpha1.ReasonIstioNotReady), meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady)).Reason)
}

// TestAdoptedAmbientNeedsCNIIntegration (c): mode adopt, dataPlane ambient,
// an adopted Sail Istio and ZTunnel Ready, but no istio-cni: not Ready,
// saying IstioCNI is missing. Then a DaemonSet istio-cni-node that is not
// ready, then ready; then a failing read of it is reported, not taken as
// absent (nor as ready).
func TestAdoptedAmbientNeedsCNIIntegration(t *testing.T) {
	b, fake := sailBed(t, "lic-adopt-cni")
	ctx, admin := context.Background(), b.admin
	for _, kind := range []string{sail.KindIstio, sail.KindZTunnel} {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"version": "v1.30.1", "namespace": "istio-user"}}}
		if kind == sail.KindZTunnel {
			u.Object["spec"] = map[string]any{"version": "v1.30.1", "namespace": "ztunnel"}
		}
		u.SetGroupVersionKind(sail.GVK(kind))
		u.SetName("default")
		require.NoError(t, admin.Create(ctx, u))
	}
	fake.sync(sail.KindIstio, sail.KindZTunnel)
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, DataPlane: v1alpha1.DataPlaneAmbient}}))
	ready := func(m *v1alpha1.ServiceMesh) metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		return *c
	}

	_, m := b.reconcile(t)
	c := ready(m)
	assert.NotEqual(t, PhaseReady, m.Status.Phase, "%s: %s", c.Reason, c.Message)
	assert.Equal(t, string(v1alpha1.ReasonIstioCNIMissing), c.Reason, c.Message)
	assert.Contains(t, c.Message, "istio-cni")
	assert.Contains(t, m.Status.ControlPlane.Resources, "IstioCNI/default")

	// An istio-cni DaemonSet installed beside the Sail mesh (Helm chart
	// cni in kube-system), one of its three Pods ready.
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "istio-cni-node"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "istio-cni-node"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "istio-cni-node"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "install-cni", Image: "docker.io/istio/install-cni:1.30.1"}}}}}}
	require.NoError(t, admin.Create(ctx, ds))
	setNodes := func(readyPods int32) {
		t.Helper()
		require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(ds), ds))
		ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3,
			UpdatedNumberScheduled: 3, NumberReady: readyPods, NumberAvailable: readyPods}
		require.NoError(t, admin.Status().Update(ctx, ds))
	}
	setNodes(1)
	_, m = b.reconcile(t)
	c = ready(m)
	assert.NotEqual(t, PhaseReady, m.Status.Phase)
	assert.Equal(t, string(v1alpha1.ReasonIstioCNINotReady), c.Reason, c.Message)
	assert.Contains(t, c.Message, "kube-system/istio-cni-node")

	setNodes(3)
	_, m = b.reconcile(t)
	c = ready(m)
	assert.Equal(t, PhaseReady, m.Status.Phase, "%s: %s", c.Reason, c.Message)

	// A read of the DaemonSet that fails is reported; it is not taken as
	// absent, and the mesh is not called Ready on it.
	b.operatorThrough(t, func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/daemonsets/istio-cni-node") {
				body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected: etcdserver: request timed out","reason":"InternalError","code":500}`
				return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
			}
			return rt.RoundTrip(req)
		})
	})
	_, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
	require.NoError(t, err, "a failed read is reported in status, not returned")
	m = &v1alpha1.ServiceMesh{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
	c = ready(m)
	assert.Equal(t, PhaseError, m.Status.Phase, "%s: %s", c.Reason, c.Message)
	assert.Contains(t, c.Message, "istio-cni-node")
	assert.False(t, slices.Contains([]string{string(v1alpha1.ReasonIstioCNIMissing), string(v1alpha1.ReasonControlPlaneReady)}, c.Reason), c.Reason)

	// With a Ready Sail IstioCNI the DaemonSets are not read at all.
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"version": "v1.30.1", "namespace": "istio-cni"}}}
	u.SetGroupVersionKind(sail.GVK(sail.KindIstioCNI))
	u.SetName("default")
	require.NoError(t, admin.Create(ctx, u))
	fake.sync(sail.KindIstio, sail.KindZTunnel, sail.KindIstioCNI)
	_, err = b.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
	require.NoError(t, err)
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
	c = ready(m)
	assert.Equal(t, PhaseReady, m.Status.Phase, "%s: %s", c.Reason, c.Message)
}
