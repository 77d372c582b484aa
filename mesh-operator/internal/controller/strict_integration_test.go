//go:build integration

package controller

import (
	"context"
	"strings"
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

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// eventLog drains a FakeRecorder and remembers what it saw.
type eventLog struct {
	r    *events.FakeRecorder
	seen []string
}

func (l *eventLog) drain() []string {
	for {
		select {
		case e := <-l.r.Events:
			l.seen = append(l.seen, e)
		default:
			return l.seen
		}
	}
}

// count is how many events with reason mention substr.
func (l *eventLog) count(reason, substr string) int {
	n := 0
	for _, e := range l.drain() {
		if strings.Contains(e, " "+reason+" ") && strings.Contains(e, substr) {
			n++
		}
	}
	return n
}

// TestStrictIsolationIntegration runs isolation strict, a named sidecar
// revision and a managed-mode enrollment teardown against a real API server
// with Istio's CRDs, the operator acting under its generated RBAC.
func TestStrictIsolationIntegration(t *testing.T) {
	evs := &eventLog{r: events.NewFakeRecorder(1000)}
	b := startEnrollmentBed(t, "lic-strict", evs.r)
	ctx, admin, clock, root, dc := context.Background(), b.admin, b.clock, b.root, b.discovery
	reconcile := func() (ctrl.Result, *v1alpha1.ServiceMesh) { t.Helper(); return b.reconcile(t) }
	nsLabels := func(name string) map[string]string {
		t.Helper()
		n := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, n))
		out := map[string]string{}
		for k, v := range n.Labels {
			if k != labels.NamespaceName {
				out[k] = v
			}
		}
		return out
	}
	get := func(kind, namespace, name string) *unstructured.Unstructured {
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
	baseline := func(namespace string) *unstructured.Unstructured {
		t.Helper()
		return get(enroll.KindAuthorizationPolicy, namespace, enroll.BaselinePolicyName)
	}
	isolationDeny := func(namespace string) *unstructured.Unstructured {
		t.Helper()
		return get(enroll.KindAuthorizationPolicy, namespace, enroll.IsolationPolicyName)
	}
	paMode := func(namespace string) string {
		t.Helper()
		u := get(enroll.KindPeerAuthentication, namespace, enroll.PeerAuthenticationName)
		if u == nil {
			return ""
		}
		m, _, _ := unstructured.NestedString(u.Object, "spec", "mtls", "mode")
		return m
	}
	policiesIn := func(namespace string) []string {
		t.Helper()
		var out []string
		for _, kind := range []string{enroll.KindPeerAuthentication, enroll.KindAuthorizationPolicy} {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(kind + "List"))
			require.NoError(t, admin.List(ctx, list, client.InNamespace(namespace)))
			for _, u := range list.Items {
				out = append(out, kind+"/"+u.GetName())
			}
		}
		return out
	}
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
	patch := func(obj client.Object, body string) {
		t.Helper()
		require.NoError(t, admin.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(body))))
	}
	strictCond := func(m *v1alpha1.ServiceMesh) *metav1.Condition {
		return meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionStrictIsolation))
	}

	// An adopted plain istiod of the named revision "canary": its
	// istio.io/rev label is what status.controlPlane.revision reports
	// (the ServiceMesh spec has no revision field; the revision is the
	// control plane's).
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-canary"}}))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-canary", Name: "istiod-canary",
		Labels: map[string]string{"app": "istiod", labels.IstioRevision: "canary"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "istiod"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.30.1"}}}}}}
	require.NoError(t, admin.Create(ctx, dep))
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, AvailableReplicas: 1, ReadyReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
	require.NoError(t, admin.Status().Update(ctx, dep))

	// strict-app: a Pod without a proxy holds it at PERMISSIVE. rev-app:
	// no Pods, STRICT at once. Both carry labels of their users.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "strict-app",
		Labels: map[string]string{labels.Mesh: labels.MeshEnabled, "team": "payments"}}}))
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rev-app",
		Labels: map[string]string{"owner": "alice"}}}))
	legacy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "strict-app", Name: "legacy"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
	require.NoError(t, admin.Create(ctx, legacy))

	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar,
			ControlPlaneNamespace: "istio-canary", Isolation: v1alpha1.IsolationStrict, EnrollNamespaces: []string{"rev-app"}}}))

	t.Run("strict: the baseline appears only once the namespace is STRICT", func(t *testing.T) {
		_, m := reconcile()
		require.Equal(t, PhaseReady, m.Status.Phase)
		require.Equal(t, "canary", m.Status.ControlPlane.Revision)
		assert.Equal(t, []string{"rev-app", "strict-app"}, m.Status.EnrolledNamespaces)

		assert.Equal(t, "PERMISSIVE", paMode("strict-app"))
		assert.NotNil(t, isolationDeny("strict-app"), "namespace isolation holds while PERMISSIVE")
		assert.Nil(t, baseline("strict-app"), "no allow-nothing while PERMISSIVE: it would drop plaintext")
		assert.Equal(t, "strict", nsLabels("strict-app")[labels.MeshIsolation])

		assert.Equal(t, "STRICT", paMode("rev-app"))
		b := baseline("rev-app")
		require.NotNil(t, b)
		assert.Equal(t, map[string]any{"action": "ALLOW"}, b.Object["spec"])
		ref := metav1.GetControllerOf(b)
		require.NotNil(t, ref, "owned by the ServiceMesh for garbage collection")
		assert.Equal(t, m.UID, ref.UID)
		assert.Equal(t, "ServiceMesh", ref.Kind)
		assert.Equal(t, 1, evs.count("BaselineApplied", "rev-app/mesh-baseline"))

		c := strictCond(m)
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonBaselineWithheld), c.Reason)
		assert.Contains(t, c.Message, "strict-app (AwaitingCutover)")
		assert.NotContains(t, c.Message, "rev-app")

		zero := int64(0)
		require.NoError(t, admin.Delete(ctx, legacy, &client.DeleteOptions{GracePeriodSeconds: &zero}))
		eventually(t, 10*time.Second, "pod gone", func() bool {
			return apierrors.IsNotFound(admin.Get(ctx, client.ObjectKeyFromObject(legacy), &corev1.Pod{}))
		})
		_, m = reconcile()
		assert.Equal(t, "STRICT", paMode("strict-app"))
		require.NotNil(t, baseline("strict-app"), "the baseline follows the cutover")
		assert.Equal(t, 1, evs.count("BaselineApplied", "strict-app/mesh-baseline"))
		c = strictCond(m)
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionTrue, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonBaselineInForce), c.Reason)

		// Settled: nothing is written again.
		rv := baseline("strict-app").GetResourceVersion()
		mrv := m.ResourceVersion
		_, m = reconcile()
		assert.Equal(t, rv, baseline("strict-app").GetResourceVersion())
		assert.Equal(t, mrv, m.ResourceVersion)
	})

	t.Run("named sidecar revision: istio.io/rev on the namespace, not istio-injection", func(t *testing.T) {
		l := nsLabels("rev-app")
		assert.Equal(t, "canary", l[labels.IstioRevision])
		assert.NotContains(t, l, labels.IstioInjection)
		assert.Equal(t, "alice", l["owner"])
		assert.Equal(t, labels.MeshEnabled, l[labels.Mesh], "the request the operator wrote for enrollNamespaces")
		assert.Equal(t, "istio-canary", l[labels.MeshControlPlane])
	})

	t.Run("hand edits of the baseline are reverted, even added fields; a paused baseline is left alone", func(t *testing.T) {
		// A rule and a selector added by hand would widen what the namespace
		// admits; server-side apply alone would keep them.
		patch(baseline("strict-app"), `{"spec":{"rules":[{"from":[{"source":{"namespaces":["team-b"]}}]}],"selector":{"matchLabels":{"app":"x"}}}}`)
		_, m := reconcile()
		assert.Equal(t, map[string]any{"action": "ALLOW"}, baseline("strict-app").Object["spec"])
		assert.Empty(t, m.Status.PausedObjects)

		patch(isolationDeny("strict-app"), `{"spec":{"selector":{"matchLabels":{"app":"x"}}}}`)
		reconcile()
		_, hasSelector := isolationDeny("strict-app").Object["spec"].(map[string]any)["selector"]
		assert.False(t, hasSelector, "the isolation DENY stays namespace-wide")

		patch(baseline("strict-app"), `{"metadata":{"annotations":{"core.navique.com/reconcile-paused":"true"}},"spec":{"rules":[{}]}}`)
		_, m = reconcile()
		assert.Equal(t, []any{map[string]any{}}, baseline("strict-app").Object["spec"].(map[string]any)["rules"], "paused: kept")
		assert.Equal(t, []string{"AuthorizationPolicy/strict-app/mesh-baseline"}, m.Status.PausedObjects)

		patch(baseline("strict-app"), `{"metadata":{"annotations":{"core.navique.com/reconcile-paused":null}}}`)
		_, m = reconcile()
		assert.Equal(t, map[string]any{"action": "ALLOW"}, baseline("strict-app").Object["spec"])
		assert.Empty(t, m.Status.PausedObjects)

		// A paused PeerAuthentication at PERMISSIVE is the mode in force: no baseline.
		pa := get(enroll.KindPeerAuthentication, "strict-app", enroll.PeerAuthenticationName)
		patch(pa, `{"metadata":{"annotations":{"core.navique.com/reconcile-paused":"true"}},"spec":{"mtls":{"mode":"PERMISSIVE"}}}`)
		_, m = reconcile()
		assert.Nil(t, baseline("strict-app"), "a paused PERMISSIVE mesh-mtls withdraws the baseline")
		assert.Equal(t, "permissive", nsLabels("strict-app")[labels.MeshMTLS])
		assert.Contains(t, strictCond(m).Message, "strict-app (Paused)")
		patch(pa, `{"metadata":{"annotations":{"core.navique.com/reconcile-paused":null}}}`)
		_, m = reconcile()
		assert.Equal(t, "STRICT", paMode("strict-app"))
		assert.NotNil(t, baseline("strict-app"))
		assert.Equal(t, string(v1alpha1.ReasonBaselineInForce), strictCond(m).Reason)
	})

	t.Run("maintenance window: the baseline goes with STRICT and comes back on its own at the deadline", func(t *testing.T) {
		until := metav1.NewTime(clock.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second))
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil = &until })
		res, m := reconcile()
		for _, n := range []string{"strict-app", "rev-app"} {
			assert.Equal(t, "PERMISSIVE", paMode(n), n)
			assert.Nil(t, baseline(n), "%s: plaintext is what the window is for", n)
			assert.NotNil(t, isolationDeny(n), n)
		}
		assert.Equal(t, 2, evs.count("BaselineWithdrawn", "strict-app/mesh-baseline"), "for the paused mesh-mtls and the window")
		c := strictCond(m)
		require.NotNil(t, c)
		assert.Equal(t, string(v1alpha1.ReasonBaselineWithheld), c.Reason)
		assert.Contains(t, c.Message, "rev-app (Maintenance), strict-app (Maintenance)")
		require.Positive(t, res.RequeueAfter)
		assert.LessOrEqual(t, res.RequeueAfter, until.Sub(clock.Now()))

		// No API event: the requeue at the deadline alone restores both.
		clock.Advance(res.RequeueAfter)
		_, m = reconcile()
		for _, n := range []string{"strict-app", "rev-app"} {
			assert.Equal(t, "STRICT", paMode(n), n)
			assert.NotNil(t, baseline(n), n)
		}
		assert.Equal(t, 3, evs.count("BaselineApplied", "strict-app/mesh-baseline"), "after the cutover, the paused mesh-mtls and the window")
		assert.Equal(t, string(v1alpha1.ReasonBaselineInForce), strictCond(m).Reason)
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.MaintenanceUntil = nil })
	})

	t.Run("mtls.mode permissive withdraws the baseline; strict brings it back", func(t *testing.T) {
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.Mode = v1alpha1.MTLSPermissive })
		_, m := reconcile()
		assert.Equal(t, "PERMISSIVE", paMode("strict-app"))
		assert.Nil(t, baseline("strict-app"))
		assert.Contains(t, strictCond(m).Message, "strict-app (Configured)")
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.MTLS.Mode = v1alpha1.MTLSStrict })
		reconcile()
		assert.Equal(t, "STRICT", paMode("strict-app"))
		assert.NotNil(t, baseline("strict-app"))
	})

	t.Run("switching isolation strict → namespace → off removes the baseline, then the DENY", func(t *testing.T) {
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.Isolation = v1alpha1.IsolationNamespace })
		_, m := reconcile()
		assert.Nil(t, baseline("strict-app"))
		assert.NotNil(t, isolationDeny("strict-app"))
		assert.Equal(t, "namespace", nsLabels("strict-app")[labels.MeshIsolation])
		assert.Nil(t, strictCond(m), "the condition exists only for isolation strict")

		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.Isolation = v1alpha1.IsolationStrict })
		reconcile()
		require.NotNil(t, baseline("strict-app"))
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.Isolation = v1alpha1.IsolationOff })
		reconcile()
		assert.Equal(t, []string{"PeerAuthentication/mesh-mtls"}, policiesIn("strict-app"))
		assert.Equal(t, []string{"PeerAuthentication/mesh-mtls"}, policiesIn("rev-app"))
		setSpec(func(s *v1alpha1.ServiceMeshSpec) { s.Isolation = v1alpha1.IsolationStrict })
		_, m = reconcile()
		assert.Equal(t, string(v1alpha1.ReasonBaselineInForce), strictCond(m).Reason)
	})

	t.Run("teardown removes the baseline and the revision label; user labels and the adopted istiod stay", func(t *testing.T) {
		require.NotNil(t, baseline("strict-app"))
		// A paused baseline goes too: left alone it would drop plaintext
		// once the PeerAuthentication is gone.
		patch(baseline("rev-app"), `{"metadata":{"annotations":{"core.navique.com/reconcile-paused":"true"}}}`)
		require.NoError(t, admin.Delete(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}))
		_, m := reconcile()
		require.Nil(t, m, "the ServiceMesh is gone")
		assert.Empty(t, policiesIn("strict-app"))
		assert.Empty(t, policiesIn("rev-app"))
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshEnabled, "team": "payments"}, nsLabels("strict-app"))
		assert.Equal(t, map[string]string{"owner": "alice"}, nsLabels("rev-app"), "istio.io/rev and the request the operator wrote are gone")
		assert.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(dep), &appsv1.Deployment{}), "the adopted istiod is left intact")
	})

	t.Run("managed mode: enrollment teardown before the control plane leaves only user state", func(t *testing.T) {
		require.NoError(t, admin.Delete(ctx, dep))
		serveSailAPI(t, admin, root, dc)
		fake := fakeSail{t: t, c: admin}
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "managed-app", Labels: map[string]string{"cost-center": "42"}}}))
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, DataPlane: v1alpha1.DataPlaneSidecar, Isolation: v1alpha1.IsolationStrict,
				EnrollNamespaces: []string{"managed-app"}}}))
		_, m := reconcile()
		require.NotNil(t, m)
		assert.Empty(t, m.Status.EnrolledNamespaces, "not before the control plane is Ready")
		fake.sync(sail.KindIstio)
		_, m = reconcile()
		require.Equal(t, PhaseReady, m.Status.Phase)
		require.Equal(t, v1alpha1.ManagementManaged, m.Status.ControlPlane.Management)
		assert.Contains(t, m.Finalizers, Finalizer)
		assert.Contains(t, m.Finalizers, EnrollFinalizer)
		assert.Equal(t, []string{"managed-app", "strict-app"}, m.Status.EnrolledNamespaces)
		for _, n := range []string{"managed-app", "strict-app"} {
			assert.Equal(t, "STRICT", paMode(n), n)
			assert.ElementsMatch(t, []string{"PeerAuthentication/mesh-mtls", "AuthorizationPolicy/mesh-isolation", "AuthorizationPolicy/mesh-baseline"}, policiesIn(n), n)
			assert.Equal(t, "enabled", nsLabels(n)[labels.IstioInjection], n)
		}

		require.NoError(t, admin.Delete(ctx, m))
		_, m = reconcile()
		require.NotNil(t, m, "the control-plane finalizer waits for Sail")
		assert.NotContains(t, m.Finalizers, EnrollFinalizer, "the namespaces are released first")
		assert.Equal(t, PhaseDeleting, m.Status.Phase)
		for _, n := range []string{"managed-app", "strict-app"} {
			assert.Empty(t, policiesIn(n), n)
		}
		assert.Equal(t, map[string]string{"cost-center": "42"}, nsLabels("managed-app"))
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshEnabled, "team": "payments"}, nsLabels("strict-app"))

		fake.sync()
		_, m = reconcile()
		assert.Nil(t, m, "the ServiceMesh is gone")
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(sail.KindIstio))
		assert.True(t, apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Name: "default"}, u)), "the owned Istio is removed")
		assert.Equal(t, map[string]string{"cost-center": "42"}, nsLabels("managed-app"))
		assert.Equal(t, map[string]string{labels.Mesh: labels.MeshEnabled, "team": "payments"}, nsLabels("strict-app"))
	})
}
