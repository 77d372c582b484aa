//go:build integration

package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/metrics"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

const operatorUser = "system:serviceaccount:mesh-system:mesh-operator"

// grantOperatorRBAC gives operatorUser exactly what the chart gives the
// operator: the generated ClusterRole, with installer also the generated Sail
// installer ClusterRole (chart value sail.install=true), plus the namespaced
// Role for its license Secret.
func grantOperatorRBAC(t *testing.T, c client.Client, root string, installer bool) {
	ctx := context.Background()
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}}
	files := []string{"mesh-operator/config/rbac/role.yaml"}
	if installer {
		files = append(files, "mesh-operator/config/rbac/sail-installer/role.yaml")
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		role := &rbacv1.ClusterRole{}
		require.NoError(t, yaml.Unmarshal(data, role))
		require.NoError(t, c.Create(ctx, role))
		require.NoError(t, c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, Subjects: subject}))
	}
	require.NoError(t, c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "mesh-operator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"license"}, Verbs: []string{"get"}}}}))
	require.NoError(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "mesh-operator"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "mesh-operator"}, Subjects: subject}))
	if installer {
		// As the chart's RELEASE-sail-installer Role: the Sail release's
		// Helm records, Secrets in the operator's own namespace.
		require.NoError(t, c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "mesh-operator-sail-installer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "delete"}}}}))
		require.NoError(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "mesh-operator-sail-installer"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "mesh-operator-sail-installer"}, Subjects: subject}))
	}
	// One request each binding grants: the reconciler must not start before they apply.
	granted := []authorizationv1.ResourceAttributes{coreAccess[0],
		{Verb: "get", Resource: "secrets", Namespace: "mesh-system", Name: "license"}}
	if installer {
		granted = append(granted, installerOnlyAccess[0], authorizationv1.ResourceAttributes{Verb: "create", Resource: "secrets", Namespace: "mesh-system"})
	}
	testenv.WaitAllowed(t, c, operatorUser, granted...)
}

func TestIntegration(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	env := testenv.Start(t, s, "mesh-operator/config/crd/bases")
	root := testenv.RepoRoot(t)
	ctx := context.Background()
	admin := env.Client

	t.Run("defaults and CEL", func(t *testing.T) {
		m := &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "defaults"}}
		require.NoError(t, admin.Create(ctx, m))
		got := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(m), got))
		assert.Equal(t, v1alpha1.ModeManaged, got.Spec.Mode)
		assert.Equal(t, v1alpha1.ProviderAuto, got.Spec.Provider)
		assert.Equal(t, v1alpha1.DataPlaneAmbient, got.Spec.DataPlane)
		assert.Equal(t, v1alpha1.MTLSStrict, got.Spec.MTLS.Mode)
		assert.Equal(t, v1alpha1.IsolationNamespace, got.Spec.Isolation)
		require.NoError(t, admin.Delete(ctx, got))

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
				err := admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}, Spec: tc.spec})
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.msg)
			})
		}
	})

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	_, otherPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh-system"}}))
	grantOperatorRBAC(t, admin, root, true)

	// The reconciler acts as the operator's ServiceAccount under the
	// generated RBAC: a verb missing from the markers fails the test.
	asOperator := rest.CopyConfig(env.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	opClient, err := client.New(asOperator, client.Options{Scheme: s})
	require.NoError(t, err)
	dc, err := discovery.NewDiscoveryClientForConfig(asOperator)
	require.NoError(t, err)
	archive := packageChart(t, root)
	repo := serveChart(t, archive)
	recorder := events.NewFakeRecorder(100)
	licMetrics := metrics.NewLicense(time.Now)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(licMetrics))
	cfg := Config{OperatorNamespace: "mesh-system", LicenseSecret: "license", Keys: []ed25519.PublicKey{pub},
		SailInstall: true, SailNamespace: "sail-operator", HelmTimeout: time.Minute,
		// The test repository is plain http on 127.0.0.1: allowed only explicitly.
		SailChart: pinnedChart(repo.URL, "1.30.0", map[string][]byte{"1.30.0": archive})}
	r := &ServiceMeshReconciler{
		Client: opClient, Reader: opClient, Served: &served.Catalog{Discovery: dc}, HTTP: repo.Client(),
		Helm:   &sailinstall.Helm{Config: asOperator, StorageNamespace: "mesh-system", Namespace: cfg.SailNamespace, ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute},
		Config: cfg, Recorder: recorder, Now: time.Now, Metrics: licMetrics,
	}
	fake := fakeSail{t: t, c: admin}

	reconcile := func(name string) *v1alpha1.ServiceMesh {
		t.Helper()
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: name}})
		require.NoError(t, err)
		m := &v1alpha1.ServiceMesh{}
		err = admin.Get(ctx, client.ObjectKey{Name: name}, m)
		if apierrors.IsNotFound(err) {
			return nil
		}
		require.NoError(t, err)
		return m
	}
	cond := func(m *v1alpha1.ServiceMesh, typ v1alpha1.ConditionType) metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(typ))
		require.NotNil(t, c, "condition %s", typ)
		assert.Equal(t, m.Generation, c.ObservedGeneration, "condition %s observedGeneration", typ)
		return *c
	}
	setSpec := func(name string, mutate func(*v1alpha1.ServiceMeshSpec)) {
		t.Helper()
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, m))
		mutate(&m.Spec)
		require.NoError(t, admin.Update(ctx, m))
	}
	exists := func(obj client.Object) bool {
		t.Helper()
		err := admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	getSail := func(kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(kind))
		u.SetName("default")
		if !exists(u) {
			return nil
		}
		return u
	}
	holdersRecord := func() *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "sail-operator", Name: sailinstall.RecordName}}
		if !exists(cm) {
			return nil
		}
		return cm
	}
	sailServed := func() bool {
		_, err := dc.ServerResourcesForGroupVersion("sailoperator.io/v1")
		return err == nil
	}
	deleteMesh := func(name string) {
		t.Helper()
		require.NoError(t, admin.Delete(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}

	t.Run("a second name is Refused", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "other"}}))
		m := reconcile("other")
		assert.Equal(t, PhaseRefused, m.Status.Phase)
		assert.Equal(t, metav1.ConditionTrue, cond(m, v1alpha1.ConditionRefused).Status)
		assert.Empty(t, m.Finalizers)
		deleteMesh("other")
	})

	sign := func(key ed25519.PrivateKey, features []string, notBefore, notAfter time.Time) []byte {
		b, err := license.Sign(license.License{Version: license.FormatVersion, ID: "lic-test", Licensee: "integration", Features: features,
			IssuedAt: time.Now().Add(-2 * time.Hour), NotBefore: notBefore, NotAfter: notAfter}, key)
		require.NoError(t, err)
		return b
	}
	hourAgo, inAnHour := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)

	// Everything starts as mode managed/ambient: a license failure must stop
	// it before anything is installed.
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Version: "1.30"}}))
	t.Run("no license Secret: PreviewLocked", func(t *testing.T) {
		m := reconcile("cluster")
		assert.Equal(t, string(license.ReasonMissing), cond(m, v1alpha1.ConditionPreviewLocked).Reason)
		assert.Equal(t, PhasePreviewLocked, m.Status.Phase)
		n, err := testutil.GatherAndCount(reg, metrics.LicenseExpiryDays)
		require.NoError(t, err)
		assert.Zero(t, n, "no license: no expiry-days series")
	})

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "license"}, Data: map[string][]byte{"license": nil}}
	require.NoError(t, admin.Create(ctx, secret))
	t.Run("every license failure is PreviewLocked and changes nothing", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			data   []byte
			reason license.Reason
		}{
			{"empty key", nil, license.ReasonMissing},
			{"not a license", []byte("hello"), license.ReasonMalformed},
			{"signed by another key", sign(otherPriv, []string{"preview"}, hourAgo, inAnHour), license.ReasonBadSignature},
			{"not yet valid", sign(priv, []string{"preview"}, inAnHour, inAnHour.Add(time.Hour)), license.ReasonNotYetValid},
			{"expired", sign(priv, []string{"service-mesh"}, hourAgo.Add(-time.Hour), hourAgo), license.ReasonExpired},
			{"without either feature", sign(priv, []string{"analytics"}, hourAgo, inAnHour), license.ReasonFeatureMissing},
		} {
			t.Run(tc.name, func(t *testing.T) {
				secret.Data["license"] = tc.data
				require.NoError(t, admin.Update(ctx, secret))
				m := reconcile("cluster")
				c := cond(m, v1alpha1.ConditionPreviewLocked)
				assert.Equal(t, metav1.ConditionTrue, c.Status)
				assert.Equal(t, string(tc.reason), c.Reason)
				assert.Equal(t, PhasePreviewLocked, m.Status.Phase)
				assert.Equal(t, metav1.ConditionFalse, cond(m, v1alpha1.ConditionReady).Status)
				assert.Nil(t, meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionControlPlaneReady)))
				assert.Empty(t, m.Finalizers)
				assert.False(t, exists(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}), "nothing installed")
			})
		}
	})

	t.Run("a license added later takes effect without a restart; mode external never touches the control plane", func(t *testing.T) {
		setSpec("cluster", func(s *v1alpha1.ServiceMeshSpec) {
			s.Mode, s.DataPlane = v1alpha1.ModeExternal, v1alpha1.DataPlaneSidecar
		})
		secret.Data["license"] = sign(priv, []string{"preview"}, hourAgo, time.Now().Add(36*time.Hour))
		require.NoError(t, admin.Update(ctx, secret))
		m := reconcile("cluster")
		c := cond(m, v1alpha1.ConditionPreviewLocked)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(license.ReasonValid), c.Reason)
		days := testutil.ToFloat64(prometheus.CollectorFunc(func(ch chan<- prometheus.Metric) {
			ms := make(chan prometheus.Metric, 2)
			licMetrics.Collect(ms)
			close(ms)
			for mt := range ms {
				if strings.Contains(mt.Desc().String(), metrics.LicenseExpiryDays) {
					ch <- mt
				}
			}
		}))
		assert.InDelta(t, 1.5, days, 0.01, "expiry metric in days")

		// External with no Istio API: blocked, and nothing written.
		assert.Equal(t, PhaseBlocked, m.Status.Phase)
		assert.Equal(t, string(v1alpha1.ReasonIstioAPIMissing), cond(m, v1alpha1.ConditionReady).Reason)
		assert.Equal(t, v1alpha1.ManagementExternal, m.Status.ControlPlane.Management)
		assert.Empty(t, m.Finalizers)
		assert.False(t, exists(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}))
		assert.False(t, exists(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}))
		assert.Zero(t, repo.count("/index.yaml"), "external never fetches the Sail chart")
	})

	t.Run("managed with an unreachable chart repository: Error, nothing written", func(t *testing.T) {
		setSpec("cluster", func(s *v1alpha1.ServiceMeshSpec) {
			s.Mode, s.DataPlane = v1alpha1.ModeManaged, v1alpha1.DataPlaneAmbient
		})
		badCfg := cfg
		badCfg.SailChart.Repository = "http://127.0.0.1:1/charts"
		bad := &ServiceMeshReconciler{Client: opClient, Reader: opClient, Served: &served.Catalog{Discovery: dc}, HTTP: repo.Client(), Helm: r.Helm,
			Config: badCfg, Recorder: recorder, Now: time.Now}
		_, err := bad.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
		require.NoError(t, err, "a failed step is reported in status, not returned")
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		assert.Equal(t, PhaseError, m.Status.Phase)
		assert.Equal(t, string(v1alpha1.ReasonSailChartUnavailable), cond(m, v1alpha1.ConditionReady).Reason)
		assert.Equal(t, metav1.ConditionTrue, cond(m, v1alpha1.ConditionStalled).Status)
		assert.Empty(t, m.Finalizers)
		assert.False(t, exists(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}))
		assert.True(t, sawEvent(recorder, "SailChartUnavailable"))
	})

	t.Run("managed: installs the Sail Operator from the chart repository, then owns the control plane", func(t *testing.T) {
		m := reconcile("cluster")
		assert.Equal(t, PhaseProgressing, m.Status.Phase)
		assert.Equal(t, string(v1alpha1.ReasonSailOperatorInstalling), cond(m, v1alpha1.ConditionControlPlaneReady).Reason)
		assert.Contains(t, m.Finalizers, Finalizer)
		assert.Equal(t, int32(1), repo.count("/index.yaml"))
		assert.Equal(t, int32(1), repo.count("/charts/sail-operator-1.30.0.tgz"))

		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}
		require.True(t, exists(ns))
		assert.Equal(t, sail.ManagedBy, ns.Labels["app.kubernetes.io/managed-by"])
		assert.True(t, exists(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "sail-operator", Name: "sail-operator"}}))
		assert.True(t, exists(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}), "escalate lets the operator grant the Sail ClusterRole")
		rec := holdersRecord()
		require.NotNil(t, rec)
		assert.Equal(t, []string{sailinstall.HolderKey}, keys(rec.Data))
		assert.Equal(t, "istiocnis.sailoperator.io,istios.sailoperator.io,peerauthentications.security.istio.io,ztunnels.sailoperator.io",
			rec.Annotations[sailinstall.AnnotationCRDs])
		require.NotNil(t, m.Status.SailOperator)
		assert.Equal(t, v1alpha1.SailInstalled, m.Status.SailOperator.Source)
		assert.Equal(t, "1.30.0", m.Status.SailOperator.ChartVersion)
		eventually(t, 10*time.Second, "the Sail API in discovery", sailServed)

		m = reconcile("cluster")
		assert.Equal(t, PhaseProgressing, m.Status.Phase)
		for _, kind := range []string{sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel} {
			u := getSail(kind)
			require.NotNil(t, u, kind)
			ref := metav1.GetControllerOf(u)
			require.NotNil(t, ref, kind)
			assert.Equal(t, m.UID, ref.UID)
		}
		istio := getSail(sail.KindIstio)
		assert.Equal(t, "v1.30-latest", istio.Object["spec"].(map[string]any)["version"])
		assert.Equal(t, "ambient", istio.Object["spec"].(map[string]any)["profile"])
		for _, n := range []string{"istio-system", "istio-cni", "ztunnel"} {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
			require.True(t, exists(ns), n)
			assert.True(t, metav1.IsControlledBy(ns, m), n)
		}
		assert.Equal(t, v1alpha1.ManagementManaged, m.Status.ControlPlane.Management)
		assert.Equal(t, "sail", m.Status.Provider)
		assert.Equal(t, int32(1), repo.count("/charts/sail-operator-1.30.0.tgz"), "the chart is fetched once")
	})

	t.Run("readiness gating: Ready only when every Sail CR is Ready for its current generation", func(t *testing.T) {
		m := reconcile("cluster")
		assert.Equal(t, metav1.ConditionFalse, cond(m, v1alpha1.ConditionReady).Status)
		assert.Equal(t, string(v1alpha1.ReasonIstioProgressing), cond(m, v1alpha1.ConditionControlPlaneReady).Reason, "no status from Sail yet")

		fake.sync(sail.KindIstio, sail.KindIstioCNI)
		m = reconcile("cluster")
		assert.Equal(t, metav1.ConditionFalse, cond(m, v1alpha1.ConditionControlPlaneReady).Status)
		assert.Equal(t, string(v1alpha1.ReasonZTunnelNotReady), cond(m, v1alpha1.ConditionControlPlaneReady).Reason)
		assert.Equal(t, PhaseProgressing, m.Status.Phase)
		assert.Equal(t, metav1.ConditionTrue, cond(m, v1alpha1.ConditionReconciling).Status)

		fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel)
		m = reconcile("cluster")
		assert.Equal(t, PhaseReady, m.Status.Phase)
		assert.Equal(t, metav1.ConditionTrue, cond(m, v1alpha1.ConditionControlPlaneReady).Status)
		assert.Equal(t, metav1.ConditionTrue, cond(m, v1alpha1.ConditionReady).Status)
		assert.Equal(t, metav1.ConditionFalse, cond(m, v1alpha1.ConditionStalled).Status)
		assert.Equal(t, &v1alpha1.ControlPlaneStatus{Management: v1alpha1.ManagementManaged, Namespace: "istio-system", Revision: "default",
			Version: "v1.30-latest", DataPlane: v1alpha1.DataPlaneAmbient, Resources: []string{"Istio/default", "IstioCNI/default", "ZTunnel/default"}}, m.Status.ControlPlane)

		// A settled reconcile writes nothing.
		before := getSail(sail.KindIstio).GetResourceVersion()
		meshRV := m.ResourceVersion
		m = reconcile("cluster")
		assert.Equal(t, before, getSail(sail.KindIstio).GetResourceVersion())
		assert.Equal(t, meshRV, m.ResourceVersion)

		// A new version is a new generation: Ready drops until Sail reports on it.
		setSpec("cluster", func(s *v1alpha1.ServiceMeshSpec) { s.Version = "1.30.1" })
		m = reconcile("cluster")
		assert.Equal(t, "v1.30.1", getSail(sail.KindIstio).Object["spec"].(map[string]any)["version"])
		assert.Equal(t, metav1.ConditionFalse, cond(m, v1alpha1.ConditionReady).Status)
		assert.Equal(t, string(v1alpha1.ReasonIstioProgressing), cond(m, v1alpha1.ConditionControlPlaneReady).Reason)
		fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel)
		assert.Equal(t, PhaseReady, reconcile("cluster").Status.Phase)
	})

	t.Run("Cilium with ambient: PreconditionNotMet holds the control plane; sidecar clears it", func(t *testing.T) {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium"}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "cilium"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": "cilium"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "example.invalid/cilium"}}}}}}
		require.NoError(t, admin.Create(ctx, ds))
		before := getSail(sail.KindIstio).GetResourceVersion()
		m := reconcile("cluster")
		c := cond(m, v1alpha1.ConditionPreconditionNotMet)
		assert.Equal(t, metav1.ConditionTrue, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonCiliumAmbient), c.Reason)
		assert.Contains(t, c.Message, "dataPlane: sidecar")
		assert.Equal(t, PhaseBlocked, m.Status.Phase)
		assert.Equal(t, string(v1alpha1.ReasonPreconditionNotMet), cond(m, v1alpha1.ConditionReady).Reason)
		assert.Equal(t, metav1.ConditionTrue, cond(m, v1alpha1.ConditionStalled).Status)
		assert.True(t, m.Status.Detected.Cilium)
		assert.Equal(t, before, getSail(sail.KindIstio).GetResourceVersion(), "held: nothing changed")

		setSpec("cluster", func(s *v1alpha1.ServiceMeshSpec) { s.DataPlane = v1alpha1.DataPlaneSidecar })
		m = reconcile("cluster")
		assert.Equal(t, metav1.ConditionFalse, cond(m, v1alpha1.ConditionPreconditionNotMet).Status)
		assert.NotNil(t, getSail(sail.KindZTunnel).GetDeletionTimestamp(), "ambient components are removed")
		assert.NotNil(t, getSail(sail.KindIstioCNI).GetDeletionTimestamp())
		_, hasValues := getSail(sail.KindIstio).Object["spec"].(map[string]any)["values"]
		assert.False(t, hasValues, "fields we stop applying disappear")
		fake.sync(sail.KindIstio)
		m = reconcile("cluster")
		assert.Nil(t, getSail(sail.KindZTunnel))
		assert.Nil(t, getSail(sail.KindIstioCNI))
		assert.Equal(t, PhaseReady, m.Status.Phase)
		assert.Equal(t, []string{"Istio/default"}, m.Status.ControlPlane.Resources)
		require.NoError(t, admin.Delete(ctx, ds))
	})

	t.Run("teardown while another holder needs the Sail Operator keeps it", func(t *testing.T) {
		patch := []byte(`{"data":{"other-tool.example.com":"needs Sail for its gateways"}}`)
		require.NoError(t, admin.Patch(ctx, holdersRecord(), client.RawPatch(types.MergePatchType, patch)))
		deleteMesh("cluster")
		m := reconcile("cluster")
		require.NotNil(t, m, "the finalizer waits for Sail")
		assert.Equal(t, PhaseDeleting, m.Status.Phase)
		assert.Equal(t, string(v1alpha1.ReasonWaitingForSail), cond(m, v1alpha1.ConditionReconciling).Reason)
		assert.NotNil(t, getSail(sail.KindIstio).GetDeletionTimestamp())
		fake.sync()
		assert.Nil(t, reconcile("cluster"), "the ServiceMesh is gone")
		assert.Nil(t, getSail(sail.KindIstio))
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}
		require.True(t, exists(ns))
		assert.NotNil(t, ns.DeletionTimestamp, "the namespace we created is deleted")
		assert.True(t, exists(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "sail-operator", Name: "sail-operator"}}), "Sail stays")
		assert.True(t, exists(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "istios.sailoperator.io"}}))
		assert.Equal(t, []string{"other-tool.example.com"}, keys(holdersRecord().Data))
		assert.True(t, sawEvent(recorder, "SailOperatorKept"))
	})

	t.Run("a new ServiceMesh joins the existing install; the last holder out uninstalls Sail and its CRDs", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar}}))
		m := reconcile("cluster")
		assert.Equal(t, []string{"other-tool.example.com", sailinstall.HolderKey}, keys(holdersRecord().Data))
		assert.Equal(t, []string{"other-tool.example.com", sailinstall.HolderKey}, m.Status.SailOperator.Holders)
		assert.Equal(t, int32(1), repo.count("/charts/sail-operator-1.30.0.tgz"), "no second install")
		require.NotNil(t, getSail(sail.KindIstio))

		patch := []byte(`{"data":{"other-tool.example.com":null}}`)
		require.NoError(t, admin.Patch(ctx, holdersRecord(), client.RawPatch(types.MergePatchType, patch)))
		deleteMesh("cluster")
		require.NotNil(t, reconcile("cluster"))
		fake.sync()
		assert.Nil(t, reconcile("cluster"))
		assert.False(t, exists(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "sail-operator", Name: "sail-operator"}}), "release uninstalled")
		assert.False(t, exists(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}))
		assert.Nil(t, holdersRecord())
		for _, n := range []string{"istios.sailoperator.io", "istiocnis.sailoperator.io", "ztunnels.sailoperator.io", "peerauthentications.security.istio.io"} {
			crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: n}}
			assert.True(t, !exists(crd) || crd.DeletionTimestamp != nil, "CRD %s removed", n)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}
		assert.True(t, !exists(ns) || ns.DeletionTimestamp != nil, "the namespace created for the install is removed")
		assert.True(t, sawEvent(recorder, "SailOperatorUninstalled"))
		eventually(t, 20*time.Second, "the Sail API to disappear", func() bool { return !sailServed() })
		eventually(t, 20*time.Second, "the CRDs to be gone", func() bool {
			return !exists(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "peerauthentications.security.istio.io"}}) &&
				!exists(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "istios.sailoperator.io"}})
		})
	})

	installCRDs(t, admin, mustGlob(t, filepath.Join(root, "mesh-operator/config/sail-test-crds/*.yaml"))...)
	userIstio := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"version": "v1.29.2", "namespace": "istio-user"}}}
	userIstio.SetGroupVersionKind(sail.GVK(sail.KindIstio))
	userIstio.SetName("default")
	eventually(t, 10*time.Second, "the Sail API in discovery", sailServed)
	require.NoError(t, admin.Create(ctx, userIstio))

	t.Run("adopt: configure only, and deletion leaves the control plane intact", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, DataPlane: v1alpha1.DataPlaneSidecar}}))
		m := reconcile("cluster")
		assert.Equal(t, PhaseProgressing, m.Status.Phase, "not Ready until the adopted Istio is")
		fake.sync(sail.KindIstio)
		rv := getSail(sail.KindIstio).GetResourceVersion()
		m = reconcile("cluster")
		assert.Equal(t, PhaseReady, m.Status.Phase)
		assert.Equal(t, "sail", m.Status.Provider)
		assert.Equal(t, &v1alpha1.ControlPlaneStatus{Management: v1alpha1.ManagementAdopted, Namespace: "istio-user", Revision: "default",
			Version: "v1.29.2", DataPlane: v1alpha1.DataPlaneSidecar, Resources: []string{"Istio/default"}}, m.Status.ControlPlane)
		assert.Equal(t, v1alpha1.SailPreinstalled, m.Status.SailOperator.Source)
		assert.Empty(t, m.Finalizers)
		u := getSail(sail.KindIstio)
		assert.Equal(t, rv, u.GetResourceVersion(), "adopt never writes the control plane")
		assert.Empty(t, u.GetOwnerReferences())

		// Ambient on an adopted mesh without ztunnel is not ready for it.
		setSpec("cluster", func(s *v1alpha1.ServiceMeshSpec) { s.DataPlane = v1alpha1.DataPlaneAmbient })
		m = reconcile("cluster")
		assert.Equal(t, string(v1alpha1.ReasonZTunnelMissing), cond(m, v1alpha1.ConditionControlPlaneReady).Reason)

		deleteMesh("cluster")
		assert.Nil(t, reconcile("cluster"))
		assert.NotNil(t, getSail(sail.KindIstio), "the adopted Istio is left intact")
	})

	t.Run("managed auto-adopts an existing mesh and installs nothing", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar}}))
		m := reconcile("cluster")
		assert.Equal(t, PhaseReady, m.Status.Phase)
		assert.Equal(t, v1alpha1.ManagementAdopted, m.Status.ControlPlane.Management)
		assert.Empty(t, m.Finalizers)
		assert.Nil(t, holdersRecord())
		assert.Equal(t, int32(1), repo.count("/charts/sail-operator-1.30.0.tgz"))
		assert.True(t, sawEvent(recorder, "Adopted"))
		deleteMesh("cluster")
		assert.Nil(t, reconcile("cluster"))
		require.NoError(t, admin.Delete(ctx, getSail(sail.KindIstio)))
		fake.sync()
	})

	t.Run("adopt a plain istiod: readiness from its Deployment", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-plain"}}))
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-plain", Name: "istiod-canary",
			Labels: map[string]string{"app": "istiod", "istio.io/rev": "canary"}}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "istiod"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.29.2"}}}}}}
		require.NoError(t, admin.Create(ctx, dep))
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar,
				ControlPlaneNamespace: "istio-plain"}}))
		m := reconcile("cluster")
		assert.Equal(t, string(v1alpha1.ReasonIstiodUnavailable), cond(m, v1alpha1.ConditionControlPlaneReady).Reason)
		assert.Equal(t, []string{"istio-plain/istiod-canary@canary"}, m.Status.Detected.Istiods)

		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, AvailableReplicas: 1, ReadyReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
		require.NoError(t, admin.Status().Update(ctx, dep))
		m = reconcile("cluster")
		assert.Equal(t, PhaseReady, m.Status.Phase)
		assert.Equal(t, "istio", m.Status.Provider)
		assert.Equal(t, string(v1alpha1.ReasonIstiodAvailable), cond(m, v1alpha1.ConditionControlPlaneReady).Reason)
		assert.Equal(t, "canary", m.Status.ControlPlane.Revision)
		assert.Equal(t, "1.29.2", m.Status.ControlPlane.Version)
		deleteMesh("cluster")
		assert.Nil(t, reconcile("cluster"))
		assert.True(t, exists(dep), "adopted istiod left intact")
	})

	t.Run("OpenShift Service Mesh 2.x (Maistra) is deferred only while its control plane runs and no Sail Istio exists", func(t *testing.T) {
		installCRDs(t, admin, filepath.Join("testdata", "crds", "maistra.io_servicemeshcontrolplanes.yaml"))
		eventually(t, 10*time.Second, "maistra.io in discovery", func() bool {
			_, err := dc.ServerResourcesForGroupVersion("maistra.io/v2")
			return err == nil
		})
		// The plain istiod of the previous step would be adopted at the end.
		require.NoError(t, admin.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-plain", Name: "istiod-canary"}}))
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-maistra"}}))
		smcp := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"version": "v2.6"}}}
		smcp.SetGroupVersionKind(schema.GroupVersionKind{Group: "maistra.io", Version: "v2", Kind: "ServiceMeshControlPlane"})
		smcp.SetNamespace("istio-maistra")
		smcp.SetName("basic")
		require.NoError(t, admin.Create(ctx, smcp))
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar}}))
		m := reconcile("cluster")
		assert.Equal(t, PhaseDeferred, m.Status.Phase)
		c := cond(m, v1alpha1.ConditionReady)
		assert.Equal(t, string(v1alpha1.ReasonMaistraDetected), c.Reason)
		for _, want := range []string{"istio-maistra/basic", "adopt", "OpenShift Service Mesh 3", "Sail"} {
			assert.Contains(t, c.Message, want)
		}
		assert.Equal(t, "maistra", m.Status.Provider)
		assert.True(t, m.Status.Detected.Maistra)
		assert.Empty(t, m.Finalizers)
		assert.True(t, sawEvent(recorder, "Deferred"))
		assert.Nil(t, getSail(sail.KindIstio), "nothing created next to Maistra")

		// OSSM 3 side by side with a running OSSM 2: its Sail Istio is adopted.
		ossm3 := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"version": "v1.29.2", "namespace": "istio-ossm3"}}}
		ossm3.SetGroupVersionKind(sail.GVK(sail.KindIstio))
		ossm3.SetName("ossm3")
		require.NoError(t, admin.Create(ctx, ossm3))
		fake.sync(sail.KindIstio)
		m = reconcile("cluster")
		assert.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
		assert.Equal(t, v1alpha1.ManagementAdopted, m.Status.ControlPlane.Management)
		assert.Equal(t, []string{"Istio/ossm3"}, m.Status.ControlPlane.Resources)
		assert.Empty(t, m.Finalizers)

		// OSSM 2 uninstalled, its CRDs left behind by OLM: they alone defer nothing.
		require.NoError(t, admin.Delete(ctx, smcp))
		require.NoError(t, admin.Delete(ctx, ossm3))
		fake.sync()
		m = reconcile("cluster")
		assert.NotEqual(t, PhaseDeferred, m.Status.Phase)
		assert.Equal(t, v1alpha1.ManagementManaged, m.Status.ControlPlane.Management)
		assert.Equal(t, "sail", m.Status.Provider)
		assert.NotNil(t, getSail(sail.KindIstio), "the operator builds its own control plane")
		assert.True(t, m.Status.Detected.Maistra, "the leftover API is still reported")
	})

	t.Run("the manager wiring: SetupWithManager reconciles and exports the license metric", func(t *testing.T) {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		require.NoError(t, err)
		wired := cfg
		wired.OperatorNamespace = "kube-public" // no license there
		require.NoError(t, SetupWithManager(mgr, wired))
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- mgr.Start(mctx) }()
		defer func() {
			cancel()
			require.NoError(t, <-done)
		}()
		eventually(t, 20*time.Second, "the manager to lock the mesh", func() bool {
			m := &v1alpha1.ServiceMesh{}
			return admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m) == nil && m.Status.Phase == PhasePreviewLocked
		})
		n, err := testutil.GatherAndCount(ctrlmetrics.Registry, metrics.LicenseExpiryTimestamp)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
	})
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	require.NoError(t, err)
	require.NotEmpty(t, files, pattern)
	return files
}

// sawEvent drains the recorder and reports whether reason was among the events so far.
var seenEvents []string

func sawEvent(r *events.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-r.Events:
			seenEvents = append(seenEvents, e)
		default:
			for _, e := range seenEvents {
				if strings.Contains(e, " "+reason+" ") {
					return true
				}
			}
			return false
		}
	}
}
