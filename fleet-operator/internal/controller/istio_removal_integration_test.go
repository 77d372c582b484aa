//go:build integration

package controller

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestIstioRemoved: leave the mesh, uninstall Istio (its CRDs deleted for
// real), restart the operator. A Left fleet, and a Leaving one whose
// policies went with the API, must not block on the missing API: they are
// told nothing about a spec.mesh they no longer have, and keep rolling.
// It has an API server of its own: the other tests need Istio's CRDs.
func TestIstioRemoved(t *testing.T) {
	ctx := context.Background()
	env := startEnvWithCRDClient(t)
	istioCRDs := istioCRDFile(t)
	env.InstallCRDs(t, istioCRDs)
	createNamespace(t, env.Client, "gone")
	h := newHarness(t, env, true)

	meshed := func(name string) *v1alpha1.CelldFleet {
		f := fleet("gone", name)
		f.Spec.Replicas = ptr.To[int32](1)
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		playStatefulSet(t, env.Client, "gone", name, "rev1")
		runningMember(t, env.Client, "gone", name, 0, true, "rev1", "")
		h.reconcile(f)
		require.NoError(t, h.get(f, "gone", name))
		require.Equal(t, "Meshed", f.Status.Mesh)
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":null}}`))))
		h.reconcile(f)
		return f
	}
	left := meshed("left")
	// Its member rolled out of the mesh: no proxy left.
	require.NoError(t, env.Client.Delete(ctx, memberPod("gone", "left", 0, true), client.GracePeriodSeconds(0)))
	runningMember(t, env.Client, "gone", "left", 0, false, "rev1", "")
	h.reconcile(left)
	require.NoError(t, h.get(left, "gone", "left"))
	require.Equal(t, "Left", left.Status.Mesh)
	noMeshTrace(t, h, "gone", "left", "left, no enrollment in effect")
	leaving := meshed("leaving")
	require.NoError(t, h.get(leaving, "gone", "leaving"))
	require.Equal(t, "Leaving", leaving.Status.Mesh)
	require.NoError(t, h.get(policy(mesh.PeerAuthenticationKind), "gone", "leaving-mesh"))

	// Uninstall Istio: its CRDs go, and every object of theirs with them.
	for _, name := range []string{"authorizationpolicies.security.istio.io", "peerauthentications.security.istio.io", "requestauthentications.security.istio.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		require.NoError(t, client.IgnoreNotFound(env.Client.Delete(ctx, crd)))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd))
		}, 30*time.Second, 200*time.Millisecond, "CRD %s deleted", name)
	}

	// The operator restarts: a new manager, a new REST mapper that has never
	// seen security.istio.io.
	opts := ctrl.Options{
		Scheme:                 env.Client.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	cfg := h.r.Config
	opts.Cache = cache.Options{}
	RestrictCache(cfg, &opts.Cache)
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	mgr, err := ctrl.NewManager(env.Config, opts)
	require.NoError(t, err)
	require.NoError(t, SetupWithManager(mgr, cfg))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	for _, name := range []string{"left", "leaving"} {
		f := &v1alpha1.CelldFleet{}
		require.NoError(t, h.get(f, "gone", name))
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":"registry.example/celld:2.0.0"}}`))))
		require.NoError(t, h.get(f, "gone", name))
		sts := &appsv1.StatefulSet{}
		rolled := assert.Eventually(t, func() bool {
			return h.get(f, "gone", name) == nil && f.Status.ObservedGeneration == f.Generation &&
				h.get(sts, "gone", name) == nil && sts.Spec.Template.Spec.Containers[0].Image == "registry.example/celld:2.0.0"
		}, 30*time.Second, 200*time.Millisecond)
		require.NoError(t, h.get(f, "gone", name))
		require.True(t, rolled, "%s keeps rolling after Istio is gone: %+v", name, f.Status.Conditions)
		blocked := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
		require.NotNil(t, blocked)
		assert.Equal(t, metav1.ConditionFalse, blocked.Status, "%s: %s", name, blocked.Message)
		assert.Equal(t, "false", sts.Spec.Template.Labels[labels.IstioInject], "%s: replacements still opt out of injection", name)
	}
}

// TestIstioRemovedUnderARunningOperator: Istio's CRDs are removed while the
// operator runs, whose discovery snapshot still lists them (and whose REST
// mapper never forgets a kind it has seen). A fleet created afterwards must
// not be stuck without any status: the failed apply is taken as "not
// served", the fleet reports it, and once Istio's API is back the fleet
// gets its policy (found by the transition explorer, seed 405: fleets with
// no Ready condition at rest). The catalog's clock stands still while the
// CRDs go, so its snapshot still lists them and only the write's 404 can
// tell.
func TestIstioRemovedUnderARunningOperator(t *testing.T) {
	ctx := context.Background()
	env := startEnvWithCRDClient(t)
	istioCRDs := istioCRDFile(t)
	env.InstallCRDs(t, istioCRDs)
	createNamespace(t, env.Client, "stale")
	// Labelled for ambient capture (an enrollment in effect), so the auto
	// fleets stand by with their policy.
	ambientLabel(t, env.Client, "stale", true)
	h := newHarness(t, env, true)
	first := fleet("stale", "first")
	require.NoError(t, env.Client.Create(ctx, first))
	h.reconcile(first)
	assertStandby(t, h, "stale", "first") // the catalog (and the mapper) have seen Istio's kinds
	frozen := time.Now()
	h.r.Served.Now = func() time.Time { return frozen }

	for _, name := range []string{"authorizationpolicies.security.istio.io", "peerauthentications.security.istio.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		require.NoError(t, env.Client.Delete(ctx, crd))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd))
		}, 30*time.Second, 200*time.Millisecond, "CRD %s deleted", name)
	}

	second := fleet("stale", "second")
	require.NoError(t, env.Client.Create(ctx, second))
	// A failed pass is reported in status (Reconciled) and looked at again,
	// not returned as an error.
	var reconciled []*metav1.Condition
	for range 3 {
		_, err := h.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(second)})
		require.NoError(t, err)
		require.NoError(t, h.get(second, "stale", "second"))
		reconciled = append(reconciled, meta.FindStatusCondition(second.Status.Conditions, string(v1alpha1.ConditionReconciled)))
	}
	ready := meta.FindStatusCondition(second.Status.Conditions, string(v1alpha1.ConditionReady))
	require.NotNil(t, ready, "the fleet reports its state (Reconciled: %v)", reconciled)
	require.NotNil(t, reconciled[0])
	assert.Equal(t, metav1.ConditionFalse, reconciled[0].Status, "the first reconcile wrote to the removed kind and was told so")
	assert.Contains(t, reconciled[0].Message, "could not find the requested resource", "the first reconcile wrote to the removed kind and was told so")
	if last := reconciled[len(reconciled)-1]; assert.NotNil(t, last) {
		assert.Equal(t, metav1.ConditionTrue, last.Status, "a missing optional API is reported, not a failed step: %s", last.Message)
	}
	h.r.Served.Now = nil

	// Istio's API comes back: the standby policy is applied again.
	env.InstallCRDs(t, istioCRDs)
	require.Eventually(t, func() bool {
		_, err := h.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(second)})
		return err == nil && h.get(policy(mesh.AuthorizationPolicyKind), "stale", "second-mesh") == nil
	}, 60*time.Second, time.Second, "the policy returns with Istio's API")
}
