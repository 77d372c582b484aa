//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// TestDataPlaneMigrationIntegration (issue 15 item 3): switching dataPlane
// on a live managed mesh, ambient→sidecar and back, with enrolled
// namespaces and running Pods. Sail is played by the test's fakeSail,
// istio-cni by cni() below (it marks Pods of ambient-labelled namespaces
// redirected while ztunnel runs, and unmarks them otherwise), and the
// workloads' owner rolls Pods when a namespace asks for sidecars. Every
// state the API server went through is judged:
//   - no namespace is STRICT while a running Pod there is not meshed
//     (a proxy, or redirection while a ZTunnel runs);
//   - ztunnel is never removed while a Pod is still redirected to it;
//   - a namespace's data-plane label changes only while it is PERMISSIVE.
func TestDataPlaneMigrationIntegration(t *testing.T) {
	b := startEnrollmentBed(t, "lic-migrate", events.NewFakeRecorder(10000))
	ctx, admin := context.Background(), b.admin
	serveSailAPI(t, admin, b.root, b.discovery)
	fake := fakeSail{t: t, c: admin}
	syncAll := func() { fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel) }
	reconcile := func() *v1alpha1.ServiceMesh {
		t.Helper()
		_, m := b.reconcile(t)
		return m
	}
	setDataPlane := func(dp v1alpha1.DataPlane) {
		t.Helper()
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m := &v1alpha1.ServiceMesh{}
			if err := admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m); err != nil {
				return err
			}
			m.Spec.DataPlane = dp
			return admin.Update(ctx, m)
		}))
	}
	ztunnelUp := func() bool {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(sail.KindZTunnel))
		err := admin.Get(ctx, client.ObjectKey{Name: sail.ZTunnelName}, u)
		return err == nil && u.GetDeletionTimestamp() == nil
	}
	sailExists := func(kind string) bool {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(kind))
		err := admin.Get(ctx, client.ObjectKey{Name: "default"}, u)
		if apierrors.IsNotFound(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	nsLabels := func(name string) map[string]string {
		t.Helper()
		n := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, n))
		return n.Labels
	}
	paMode := func(namespace string) string { t.Helper(); return meshMTLSMode(t, admin, namespace) }
	pods := func(namespace string) []corev1.Pod {
		t.Helper()
		l := &corev1.PodList{}
		require.NoError(t, admin.List(ctx, l, client.InNamespace(namespace)))
		return l.Items
	}
	always := corev1.ContainerRestartPolicyAlways
	generation := 0
	newPod := func(namespace string, sidecar bool) {
		t.Helper()
		generation++
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("app-%d", generation), Labels: map[string]string{"app": "app"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
		if sidecar {
			p.Spec.InitContainers = []corev1.Container{{Name: podmesh.ProxyContainer, Image: "example.invalid/proxyv2", RestartPolicy: &always}}
		} else if ztunnelUp() && nsLabels(namespace)[labels.IstioDataPlaneMode] == "ambient" {
			// istio-cni captures a Pod when its sandbox is set up, before
			// the application starts.
			p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"}
		}
		require.NoError(t, admin.Create(ctx, p))
	}
	// cni plays istio-cni: Pods without a proxy in namespaces labelled
	// ambient are redirected while ztunnel runs; others are released.
	cni := func() {
		t.Helper()
		up := ztunnelUp()
		for _, n := range []string{"shop", "pay"} {
			ambientNS := nsLabels(n)[labels.IstioDataPlaneMode] == "ambient"
			for _, p := range pods(n) {
				want := up && ambientNS && !podmesh.HasProxy(&p)
				if want == podmesh.Redirected(&p) {
					continue
				}
				body := `{"metadata":{"annotations":{"ambient.istio.io/redirection":null}}}`
				if want {
					body = `{"metadata":{"annotations":{"ambient.istio.io/redirection":"enabled"}}}`
				}
				require.NoError(t, admin.Patch(ctx, &p, client.RawPatch("application/merge-patch+json", []byte(body))))
			}
		}
	}
	// roll plays the workloads' owner: a namespace that asks for sidecars
	// gets its Pods re-created with one, one Pod per step.
	roll := func() {
		t.Helper()
		for _, n := range []string{"shop", "pay"} {
			if nsLabels(n)[labels.IstioInjection] != "enabled" {
				continue
			}
			for _, p := range pods(n) {
				if !podmesh.HasProxy(&p) && p.DeletionTimestamp == nil {
					require.NoError(t, admin.Delete(ctx, &p, client.GracePeriodSeconds(0)))
					newPod(n, true)
					break
				}
			}
		}
	}
	migration := func(m *v1alpha1.ServiceMesh) *metav1.Condition {
		return meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionDataPlaneMigration))
	}

	for _, n := range []string{"shop", "pay"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
		newPod(n, false)
		newPod(n, false)
	}
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, DataPlane: v1alpha1.DataPlaneAmbient}}))
	for i := 0; i < 6; i++ {
		reconcile()
		syncAll()
		cni()
	}
	m := reconcile()
	require.Equal(t, PhaseReady, m.Status.Phase)
	for _, n := range []string{"shop", "pay"} {
		require.Equal(t, "strict", paMode(n), n)
		require.Equal(t, "ambient", nsLabels(n)[labels.IstioDataPlaneMode], n)
	}

	log := startWorldLog(t, b.env.Config, append(transitionWatched, gvrZTunnels, gvrIstioCNIs, gvrIstios)...)

	// step runs one round of everyone's work and returns the mesh.
	var sawMigrating []string
	step := func() *v1alpha1.ServiceMesh {
		t.Helper()
		m := reconcile()
		if c := migration(m); c != nil && c.Status == metav1.ConditionTrue {
			sawMigrating = append(sawMigrating, c.Reason+": "+c.Message)
		}
		syncAll()
		cni()
		roll()
		return m
	}

	t.Run("ambient → sidecar", func(t *testing.T) {
		setDataPlane(v1alpha1.DataPlaneSidecar)
		done := func() bool {
			for _, n := range []string{"shop", "pay"} {
				for _, p := range pods(n) {
					if !podmesh.HasProxy(&p) {
						return false
					}
				}
			}
			return !sailExists(sail.KindZTunnel) && !sailExists(sail.KindIstioCNI) && paMode("shop") == "strict" && paMode("pay") == "strict"
		}
		for i := 0; i < 30 && !done(); i++ {
			step()
		}
		require.True(t, done(), "the migration completes: ztunnel and istio-cni removed, every namespace STRICT again")
		m := step()
		for _, n := range []string{"shop", "pay"} {
			l := nsLabels(n)
			assert.Equal(t, "enabled", l[labels.IstioInjection], n)
			assert.NotContains(t, l, labels.IstioDataPlaneMode, n)
			assert.Equal(t, "sidecar", l[labels.MeshDataPlane], n)
			for _, p := range pods(n) {
				assert.True(t, podmesh.HasProxy(&p), "%s/%s", n, p.Name)
			}
		}
		c := migration(m)
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonSettled), c.Reason)
		t.Logf("DataPlaneMigration as observed:\n%s", joinLines(sawMigrating))
		require.NotEmpty(t, sawMigrating, "the migration was observable")
		assert.Contains(t, joinLines(sawMigrating), "shop")
	})

	t.Run("sidecar → ambient", func(t *testing.T) {
		sawMigrating = nil
		setDataPlane(v1alpha1.DataPlaneAmbient)
		done := func() bool {
			return sailExists(sail.KindZTunnel) && nsLabels("shop")[labels.IstioDataPlaneMode] == "ambient" &&
				nsLabels("pay")[labels.IstioDataPlaneMode] == "ambient" && paMode("shop") == "strict" && paMode("pay") == "strict"
		}
		for i := 0; i < 30 && !done(); i++ {
			step()
		}
		require.True(t, done(), "the migration completes")
		// The sidecar Pods are rolled into plain ambient Pods, one by one.
		for _, n := range []string{"shop", "pay"} {
			for _, p := range pods(n) {
				require.NoError(t, admin.Delete(ctx, &p, client.GracePeriodSeconds(0)))
				newPod(n, false)
				step()
			}
		}
		for i := 0; i < 3; i++ {
			step()
		}
		m := step()
		for _, n := range []string{"shop", "pay"} {
			assert.Equal(t, "strict", paMode(n), n)
			assert.NotContains(t, nsLabels(n), labels.IstioInjection, n)
		}
		c := migration(m)
		require.NotNil(t, c)
		assert.Equal(t, string(v1alpha1.ReasonSettled), c.Reason)
		t.Logf("DataPlaneMigration as observed:\n%s", joinLines(sawMigrating))
		require.NotEmpty(t, sawMigrating)
	})

	v := &violations{t: t}
	prevDP := map[string]string{}
	states := log.replay(func(w *world) {
		zt := w.get(gvrZTunnels, "", sail.ZTunnelName)
		up := zt != nil && zt.GetDeletionTimestamp() == nil
		for _, n := range []string{"shop", "pay"} {
			dp := w.nsLabels(n)[labels.IstioDataPlaneMode] + "/" + w.nsLabels(n)[labels.IstioInjection]
			if prev, ok := prevDP[n]; ok && prev != dp && w.paMode(n) == "STRICT" {
				v.add(w, "%s was relabelled (%s → %s) while STRICT", n, prev, dp)
			}
			prevDP[n] = dp
			// Each running Pod calls its neighbours as it really can at this
			// state: mTLS with a proxy, or redirected while ztunnel runs;
			// plaintext otherwise. authzeval judges the call under the live
			// policies: none may be refused (the namespace has no
			// AuthorizationPolicy that denies its own Pods, so a refusal
			// means STRICT met an unmeshed workload).
			plane := podmesh.DataPlaneSidecar
			if up {
				plane = podmesh.DataPlaneAmbient
			}
			for _, p := range w.pods(n) {
				if d := w.judge(n, map[string]string{"app": "app"}, caller(&p, plane, 8080)); !d.Allowed {
					v.add(w, "%s refuses its own Pod %s (%s, meshed: %v): %s", n, p.Name, podmesh.Of(&p), podmesh.MeshedIn(plane, &p), d.Why)
				}
				if podmesh.Redirected(&p) && !up {
					v.add(w, "Pod %s/%s is still redirected but ztunnel is gone", n, p.Name)
				}
				// The state label tells workload operators what is in place: a
				// fleet closes HBONE when it reads sidecar, so it must not say
				// sidecar while ztunnel still captures a Pod there.
				if podmesh.Redirected(&p) && up && w.nsLabels(n)[labels.MeshDataPlane] == "sidecar" {
					v.add(w, "%s says mesh-dataplane=sidecar while Pod %s is still redirected to ztunnel", n, p.Name)
				}
			}
		}
	})
	v.assertNone(states)
}
