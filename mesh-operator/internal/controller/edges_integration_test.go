//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// TestEdgeAwareCutoverIntegration (issue 15 item 4): STRICT in a namespace
// waits until its declared edge namespaces (the fleet operator's, a routing
// source) are meshed, reports which edge holds it, and then holds. The
// truth table is judged with shared/authzeval at every state the API
// server went through: the routing source reaches the fleet's 8080 and the
// operator its 8081 throughout, meshed or not, and an undeclared namespace
// never gets in once isolation is in place.
func TestEdgeAwareCutoverIntegration(t *testing.T) {
	b := startEnrollmentBed(t, "lic-edges", events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	reconcile := func() *v1alpha1.ServiceMesh { t.Helper(); _, m := b.reconcile(t); return m }
	always := corev1.ContainerRestartPolicyAlways
	pod := func(namespace, name string, how podmesh.How, l map[string]string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}
		switch how {
		case podmesh.Sidecar:
			p.Spec.InitContainers = []corev1.Container{{Name: podmesh.ProxyContainer, Image: "example.invalid/proxyv2", RestartPolicy: &always}}
		case podmesh.Ambient:
			p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"}
		}
		require.NoError(t, admin.Create(ctx, p))
	}
	deletePod := func(namespace, name string) {
		t.Helper()
		require.NoError(t, admin.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}, client.GracePeriodSeconds(0)))
	}
	labelNS := func(name, key string, value *string) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
		require.NoError(t, admin.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, client.RawPatch(types.MergePatchType, patch)))
	}
	paMode := func(namespace string) string { t.Helper(); return meshMTLSMode(t, admin, namespace) }
	cutover := func(m *v1alpha1.ServiceMesh) *metav1.Condition {
		return meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMTLSCutover))
	}
	str := func(s string) *string { return &s }

	readyIstiod(t, admin)

	// The fleet's namespace, enrolled, declaring its two edges as the fleet
	// operator does; the fleet operator and the routing source run without
	// a proxy at first; "other" is an undeclared, meshed namespace.
	for _, n := range []string{"fleet-system", "gateways", "other", "late-src"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{
		labels.Mesh: labels.MeshEnabled, labels.AllowFromPrefix + "fleet-system": "true", labels.AllowFromPrefix + "gateways": "true"}}}))
	member := map[string]string{labels.Fleet: "cache"}
	pod("shop", "cache-0", podmesh.Ambient, member)
	pod("fleet-system", "fleet-operator", podmesh.None, nil)
	pod("gateways", "gw", podmesh.None, nil)
	pod("other", "intruder", podmesh.Sidecar, nil)
	pod("late-src", "client", podmesh.None, nil)

	log := startWorldLog(t, b.env.Config, transitionWatched...)
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient}}))

	m := reconcile()
	require.Equal(t, PhaseReady, m.Status.Phase)
	assert.Equal(t, "permissive", paMode("shop"), "the members are captured, but two declared edges speak plaintext")
	c := cutover(m)
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonAwaitingEdge), c.Reason)
	assert.Contains(t, c.Message, "shop (edge fleet-system: Pod fleet-operator)")

	// The fleet operator gets its proxy; the routing source still holds the cutover.
	deletePod("fleet-system", "fleet-operator")
	pod("fleet-system", "fleet-operator-2", podmesh.Sidecar, nil)
	m = reconcile()
	assert.Equal(t, "permissive", paMode("shop"))
	assert.Contains(t, cutover(m).Message, "shop (edge gateways: Pod gw)")

	deletePod("gateways", "gw")
	pod("gateways", "gw-2", podmesh.Sidecar, nil)
	m = reconcile()
	assert.Equal(t, "strict", paMode("shop"), "every edge is meshed")
	assert.Equal(t, string(v1alpha1.ReasonCutOver), cutover(m).Reason)

	// A plaintext Pod in an accepted edge does not switch STRICT off: the
	// namespace's protection is not in the hands of whoever can deploy there.
	pod("gateways", "stray", podmesh.None, nil)
	reconcile()
	assert.Equal(t, "strict", paMode("shop"))

	// A newly declared edge that is not meshed relaxes the namespace (the
	// safe direction) until it is.
	labelNS("shop", labels.AllowFromPrefix+"late-src", str("true"))
	m = reconcile()
	assert.Equal(t, "permissive", paMode("shop"))
	assert.Contains(t, cutover(m).Message, "shop (edge late-src: Pod client)")
	deletePod("late-src", "client")
	m = reconcile()
	assert.Equal(t, "strict", paMode("shop"))
	assert.Equal(t, string(v1alpha1.ReasonCutOver), cutover(m).Reason)

	member0 := func(w *world) map[string]string { return member }
	sources := map[string]string{"fleet-system": "8081", "gateways": "8080", "late-src": "8080"}
	v := &violations{t: t}
	var last authzeval.Decision
	// An edge declared while the namespace is STRICT cannot be served
	// before the operator has seen the declaration: it is judged from the
	// first write of mesh-mtls after it (a workload operator declares an
	// edge before its callers rely on it).
	declaredAt := map[string]int64{}
	states := log.replay(func(w *world) {
		declared := w.nsLabels("shop")
		var paRV int64
		if pa := w.get(gvrPeerAuths, "shop", enroll.PeerAuthenticationName); pa != nil {
			paRV = rvOf(pa)
		}
		for ns, port := range sources {
			if declared[labels.AllowFromPrefix+ns] != "true" {
				delete(declaredAt, ns)
				continue
			}
			if _, ok := declaredAt[ns]; !ok {
				declaredAt[ns] = w.rv
			}
			if w.paMode("shop") == "STRICT" && declaredAt[ns] > 0 && paRV < declaredAt[ns] {
				continue
			}
			for _, p := range w.pods(ns) {
				if ns == "gateways" && p.Name == "stray" {
					continue // not a caller the fleet declared
				}
				req := caller(&p, podmesh.DataPlaneAmbient, map[string]int{"8080": 8080, "8081": 8081}[port])
				if d := w.judge("shop", member0(w), req); !d.Allowed {
					v.add(w, "declared edge %s/%s (mTLS %v) cannot reach the fleet on %s: %s", ns, p.Name, req.MTLS, port, d.Why)
				}
			}
		}
		last = w.judge("shop", member, authzeval.Request{Port: 8080})
		if w.get(gvrAuthzPolicies, "shop", enroll.IsolationPolicyName) != nil {
			for _, p := range w.pods("other") {
				if d := w.judge("shop", member, caller(&p, podmesh.DataPlaneAmbient, 8080)); d.Allowed {
					v.add(w, "undeclared namespace other reaches the fleet: %s", d.Why)
				}
			}
		}
	})
	v.assertNone(states)
	assert.False(t, last.Allowed, "plaintext from outside the declared edges is refused at the end: %s", last.Why)
}
