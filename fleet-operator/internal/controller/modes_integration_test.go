//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestMeshModes: spec.mesh.mode as the mesh seed defines it. auto (the
// default, also without spec.mesh) and enabled request their namespace's
// enrollment through the contract; an admin's
// core.navique.com/mesh=disabled wins over every request.
func TestMeshModes(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	t.Run("auto requests enrollment and reports nothing while no mesh answers", func(t *testing.T) { testAutoRequests(t, env) })
	t.Run("a fleet that existed before the ServiceMesh joins: ambient without a roll, sidecar one member at a time", func(t *testing.T) { testExistingFleetJoins(t, env) })
	t.Run("an admin's disabled wins over auto and enabled fleets, set before or after them", func(t *testing.T) { testAdminDisabledWins(t, env) })
	t.Run("an admin's Istio opt-out counts as disabled, and the fleet says its namespace is opted out", func(t *testing.T) { testAdminIstioOptOut(t, env) })
}

// testAdminIstioOptOut (issue 41 item 5): Istio's own opt-out labels on the
// fleet's namespace, set by an admin (istio-injection=disabled,
// istio.io/dataplane-mode=none), keep it out as core.navique.com/mesh=disabled
// does: the fleet asks for nothing there, and its status says the
// namespace is opted out, naming the label.
func testAdminIstioOptOut(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	h := newHarness(t, env, true)
	for _, tc := range []struct{ ns, key, value string }{
		{"no-inject", labels.IstioInjection, "disabled"},
		{"no-ambient", labels.IstioDataPlaneMode, "none"},
	} {
		createNamespace(t, env.Client, tc.ns)
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, tc.key, tc.value)
		require.NoError(t, env.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.ns}},
			client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("kubectl-label")))
		auto, enabled := fleet(tc.ns, "auto"), fleet(tc.ns, "enabled")
		enabled.Spec.Mesh = &v1alpha1.Mesh{Mode: v1alpha1.MeshEnabled}
		for _, f := range []*v1alpha1.CelldFleet{auto, enabled} {
			require.NoError(t, env.Client.Create(ctx, f))
			h.reconcile(f)
			h.reconcile(f)
			l := namespaceLabels(t, h, tc.ns)
			assert.Equal(t, tc.value, l[tc.key], "%s: the admin's label stands", f.Name)
			assert.Empty(t, l[labels.Mesh], "%s: no enrollment request on an opted-out namespace", f.Name)
			c := condition(t, h, f, v1alpha1.ConditionMeshReady)
			if !assert.NotNil(t, c, "%s says why it is not meshed", f.Name) {
				continue
			}
			assert.Equal(t, metav1.ConditionFalse, c.Status)
			assert.Equal(t, string(v1alpha1.ReasonNamespaceOptedOut), c.Reason, "%s: %s", f.Name, c.Message)
			assert.Contains(t, c.Message, tc.key+"="+tc.value)
		}
	}
}

func testAutoRequests(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "auto")
	h := newHarness(t, env, true)
	plain := fleet("auto", "plain") // no spec.mesh: auto by default
	explicit := fleet("auto", "explicit")
	explicit.Spec.Mesh = &v1alpha1.Mesh{Mode: v1alpha1.MeshAuto}
	for _, f := range []*v1alpha1.CelldFleet{plain, explicit} {
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
	}
	l := namespaceLabels(t, h, "auto")
	assert.Equal(t, labels.MeshEnabled, l[labels.Mesh], "an auto fleet asks for its namespace's enrollment")
	for _, f := range []*v1alpha1.CelldFleet{plain, explicit} {
		assert.Nil(t, condition(t, h, f, v1alpha1.ConditionMeshReady), "%s: no ServiceMesh answered: an auto fleet says nothing", f.Name)
		assert.Empty(t, f.Status.Mesh)
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, "auto", f.Name))
		for _, k := range []string{labels.IstioInject, labels.IstioDataPlaneMode} {
			assert.NotContains(t, sts.Spec.Template.Labels, k, "%s: asking changes no template", f.Name)
		}
	}
	// (The second reconcile of a new fleet re-applies its StatefulSet once
	// with the claim templates the API server defaulted.)
	h.reconcile(plain)
	h.reconcile(explicit)
	h.writes.n.Store(0)
	h.reconcile(plain)
	h.reconcile(explicit)
	assert.Equal(t, int64(0), h.writes.n.Load(), "a standing request is not rewritten")

	// The request goes with the last fleet that makes it.
	require.NoError(t, env.Client.Delete(ctx, plain))
	h.reconcile(plain)
	assert.Equal(t, labels.MeshEnabled, namespaceLabels(t, h, "auto")[labels.Mesh], "explicit still asks")
	require.NoError(t, env.Client.Delete(ctx, explicit))
	h.reconcile(explicit)
	assert.NotContains(t, namespaceLabels(t, h, "auto"), labels.Mesh)
}

// testExistingFleetJoins: a fleet created before any ServiceMesh, with its
// members running, then its namespace enrolled.
func testExistingFleetJoins(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	h := newHarness(t, env, true)
	for i, dp := range []string{"ambient", "sidecar"} {
		ns := "before-" + dp
		createNamespace(t, env.Client, ns)
		f := fleet(ns, "old")
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		playStatefulSet(t, env.Client, ns, "old", "rev1")
		for m := 0; m < 3; m++ {
			ip := fmt.Sprintf("127.14.%d.%d", 20+i, m+1)
			serveState(t, ip)
			runningMember(t, env.Client, ns, "old", m, false, "rev1", ip)
		}
		h.reconcile(f)
		before := &appsv1.StatefulSet{}
		require.NoError(t, h.get(before, ns, "old"))
		assert.Equal(t, labels.MeshEnabled, namespaceLabels(t, h, ns)[labels.Mesh], "%s: requested before any mesh exists", ns)

		enroll(t, env.Client, ns, dp)
		h.reconcile(f)
		after := &appsv1.StatefulSet{}
		require.NoError(t, h.get(after, ns, "old"))
		pods := &corev1.PodList{}
		if dp == "ambient" {
			assert.True(t, equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template), "ambient: joining changes no template")
			require.NoError(t, h.get(f, ns, "old"))
			assert.Equal(t, string(mesh.Ambient), f.Status.Mesh)
			continue
		}
		assert.Equal(t, "true", after.Spec.Template.Labels[labels.IstioInject], "sidecar: rolls in like spec.mesh.istio with defaults")
		require.NoError(t, h.get(policy(mesh.PeerAuthenticationKind), ns, "old-mesh"), "the peer port is PERMISSIVE before the first member rolls")
		// The StatefulSet controller sees the new template; the roll replaces one member per step.
		playStatefulSetRevisions(t, env.Client, ns, "old", "rev1", "rev2")
		h.reconcile(f)
		require.NoError(t, env.Client.List(ctx, pods, client.InNamespace(ns)))
		terminating := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				terminating++
			}
		}
		gone := 3 - len(pods.Items) + terminating
		assert.Equal(t, 1, gone, "one member at a time")
		require.NoError(t, h.get(f, ns, "old"))
		assert.Equal(t, string(mesh.Joining), f.Status.Mesh)
	}
}

// playStatefulSetRevisions plays the StatefulSet controller mid-roll: the
// members run current, the template is update.
func playStatefulSetRevisions(t *testing.T, c client.Client, ns, name, current, update string) {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	require.NoError(t, c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, sts))
	sts.Status.ObservedGeneration = sts.Generation
	sts.Status.Replicas = *sts.Spec.Replicas
	sts.Status.CurrentRevision, sts.Status.UpdateRevision = current, update
	require.NoError(t, c.Status().Update(context.Background(), sts))
}

// adminLabel plays an admin's `kubectl label --overwrite`: a plain patch,
// the field manager kubectl uses.
func adminLabel(t *testing.T, c client.Client, ns, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, labels.Mesh, value)
	require.NoError(t, c.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("kubectl-label")))
}

func testAdminDisabledWins(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	h := newHarness(t, env, true)

	// Set before the fleets exist.
	createNamespace(t, env.Client, "optout")
	adminLabel(t, env.Client, "optout", labels.MeshDisabled)
	auto, enabled := fleet("optout", "auto"), fleet("optout", "enabled")
	enabled.Spec.Mesh = &v1alpha1.Mesh{Mode: v1alpha1.MeshEnabled}
	for _, f := range []*v1alpha1.CelldFleet{auto, enabled} {
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		assert.Equal(t, labels.MeshDisabled, namespaceLabels(t, h, "optout")[labels.Mesh], "%s must not override the admin", f.Name)
		c := condition(t, h, f, v1alpha1.ConditionMeshReady)
		if !assert.NotNil(t, c, "%s says why it is not meshed", f.Name) {
			continue
		}
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonNamespaceOptedOut), c.Reason)
		assert.Contains(t, c.Message, labels.Mesh+"="+labels.MeshDisabled)
	}
	if c := condition(t, h, enabled, v1alpha1.ConditionMeshReady); assert.NotNil(t, c) {
		assert.Contains(t, c.Message, "spec.mesh.mode is enabled", "an enabled fleet says it cannot join")
	}

	// Set after a fleet asked: the fleet stops asking, the admin's value stays.
	createNamespace(t, env.Client, "late")
	late := fleet("late", "enabled")
	late.Spec.Mesh = &v1alpha1.Mesh{Mode: v1alpha1.MeshEnabled}
	require.NoError(t, env.Client.Create(ctx, late))
	h.reconcile(late)
	require.Equal(t, labels.MeshEnabled, namespaceLabels(t, h, "late")[labels.Mesh])
	adminLabel(t, env.Client, "late", labels.MeshDisabled)
	h.reconcile(late)
	h.reconcile(late)
	assert.Equal(t, labels.MeshDisabled, namespaceLabels(t, h, "late")[labels.Mesh], "the fleet must not flip disabled back")
	if c := condition(t, h, late, v1alpha1.ConditionMeshReady); assert.NotNil(t, c) {
		assert.Equal(t, string(v1alpha1.ReasonNamespaceOptedOut), c.Reason)
	}

	// The admin lifts the opt-out: the fleet asks again.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, labels.Mesh)
	require.NoError(t, env.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "late"}},
		client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("kubectl-label")))
	h.reconcile(late)
	assert.Equal(t, labels.MeshEnabled, namespaceLabels(t, h, "late")[labels.Mesh])
	assert.Equal(t, string(v1alpha1.ReasonAwaitingEnrollment), condition(t, h, late, v1alpha1.ConditionMeshReady).Reason)
}
