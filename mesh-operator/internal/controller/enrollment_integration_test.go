//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/metrics"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/served"
)

// fakeClock is the reconciler's controllable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestEnrollmentIntegration runs the enrollment against a real API server
// with Istio's own CRDs, the operator acting under its generated RBAC, and
// an adopted plain istiod as the control plane.
func TestEnrollmentIntegration(t *testing.T) {
	b := startEnrollmentBed(t, "lic-enroll", events.NewFakeRecorder(100))
	ctx, admin, r, clock, s, asOperator, dc := context.Background(), b.admin, b.r, b.clock, b.scheme, b.asOperator, b.discovery
	secret, lic := b.license, b.license.Data["license"]
	reconcile := func() (ctrl.Result, *v1alpha1.ServiceMesh) { t.Helper(); return b.reconcile(t) }
	ns := func(name string) *corev1.Namespace {
		t.Helper()
		n := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, n))
		return n
	}
	createNS := func(name string, l map[string]string) {
		t.Helper()
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}))
	}
	labelNS := func(name, key string, value *string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
		require.NoError(t, admin.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch)))
	}
	policy := func(kind, namespace string) *unstructured.Unstructured {
		t.Helper()
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind))
		name := enroll.PeerAuthenticationName
		if kind == enroll.KindAuthorizationPolicy {
			name = enroll.IsolationPolicyName
		}
		err := admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u)
		if apierrors.IsNotFound(err) {
			return nil
		}
		require.NoError(t, err)
		return u
	}
	paMode := func(namespace string) string {
		t.Helper()
		u := policy(enroll.KindPeerAuthentication, namespace)
		if u == nil {
			return ""
		}
		m, _, _ := unstructured.NestedString(u.Object, "spec", "mtls", "mode")
		return m
	}
	notNamespaces := func(namespace string) []any {
		t.Helper()
		u := policy(enroll.KindAuthorizationPolicy, namespace)
		require.NotNil(t, u)
		rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
		src := rules[0].(map[string]any)["from"].([]any)[0].(map[string]any)["source"].(map[string]any)
		assert.Equal(t, []any{"*"}, src["principals"], "only authenticated sources are matched")
		assert.Equal(t, "DENY", u.Object["spec"].(map[string]any)["action"])
		return src["notNamespaces"].([]any)
	}
	meshLabels := func(name string) map[string]string {
		out := map[string]string{}
		for k, v := range ns(name).Labels {
			if k != labels.NamespaceName {
				out[k] = v
			}
		}
		return out
	}
	createPod := func(namespace, name string, proxy bool) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
		if proxy {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: enroll.ProxyContainer, Image: "example.invalid/proxyv2", RestartPolicy: &always}}
		}
		require.NoError(t, admin.Create(ctx, p))
	}
	deletePod := func(namespace, name string) {
		t.Helper()
		zero := int64(0)
		require.NoError(t, admin.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, &client.DeleteOptions{GracePeriodSeconds: &zero}))
		eventually(t, 10*time.Second, "pod gone", func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &corev1.Pod{}))
		})
	}
	setSpec := func(mutate func(*v1alpha1.ServiceMeshSpec)) {
		t.Helper()
		// The manager subtest writes the ServiceMesh concurrently.
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m := &v1alpha1.ServiceMesh{}
			if err := admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m); err != nil {
				return err
			}
			mutate(&m.Spec)
			return admin.Update(ctx, m)
		}))
	}
	str := func(s string) *string { return &s }

	// The namespaces, before any ServiceMesh: every enrollment source, an
	// opt-out, protected namespaces, and a user's own labels.
	createNS("by-label", map[string]string{labels.Mesh: labels.MeshEnabled})
	createNS("by-spec", map[string]string{"team": "payments"})
	createNS("opted-out", map[string]string{labels.Mesh: labels.MeshDisabled})
	createNS("plain", nil)
	createNS("user-injected", map[string]string{labels.Mesh: labels.MeshEnabled, labels.IstioInjection: "enabled"})
	createNS("istio-system", nil)
	createPod("by-spec", "legacy", false)

	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod", Labels: map[string]string{"app": "istiod"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "istiod"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.30.1"}}}}}}
	require.NoError(t, admin.Create(ctx, dep))
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar,
			EnrollNamespaces: []string{"by-spec", "opted-out", "kube-system", "istio-system", "mesh-system"}}}))

	t.Run("nothing is enrolled and nothing is STRICT before the control plane is Ready", func(t *testing.T) {
		_, m := reconcile()
		assert.NotEqual(t, PhaseReady, m.Status.Phase)
		for _, n := range []string{"by-label", "by-spec", "user-injected"} {
			assert.Nil(t, policy(enroll.KindPeerAuthentication, n), n)
			assert.Empty(t, ns(n).Labels[labels.MeshState], n)
		}
		assert.Empty(t, ns("by-spec").Labels[labels.Mesh], "not even the request is written yet")
		assert.Empty(t, m.Status.EnrolledNamespaces)
		assert.Empty(t, m.Finalizers)
	})

	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, AvailableReplicas: 1, ReadyReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
	require.NoError(t, admin.Status().Update(ctx, dep))

	t.Run("enrollment from each source; opt-out and protected namespaces are left alone; cutover withheld", func(t *testing.T) {
		res, m := reconcile()
		require.Equal(t, PhaseReady, m.Status.Phase)
		assert.Equal(t, []string{"by-label", "by-spec", "user-injected"}, m.Status.EnrolledNamespaces)
		assert.Contains(t, m.Finalizers, EnrollFinalizer)
		assert.True(t, sawEvent(r.Recorder.(*events.FakeRecorder), "NamespaceEnrolled"))

		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshEnabled, labels.IstioInjection: "enabled",
			labels.MeshState: "enrolled", labels.MeshDataPlane: "sidecar", labels.MeshMTLS: "strict",
			labels.MeshIsolation: "namespace", labels.MeshControlPlane: "istio-system"}, meshLabels("by-label"), "no Pods: STRICT at once")
		assert.Equal(t, "STRICT", paMode("by-label"))
		assert.Equal(t, []any{"by-label", "istio-system"}, notNamespaces("by-label"))

		// by-spec: the operator writes the request itself; a Pod without a proxy holds PERMISSIVE.
		l := meshLabels("by-spec")
		assert.Equal(t, labels.MeshEnabled, l[labels.Mesh])
		assert.Equal(t, "payments", l["team"])
		assert.Equal(t, "permissive", l[labels.MeshMTLS])
		assert.Equal(t, "PERMISSIVE", paMode("by-spec"))
		assert.Empty(t, policy(enroll.KindPeerAuthentication, "by-spec").GetAnnotations()[labels.MeshStrictReady])
		assert.Equal(t, []string{"by-spec"}, m.Status.PermissiveNamespaces)
		assert.LessOrEqual(t, res.RequeueAfter, convergingRecheck, "the cutover is polled")
		st, problems := contract.Parse(ns("by-spec").Labels)
		assert.Empty(t, problems)
		assert.True(t, st.Enrolled)

		for _, n := range []string{"opted-out", "plain", "kube-system", "istio-system", "mesh-system"} {
			l := ns(n).Labels
			assert.Empty(t, l[labels.MeshState], n)
			assert.Empty(t, l[labels.IstioInjection], n)
			assert.Nil(t, policy(enroll.KindPeerAuthentication, n), n)
			assert.Nil(t, policy(enroll.KindAuthorizationPolicy, n), n)
		}
		assert.Equal(t, labels.MeshDisabled, ns("opted-out").Labels[labels.Mesh], "disabled wins over enrollNamespaces")
		assert.Empty(t, ns("kube-system").Labels[labels.Mesh])

		ref := metav1.GetControllerOf(policy(enroll.KindAuthorizationPolicy, "by-spec"))
		require.NotNil(t, ref)
		assert.Equal(t, m.UID, ref.UID)

		// A settled reconcile writes nothing.
		rv := ns("by-label").ResourceVersion
		parv := policy(enroll.KindPeerAuthentication, "by-label").GetResourceVersion()
		reconcile()
		assert.Equal(t, rv, ns("by-label").ResourceVersion)
		assert.Equal(t, parv, policy(enroll.KindPeerAuthentication, "by-label").GetResourceVersion())
	})

	t.Run("cutover: PERMISSIVE until every Pod runs a proxy, then STRICT, and STRICT stays", func(t *testing.T) {
		createPod("by-spec", "meshed", true)
		_, m := reconcile()
		assert.Equal(t, "PERMISSIVE", paMode("by-spec"), "one Pod still has no proxy")
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMTLSCutover))
		require.NotNil(t, c)
		assert.Equal(t, string(v1alpha1.ReasonAwaitingCutover), c.Reason)
		assert.Contains(t, c.Message, "by-spec (Pod legacy)")
		deletePod("by-spec", "legacy")
		res, m := reconcile()
		assert.Equal(t, "STRICT", paMode("by-spec"))
		assert.True(t, meta.IsStatusConditionTrue(m.Status.Conditions, string(v1alpha1.ConditionMTLSCutover)))
		assert.Equal(t, "strict", ns("by-spec").Labels[labels.MeshMTLS], "the label follows the policy")
		assert.NotEmpty(t, policy(enroll.KindPeerAuthentication, "by-spec").GetAnnotations()[labels.MeshStrictReady])
		assert.Empty(t, m.Status.PermissiveNamespaces)
		assert.Equal(t, settledRecheck, res.RequeueAfter)

		createPod("by-spec", "late", false)
		reconcile()
		assert.Equal(t, "STRICT", paMode("by-spec"), "a new plaintext Pod cannot downgrade a namespace that cut over")
	})

	t.Run("declared edges are admitted by the isolation policy", func(t *testing.T) {
		labelNS("by-label", labels.AllowFromPrefix+"fleet-system", str("true"))
		reconcile()
		assert.Equal(t, []any{"by-label", "fleet-system", "istio-system"}, notNamespaces("by-label"))
		labelNS("by-label", labels.AllowFromPrefix+"fleet-system", nil)
		reconcile()
		assert.Equal(t, []any{"by-label", "istio-system"}, notNamespaces("by-label"))
	})

	t.Run("hand edits are reverted; a paused object is left alone and listed", func(t *testing.T) {
		require.NoError(t, admin.Patch(ctx, policy(enroll.KindPeerAuthentication, "by-label"),
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mtls":{"mode":"DISABLE"}}}`))))
		reconcile()
		assert.Equal(t, "STRICT", paMode("by-label"))

		require.NoError(t, admin.Patch(ctx, policy(enroll.KindAuthorizationPolicy, "by-label"), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"core.navique.com/reconcile-paused":"true"}},"spec":{"action":"AUDIT"}}`))))
		require.NoError(t, admin.Patch(ctx, policy(enroll.KindPeerAuthentication, "by-label"),
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mtls":{"mode":"PERMISSIVE"}}}`))))
		_, m := reconcile()
		assert.Equal(t, "AUDIT", policy(enroll.KindAuthorizationPolicy, "by-label").Object["spec"].(map[string]any)["action"], "paused: kept")
		assert.Equal(t, "STRICT", paMode("by-label"), "only the paused object is paused")
		assert.Equal(t, []string{"AuthorizationPolicy/by-label/mesh-isolation"}, m.Status.PausedObjects)

		require.NoError(t, admin.Patch(ctx, policy(enroll.KindAuthorizationPolicy, "by-label"), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"core.navique.com/reconcile-paused":null}}}`))))
		_, m = reconcile()
		assert.Equal(t, "DENY", policy(enroll.KindAuthorizationPolicy, "by-label").Object["spec"].(map[string]any)["action"])
		assert.Empty(t, m.Status.PausedObjects)
	})

	t.Run("maintenance window: PERMISSIVE until the deadline, STRICT again on the requeue alone", func(t *testing.T) {
		until := metav1.NewTime(clock.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second))
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil = &until })
		res, m := reconcile()
		for _, n := range []string{"by-label", "by-spec", "user-injected"} {
			assert.Equal(t, "PERMISSIVE", paMode(n), n)
			assert.Equal(t, "permissive", ns(n).Labels[labels.MeshMTLS], n)
		}
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMaintenanceWindow))
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionTrue, c.Status)
		require.NotNil(t, m.Status.MaintenanceUntil)
		assert.True(t, until.Equal(m.Status.MaintenanceUntil))
		assert.Equal(t, []string{"by-label", "by-spec", "user-injected"}, m.Status.PermissiveNamespaces)
		assert.Positive(t, res.RequeueAfter)
		assert.LessOrEqual(t, res.RequeueAfter, until.Sub(clock.Now()), "woken at the deadline, not later")
		assert.Equal(t, []any{"*"}, policy(enroll.KindAuthorizationPolicy, "by-label").Object["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)["from"].([]any)[0].(map[string]any)["source"].(map[string]any)["principals"],
			"the DENY still matches only authenticated sources: plaintext is not dropped while PERMISSIVE")

		// Nothing changes in the cluster; the requeue comes at the deadline.
		clock.Advance(res.RequeueAfter)
		_, m = reconcile()
		for _, n := range []string{"by-label", "by-spec", "user-injected"} {
			assert.Equal(t, "STRICT", paMode(n), n)
			assert.Equal(t, "strict", ns(n).Labels[labels.MeshMTLS], n)
		}
		c = meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMaintenanceWindow))
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonWindowEnded), c.Reason)
		assert.Nil(t, m.Status.MaintenanceUntil)
		assert.Empty(t, m.Status.PermissiveNamespaces)
	})

	t.Run("mtls.mode permissive keeps PERMISSIVE; isolation off removes the policy", func(t *testing.T) {
		setSpec(func(s *v1alpha1.ServiceMeshSpec) {
			s.MTLS.Mode, s.Isolation = v1alpha1.MTLSPermissive, v1alpha1.IsolationOff
		})
		reconcile()
		assert.Equal(t, "PERMISSIVE", paMode("by-label"))
		assert.Nil(t, policy(enroll.KindAuthorizationPolicy, "by-label"))
		assert.Equal(t, "off", ns("by-label").Labels[labels.MeshIsolation])
		setSpec(func(s *v1alpha1.ServiceMeshSpec) {
			s.MTLS.Mode, s.Isolation = v1alpha1.MTLSStrict, v1alpha1.IsolationNamespace
		})
		reconcile()
		assert.Equal(t, "STRICT", paMode("by-label"))
		assert.NotNil(t, policy(enroll.KindAuthorizationPolicy, "by-label"))
	})

	t.Run("while the control plane is not Ready nothing is enrolled or tightened, but an opt-out is still honoured", func(t *testing.T) {
		setAvailable := func(ok bool) {
			t.Helper()
			require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(dep), dep))
			st := corev1.ConditionFalse
			if ok {
				st = corev1.ConditionTrue
			}
			dep.Status.Conditions = []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: st, Reason: "Test"}}
			dep.Status.AvailableReplicas = map[bool]int32{true: 1, false: 0}[ok]
			require.NoError(t, admin.Status().Update(ctx, dep))
		}
		setAvailable(false)
		createNS("late", map[string]string{labels.Mesh: labels.MeshEnabled})
		labelNS("user-injected", labels.Mesh, str(labels.MeshDisabled))
		_, m := reconcile()
		require.NotEqual(t, PhaseReady, m.Status.Phase)
		assert.Nil(t, policy(enroll.KindPeerAuthentication, "late"), "not Ready: nothing new is enrolled")
		assert.Nil(t, policy(enroll.KindPeerAuthentication, "user-injected"), "an opt-out is released even while not Ready")
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshDisabled, labels.IstioInjection: "enabled"}, meshLabels("user-injected"))
		assert.Equal(t, "STRICT", paMode("by-label"), "enrolled namespaces are held as they are")
		assert.Equal(t, []string{"by-label", "by-spec"}, m.Status.EnrolledNamespaces)

		setAvailable(true)
		labelNS("user-injected", labels.Mesh, str(labels.MeshEnabled))
		_, m = reconcile()
		assert.Equal(t, []string{"by-label", "by-spec", "late", "user-injected"}, m.Status.EnrolledNamespaces)
		labelNS("late", labels.Mesh, str(labels.MeshDisabled))
		_, m = reconcile()
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshDisabled}, meshLabels("late"))
		assert.Equal(t, []string{"by-label", "by-spec", "user-injected"}, m.Status.EnrolledNamespaces)
	})

	t.Run("opting out wins over an enrolled namespace; leaving the list removes only the operator's labels", func(t *testing.T) {
		labelNS("by-label", labels.Mesh, str(labels.MeshDisabled))
		_, m := reconcile()
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshDisabled}, meshLabels("by-label"))
		assert.Nil(t, policy(enroll.KindPeerAuthentication, "by-label"))
		assert.Nil(t, policy(enroll.KindAuthorizationPolicy, "by-label"))
		assert.NotContains(t, m.Status.EnrolledNamespaces, "by-label")
		assert.True(t, sawEvent(r.Recorder.(*events.FakeRecorder), "NamespaceReleased"))

		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.EnrollNamespaces = []string{"opted-out"} })
		_, m = reconcile()
		assert.Equal(t, map[string]string{"team": "payments"}, meshLabels("by-spec"), "the request the operator wrote goes too")
		assert.Nil(t, policy(enroll.KindPeerAuthentication, "by-spec"))
		assert.Equal(t, []string{"user-injected"}, m.Status.EnrolledNamespaces)
	})

	t.Run("a policy of the same name that is not ours is never overwritten; the namespace is not enrolled", func(t *testing.T) {
		createNS("foreign-policy", map[string]string{labels.Mesh: labels.MeshEnabled})
		pa := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": "DISABLE"}}}}
		pa.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(enroll.KindPeerAuthentication))
		pa.SetNamespace("foreign-policy")
		pa.SetName(enroll.PeerAuthenticationName)
		require.NoError(t, admin.Create(ctx, pa))
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
		require.NoError(t, err, "a failed step is reported in status, not returned")
		failed := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, failed))
		assert.Contains(t, failedStep(failed), "not owned by")
		assert.Equal(t, "DISABLE", paMode("foreign-policy"))
		assert.Empty(t, ns("foreign-policy").Labels[labels.MeshState], "no state labels for what is not in place")
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		assert.NotContains(t, m.Status.EnrolledNamespaces, "foreign-policy")
		assert.Contains(t, m.Status.EnrolledNamespaces, "user-injected", "other namespaces are still reconciled")
		assert.True(t, sawEvent(r.Recorder.(*events.FakeRecorder), "EnrollmentFailed"))

		labelNS("foreign-policy", labels.Mesh, str(labels.MeshDisabled))
		reconcile()
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshDisabled}, meshLabels("foreign-policy"))
		assert.Equal(t, "DISABLE", paMode("foreign-policy"), "the user's policy stays")
		require.NoError(t, admin.Delete(ctx, pa))
	})

	t.Run("a lost license releases every namespace; a new one enrolls again", func(t *testing.T) {
		secret.Data["license"] = []byte("garbage")
		require.NoError(t, admin.Update(ctx, secret))
		_, m := reconcile()
		assert.Equal(t, PhasePreviewLocked, m.Status.Phase)
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshEnabled, labels.IstioInjection: "enabled"}, meshLabels("user-injected"),
			"the user's labels stay")
		assert.Nil(t, policy(enroll.KindPeerAuthentication, "user-injected"))
		assert.NotContains(t, m.Finalizers, EnrollFinalizer)
		assert.Empty(t, m.Status.EnrolledNamespaces)

		secret.Data["license"] = lic
		require.NoError(t, admin.Update(ctx, secret))
		_, m = reconcile()
		assert.Equal(t, []string{"user-injected"}, m.Status.EnrolledNamespaces)
		assert.Equal(t, "STRICT", paMode("user-injected"))
	})

	t.Run("teardown leaves only user state and the adopted control plane", func(t *testing.T) {
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.EnrollNamespaces = []string{"by-spec"} })
		reconcile()
		require.Equal(t, labels.MeshEnabled, ns("by-spec").Labels[labels.Mesh])
		require.NoError(t, admin.Delete(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}))
		_, m := reconcile()
		assert.Nil(t, m, "the ServiceMesh is gone")
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshEnabled, labels.IstioInjection: "enabled"}, meshLabels("user-injected"))
		assert.Equal(t, map[string]string{"team": "payments"}, meshLabels("by-spec"))
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshDisabled}, meshLabels("by-label"))
		for _, kind := range []string{enroll.KindPeerAuthentication, enroll.KindAuthorizationPolicy} {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind + "List"))
			require.NoError(t, admin.List(ctx, list))
			assert.Empty(t, list.Items, kind)
		}
		assert.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(dep), &appsv1.Deployment{}), "the adopted istiod is left intact")
	})

	t.Run("under a manager: the Namespace watch enrolls, the cutover is polled, the window ends with no event (ambient)", func(t *testing.T) {
		mgr, err := ctrl.NewManager(asOperator, ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		require.NoError(t, err)
		live := &ServiceMeshReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Served: &served.Catalog{Discovery: dc}, Config: r.Config,
			Recorder: events.NewFakeRecorder(100), Now: time.Now, Metrics: metrics.NewLicense(time.Now)}
		require.NoError(t, live.setup(mgr, "servicemesh-enrollment"))
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		defer func() {
			cancel()
			require.NoError(t, <-done)
		}()
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient}}))
		get := func() *v1alpha1.ServiceMesh {
			m := &v1alpha1.ServiceMesh{}
			if admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m) != nil {
				return nil
			}
			return m
		}
		eventually(t, 20*time.Second, "Ready", func() bool { m := get(); return m != nil && m.Status.Phase == PhaseReady })

		// A namespace labelled later is enrolled through the watch alone.
		createNS("ambient-app", nil)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ambient-app", Name: "app"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
		require.NoError(t, admin.Create(ctx, p))
		labelNS("ambient-app", labels.Mesh, str(labels.MeshEnabled))
		eventually(t, 20*time.Second, "ambient-app enrolled, PERMISSIVE", func() bool {
			return ns("ambient-app").Labels[labels.MeshState] == "enrolled" && paMode("ambient-app") == "PERMISSIVE"
		})
		assert.Equal(t, "ambient", ns("ambient-app").Labels[labels.IstioDataPlaneMode])
		assert.Equal(t, "ambient", ns("ambient-app").Labels[labels.MeshDataPlane])

		// istio-cni captures the Pod: the cutover follows by polling, with no event on the ServiceMesh or Namespace.
		require.NoError(t, admin.Patch(ctx, p, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"ambient.istio.io/redirection":"enabled"}}}`))))
		eventually(t, 20*time.Second, "ambient-app STRICT", func() bool {
			return paMode("ambient-app") == "STRICT" && ns("ambient-app").Labels[labels.MeshMTLS] == "strict"
		})

		// A short maintenance window: entered on the spec change, left at the deadline by the requeue alone.
		until := metav1.NewTime(time.Now().Add(4 * time.Second).Truncate(time.Second))
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil = &until })
		eventually(t, 10*time.Second, "PERMISSIVE during the window", func() bool {
			return paMode("ambient-app") == "PERMISSIVE" && ns("ambient-app").Labels[labels.MeshMTLS] == "permissive"
		})
		require.True(t, time.Now().Before(until.Time), "the window was entered before its end")
		eventually(t, 15*time.Second, "STRICT after the window", func() bool {
			return paMode("ambient-app") == "STRICT" && ns("ambient-app").Labels[labels.MeshMTLS] == "strict"
		})
		assert.False(t, time.Now().Before(until.Time), "not before the deadline")
		eventually(t, 10*time.Second, "MaintenanceWindow Ended", func() bool {
			c := meta.FindStatusCondition(get().Status.Conditions, string(v1alpha1.ConditionMaintenanceWindow))
			return c != nil && c.Reason == string(v1alpha1.ReasonWindowEnded) && get().Status.MaintenanceUntil == nil
		})

		require.NoError(t, admin.Delete(ctx, get()))
		eventually(t, 20*time.Second, "the ServiceMesh gone", func() bool { return get() == nil })
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshEnabled}, meshLabels("ambient-app"))
		assert.Nil(t, policy(enroll.KindPeerAuthentication, "ambient-app"))
	})

	t.Run("mode external enrolls too, with Istio's conventional control-plane namespace", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeExternal, DataPlane: v1alpha1.DataPlaneSidecar, EnrollNamespaces: []string{"external-app"}}}))
		createNS("external-app", nil)
		_, m := reconcile()
		require.Equal(t, PhaseReady, m.Status.Phase)
		assert.Contains(t, m.Status.EnrolledNamespaces, "external-app")
		l := meshLabels("external-app")
		assert.Equal(t, "istio-system", l[labels.MeshControlPlane])
		assert.Equal(t, "enabled", l[labels.IstioInjection])
		assert.Equal(t, "STRICT", paMode("external-app"))
		require.NoError(t, admin.Delete(ctx, m))
		_, m = reconcile()
		assert.Nil(t, m)
		assert.Empty(t, meshLabels("external-app"))
	})
}
