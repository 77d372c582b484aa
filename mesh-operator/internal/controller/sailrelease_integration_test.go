//go:build integration

package controller

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// tenantUser may edit the Sail namespace's ConfigMaps, as a namespace
// editor may: nothing else.
const tenantUser = "tenant-sail-editor"

// TestSailReleaseRecordsForgedByATenantIntegration: the Sail release's Helm
// records were ConfigMaps in the Sail namespace, which any namespace editor
// there may create. A forged `sh.helm.release.v1.sail-operator.vN` record
// is the "current" release Helm diffs an upgrade against: whatever its
// manifest lists and the new chart does not is deleted with the installer
// role (here a ConfigMap of another team). The operator keeps its release
// in Secrets of its own namespace, checks the release against its own
// record before an upgrade or uninstall, adopts a ConfigMap-stored release
// of an earlier version only when it is what this operator renders, and
// otherwise refuses with SailReleaseUntrusted and leaves everything as it is.
func TestSailReleaseRecordsForgedByATenantIntegration(t *testing.T) {
	log := &eventLog{r: events.NewFakeRecorder(500)}
	b := startSailBed(t, log.r, true)
	ctx := context.Background()
	admin := b.admin
	archive := packageChart(t, b.root)
	repo := serveChart(t, archive)
	b.r.HTTP = repo.Client()
	b.r.Helm = operatorSailHelm(b.asOperator)
	b.r.Config.SailInstall = true
	b.r.Config.HelmTimeout = time.Minute
	b.r.Config.SailChart = pinnedChart(repo.URL, DefaultSailChartVersion, map[string][]byte{DefaultSailChartVersion: archive})
	fake := fakeSail{t: t, c: admin}
	sailNS := b.r.Config.SailNamespace

	exists := func(obj client.Object) bool {
		t.Helper()
		err := admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	// Another team's ConfigMap: nothing of the Sail installation.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other-team"}}))
	victim := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other-team", Name: "payroll"}, Data: map[string]string{"k": "v"}}
	require.NoError(t, admin.Create(ctx, victim))
	victimIntact := func(t *testing.T, when string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other-team", Name: "payroll"}}
		require.True(t, exists(cm) && cm.DeletionTimestamp == nil && cm.UID == victim.UID, "%s: the other team's ConfigMap, named in the forged release record, is intact", when)
	}
	sailDeployment := func() *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: sailNS, Name: "sail-operator"}}
		if !exists(d) {
			return nil
		}
		return d
	}

	// An earlier operator version installed Sail with its release records
	// as ConfigMaps in the Sail namespace (and wrote the holders record first).
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	require.NoError(t, err)
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sailNS, Labels: map[string]string{labels.ManagedBy: sail.ManagedBy}}}))
	crds, err := sailinstall.CRDNames(ch)
	require.NoError(t, err)
	require.NoError(t, sailinstall.Records{Client: admin, Reader: admin}.Create(ctx, sailNS, SailReleaseName, crds, sailinstall.HolderKey, "an earlier mesh-operator"))
	legacySailInstall(t, b.asOperator, sailNS, ch)
	legacyDeployment := sailDeployment()
	require.NotNil(t, legacyDeployment)

	// The tenant: edit rights on ConfigMaps in the Sail namespace, nothing more.
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: sailNS, Name: "tenant-edit"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}}}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: sailNS, Name: "tenant-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant-edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}}}))
	asTenant := rest.CopyConfig(b.env.Config)
	asTenant.Impersonate = rest.ImpersonationConfig{UserName: tenantUser}
	tenant, err := kubernetes.NewForConfig(asTenant)
	require.NoError(t, err)
	eventually(t, 10*time.Second, "the tenant's Role to apply", func() bool {
		_, err := tenant.CoreV1().ConfigMaps(sailNS).List(ctx, metav1.ListOptions{})
		return err == nil
	})
	forge := func(revision int) {
		t.Helper()
		forged := &releasev1.Release{
			Name: SailReleaseName, Namespace: sailNS, Version: revision,
			Info:   &releasev1.Info{Status: releasecommon.StatusDeployed, Description: "forged"},
			Chart:  &chart.Chart{Metadata: &chart.Metadata{APIVersion: "v2", Name: DefaultSailChartName, Version: DefaultSailChartVersion}},
			Config: map[string]any{"forged": true},
			Manifest: "---\n# Source: sail-operator/templates/payroll.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: payroll\n  namespace: other-team\n" +
				"data:\n  k: v\n",
		}
		key := fmt.Sprintf("sh.helm.release.v1.%s.v%d", SailReleaseName, revision)
		require.NoError(t, driver.NewConfigMaps(tenant.CoreV1().ConfigMaps(sailNS)).Create(key, forged), "the tenant forges a release record")
	}
	readyCond := func(m *v1alpha1.ServiceMesh) metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		return *c
	}
	createMesh := func() {
		t.Helper()
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar}}))
	}
	releaseHeld := func() {
		t.Helper()
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		m.Finalizers = nil
		require.NoError(t, admin.Update(ctx, m))
		eventually(t, 10*time.Second, "the ServiceMesh to be gone", func() bool { return !exists(&v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}) })
	}
	teardownCond := func(m *v1alpha1.ServiceMesh) metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionSailTeardown))
		require.NotNil(t, c, "condition %s in %+v", v1alpha1.ConditionSailTeardown, m.Status.Conditions)
		return *c
	}

	t.Run("a forged record on the earlier version's ConfigMap release is refused, for the upgrade and for the uninstall", func(t *testing.T) {
		forge(2)
		createMesh()
		_, m := b.reconcile(t)
		victimIntact(t, "after the pass that met the forged record")
		c := readyCond(m)
		assert.Equal(t, string(v1alpha1.ReasonSailReleaseUntrusted), c.Reason, c.Message)
		assert.Contains(t, c.Message, "sh.helm.release.v1.sail-operator.v2")
		assert.NotEmpty(t, log.find(string(v1alpha1.ReasonSailReleaseUntrusted)), "a Warning event says so")
		d := sailDeployment()
		require.NotNil(t, d, "the Sail Operator is left as it is")
		assert.Equal(t, legacyDeployment.UID, d.UID)
		assert.Equal(t, legacyDeployment.Generation, d.Generation, "not upgraded")

		holdAndDelete(t, admin)
		m = tearDownHeld(t, b, fake)
		victimIntact(t, "after the teardown")
		tc := teardownCond(m)
		assert.Equal(t, string(v1alpha1.ReasonSailReleaseUntrusted), tc.Reason, tc.Message)
		require.NotNil(t, sailDeployment(), "nothing uninstalled on an untrusted release")
		for _, n := range crds {
			assert.True(t, exists(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: n}}), "CRD %s stays", n)
		}
		releaseHeld()
	})

	t.Run("the earlier version's genuine release is adopted into the operator's own storage", func(t *testing.T) {
		// The admin removes the forged record.
		require.NoError(t, admin.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sailNS, Name: "sh.helm.release.v1.sail-operator.v2"}}))
		createMesh()
		_, m := b.reconcile(t)
		assert.NotEqual(t, string(v1alpha1.ReasonSailReleaseUntrusted), readyCond(m).Reason, readyCond(m).Message)
		d := sailDeployment()
		require.NotNil(t, d)
		assert.Equal(t, legacyDeployment.UID, d.UID, "adopted, not installed again")
		stored := &corev1.SecretList{}
		require.NoError(t, admin.List(ctx, stored, client.InNamespace(b.r.Config.OperatorNamespace), client.MatchingLabels{"owner": "helm", "name": SailReleaseName}))
		assert.Len(t, stored.Items, 1, "the release is a Secret in the operator's namespace")
		legacy := &corev1.ConfigMapList{}
		require.NoError(t, admin.List(ctx, legacy, client.InNamespace(sailNS), client.MatchingLabels{"owner": "helm", "name": SailReleaseName}))
		assert.Empty(t, legacy.Items, "the adopted ConfigMap records are gone")
		eventually(t, 10*time.Second, "the Sail API in discovery", func() bool {
			_, err := b.discovery.ServerResourcesForGroupVersion("sailoperator.io/v1")
			return err == nil
		})
		b.reconcile(t)
		fake.sync(sail.KindIstio)
		_, m = b.reconcile(t)
		assert.Equal(t, PhaseReady, m.Status.Phase, readyCond(m).Message)
	})

	t.Run("a current release whose record is missing is recorded again", func(t *testing.T) {
		// The record's write failed after an action, or someone removed it:
		// a current release that is exactly what the operator renders is
		// recorded again, so a later upgrade to other values is not refused.
		installed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.r.Config.OperatorNamespace, Name: sailinstall.InstalledName}}
		require.True(t, exists(installed))
		require.NoError(t, admin.Delete(ctx, installed))
		b.reconcile(t)
		rec, err := sailinstall.Records{Client: admin, Reader: admin}.GetInstalled(ctx, b.r.Config.OperatorNamespace)
		require.NoError(t, err)
		require.NotNil(t, rec, "recorded again")
		assert.Equal(t, 1, rec.Revision)
		assert.Len(t, rec.ChartDigest, 64)
	})

	t.Run("a forged ConfigMap record no longer reaches an upgrade or the uninstall", func(t *testing.T) {
		forge(7)
		b.r.Config.SailValues = map[string]any{"image": "mirror.example:5000/sail-operator:1.30.0"}
		_, m := b.reconcile(t)
		victimIntact(t, "after the upgrade")
		d := sailDeployment()
		require.NotNil(t, d)
		assert.Equal(t, "mirror.example:5000/sail-operator:1.30.0", d.Spec.Template.Spec.Containers[0].Image, "upgraded: %s", readyCond(m).Message)

		holdAndDelete(t, admin)
		m = tearDownHeld(t, b, fake)
		victimIntact(t, "after the teardown")
		assert.Equal(t, string(v1alpha1.ReasonSailOperatorUninstalled), teardownCond(m).Reason, teardownCond(m).Message)
		assert.Nil(t, sailDeployment(), "the real release was uninstalled")
	})
}

// legacySailInstall installs ch as an operator before this version did:
// release records as ConfigMaps in the Sail namespace.
func legacySailInstall(t *testing.T, cfg *rest.Config, namespace string, ch *chart.Chart) {
	t.Helper()
	ac := action.NewConfiguration()
	require.NoError(t, ac.Init(&testRESTGetter{config: cfg, namespace: namespace}, namespace, "configmap"))
	in := action.NewInstall(ac)
	in.ReleaseName = SailReleaseName
	in.Namespace = namespace
	in.WaitStrategy = kube.HookOnlyStrategy
	in.Timeout = time.Minute
	_, err := in.RunWithContext(context.Background(), ch, nil)
	require.NoError(t, err)
}

type testRESTGetter struct {
	config    *rest.Config
	namespace string
}

func (g *testRESTGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.config), nil }

func (g *testRESTGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.config))
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g *testRESTGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (g *testRESTGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}})
}

// operatorSailHelm is the operator's Helm for the Sail release.
func operatorSailHelm(cfg *rest.Config) *sailinstall.Helm {
	return &sailinstall.Helm{Config: cfg, StorageNamespace: "mesh-system", Namespace: DefaultSailNamespace, ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
}
