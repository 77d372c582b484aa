//go:build integration

package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

func TestIntegration(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	env := testenv.Start(t, s, "mesh-operator/config/crd/bases")
	ctx := context.Background()

	t.Run("defaults and CEL", func(t *testing.T) {
		m := &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "defaults"}}
		require.NoError(t, env.Client.Create(ctx, m))
		got := &v1alpha1.ServiceMesh{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(m), got))
		assert.Equal(t, v1alpha1.ModeManaged, got.Spec.Mode)
		assert.Equal(t, v1alpha1.ProviderAuto, got.Spec.Provider)
		assert.Equal(t, v1alpha1.DataPlaneAmbient, got.Spec.DataPlane)
		assert.Equal(t, v1alpha1.MTLSStrict, got.Spec.MTLS.Mode)
		assert.Equal(t, v1alpha1.IsolationNamespace, got.Spec.Isolation)
		require.NoError(t, env.Client.Delete(ctx, got))

		for name, tc := range map[string]struct {
			spec v1alpha1.ServiceMeshSpec
			msg  string
		}{
			"external with sail": {v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeExternal, Provider: v1alpha1.ProviderSail}, "mode external never does"},
			"bad version":        {v1alpha1.ServiceMeshSpec{Version: "latest"}, "spec.version must look like 1.30"},
			"bad namespace":      {v1alpha1.ServiceMeshSpec{EnrollNamespaces: []string{"Not_A_Namespace"}}, "spec.enrollNamespaces must hold namespace names"},
			"bad isolation":      {v1alpha1.ServiceMeshSpec{Isolation: "total"}, "spec.isolation"},
		} {
			t.Run(name, func(t *testing.T) {
				err := env.Client.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}, Spec: tc.spec})
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.msg)
			})
		}
	})

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh-system"}}))
	r := &ServiceMeshReconciler{
		Client: env.Client, SecretReader: env.Client, Recorder: &events.FakeRecorder{}, Now: time.Now,
		Config: Config{OperatorNamespace: "mesh-system", LicenseSecret: "license", Keys: []ed25519.PublicKey{pub}},
	}
	reconcile := func(name string) *v1alpha1.ServiceMesh {
		t.Helper()
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: name}})
		require.NoError(t, err)
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, m))
		return m
	}

	t.Run("a second name is Refused", func(t *testing.T) {
		require.NoError(t, env.Client.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "other"}}))
		m := reconcile("other")
		assert.Equal(t, PhaseRefused, m.Status.Phase)
		assert.True(t, meta.IsStatusConditionTrue(m.Status.Conditions, ConditionRefused))
	})

	require.NoError(t, env.Client.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}))
	t.Run("no license Secret: PreviewLocked", func(t *testing.T) {
		m := reconcile("cluster")
		c := meta.FindStatusCondition(m.Status.Conditions, ConditionPreviewLocked)
		require.NotNil(t, c)
		assert.Equal(t, string(license.ReasonMissing), c.Reason)
		assert.Equal(t, PhasePreviewLocked, m.Status.Phase)
	})

	sign := func(features []string, notAfter time.Time) []byte {
		b, err := license.Sign(license.License{Version: license.FormatVersion, ID: "lic-test", Licensee: "integration", Features: features,
			IssuedAt: time.Now().Add(-2 * time.Hour), NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}, priv)
		require.NoError(t, err)
		return b
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "license"},
		Data: map[string][]byte{"license": sign([]string{"analytics"}, time.Now().Add(time.Hour))}}
	require.NoError(t, env.Client.Create(ctx, secret))
	t.Run("license without either feature: PreviewLocked", func(t *testing.T) {
		c := meta.FindStatusCondition(reconcile("cluster").Status.Conditions, ConditionPreviewLocked)
		require.NotNil(t, c)
		assert.Equal(t, string(license.ReasonFeatureMissing), c.Reason)
	})

	t.Run("a valid preview license unlocks it without a restart", func(t *testing.T) {
		secret.Data["license"] = sign([]string{"preview"}, time.Now().Add(time.Hour))
		require.NoError(t, env.Client.Update(ctx, secret))
		m := reconcile("cluster")
		c := meta.FindStatusCondition(m.Status.Conditions, ConditionPreviewLocked)
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(license.ReasonValid), c.Reason)
		assert.Equal(t, PhaseLicensed, m.Status.Phase)
	})

	t.Run("an expired license locks it again", func(t *testing.T) {
		secret.Data["license"] = sign([]string{"service-mesh"}, time.Now().Add(-time.Minute))
		require.NoError(t, env.Client.Update(ctx, secret))
		c := meta.FindStatusCondition(reconcile("cluster").Status.Conditions, ConditionPreviewLocked)
		require.NotNil(t, c)
		assert.Equal(t, string(license.ReasonExpired), c.Reason)
	})
}
