//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestPausedMeshChange: a mesh change made while spec.maintenance.paused
// holds the member template is reported as held by the pause, not as a
// broken injector. The members still run the held template (without
// proxies when joining, with them when leaving), and deleting them, as the
// injector reasons advise, would bring them back unchanged.
func TestPausedMeshChange(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	ctx := context.Background()

	t.Run("joining", func(t *testing.T) {
		createNamespace(t, env.Client, "pausedjoin")
		f := fleet("pausedjoin", "pj")
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.reconcile(f)
		playStatefulSet(t, env.Client, "pausedjoin", "pj", "rev1")
		for i := range 3 {
			ip := fmt.Sprintf("127.14.9.%d", i+1)
			serveState(t, ip)
			runningMember(t, env.Client, "pausedjoin", "pj", i, false, "rev1", ip)
		}
		h.reconcile(f)

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"maintenance":{"paused":true},"mesh":{"istio":{}}}}`))))
		require.Eventually(t, func() bool {
			h.reconcile(f)
			c := condition(t, h, f, v1alpha1.ConditionMeshReady)
			return c != nil && c.ObservedGeneration == f.Generation
		}, 30*time.Second, time.Second)
		assertHeldMeshChange(t, h, f, "joining the mesh")
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, "pausedjoin", "pj"))
		assert.NotContains(t, sts.Spec.Template.Labels, labels.IstioInject, "paused: the template is held")

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"maintenance":{"paused":false}}}`))))
		h.reconcile(f)
		require.NoError(t, h.get(sts, "pausedjoin", "pj"))
		assert.Equal(t, "true", sts.Spec.Template.Labels[labels.IstioInject], "unpaused: the members roll into the mesh")
	})

	t.Run("leaving", func(t *testing.T) {
		createNamespace(t, env.Client, "pausedleave")
		f := fleet("pausedleave", "pl")
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.startMembers(f, "127.14.9.%d", 11, func(i int, ip string) { runningMember(t, env.Client, "pausedleave", "pl", i, true, "rev1", ip) })
		require.NoError(t, h.get(f, "pausedleave", "pl"))
		require.Equal(t, "Meshed", f.Status.Mesh)

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"maintenance":{"paused":true},"mesh":null}}`))))
		h.reconcile(f)
		assertHeldMeshChange(t, h, f, "leaving the mesh")
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, "pausedleave", "pl"))
		assert.Equal(t, "true", sts.Spec.Template.Labels[labels.IstioInject], "paused: the template is held")
	})
}

// assertHeldMeshChange: MeshReady and Provisioning name the pause and the
// held change, and no member Pod was deleted.
func assertHeldMeshChange(t *testing.T, h *harness, f *v1alpha1.CelldFleet, change string) {
	t.Helper()
	c := condition(t, h, f, v1alpha1.ConditionMeshReady)
	if assert.NotNil(t, c) {
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonMaintenancePaused), c.Reason, c.Message)
		assert.Contains(t, c.Message, change)
	}
	if prov := condition(t, h, f, v1alpha1.ConditionProvisioning); assert.NotNil(t, prov) {
		assert.Equal(t, string(v1alpha1.ReasonMaintenancePaused), prov.Reason, prov.Message)
	}
	assert.Equal(t, PhasePaused, f.Status.Phase)
	pods := &corev1.PodList{}
	require.NoError(t, h.env.Client.List(context.Background(), pods, client.InNamespace(f.Namespace)))
	for _, p := range pods.Items {
		assert.Nil(t, p.DeletionTimestamp, "%s: a paused fleet deletes no member", p.Name)
	}
}
