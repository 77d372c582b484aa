//go:build integration

package controller

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// installerOnlyAccess are requests only installing or uninstalling the Sail
// Operator makes (Helm applying its chart, the holders record, the CRDs the
// install created). With sail.install=false the operator holds none of them.
var installerOnlyAccess = []authorizationv1.ResourceAttributes{
	{Verb: "escalate", Group: rbacv1.GroupName, Resource: "clusterroles", Name: "sail-operator"},
	{Verb: "bind", Group: rbacv1.GroupName, Resource: "clusterroles", Name: "sail-operator"},
	{Verb: "create", Group: rbacv1.GroupName, Resource: "clusterrolebindings"},
	{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
	{Verb: "delete", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions", Name: "istios.sailoperator.io"},
	{Verb: "list", Resource: "configmaps", Namespace: "sail-operator"},
	{Verb: "create", Resource: "configmaps", Namespace: "sail-operator"},
	{Verb: "patch", Resource: "configmaps", Namespace: "sail-operator", Name: sailinstall.RecordName},
	{Verb: "create", Group: "apps", Resource: "deployments", Namespace: "sail-operator"},
	{Verb: "create", Resource: "serviceaccounts", Namespace: "sail-operator"},
	{Verb: "create", Group: "networking.k8s.io", Resource: "networkpolicies", Namespace: "sail-operator"},
	// The last holder's look at the objects of a CRD it would delete.
	{Verb: "list", Group: "networking.istio.io", Resource: "virtualservices"},
	// What lets it grant itself list on everything in a namespace it created, at teardown.
	{Verb: "escalate", Group: rbacv1.GroupName, Resource: "roles", Namespace: "istio-system"},
}

// coreAccess are requests the operator makes in every mode.
var coreAccess = []authorizationv1.ResourceAttributes{
	{Verb: "create", Group: sail.Group, Resource: "istios"},
	{Verb: "patch", Resource: "namespaces", Name: "team-a"},
	{Verb: "list", Resource: "pods"},
	{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "cilium-config"},
	{Verb: "get", Resource: "configmaps", Namespace: "sail-operator", Name: sailinstall.RecordName},
}

func operatorMay(t *testing.T, c client.Client, a authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: operatorUser, ResourceAttributes: &a}}
	require.NoError(t, c.Create(context.Background(), sar))
	return sar.Status.Allowed
}

// TestRBACModesIntegration runs the operator with sail.install=false under
// exactly the rules the chart renders for it (the generated ClusterRole
// without the Sail installer's): a managed control plane on a pre-installed
// Sail Operator, a holders record someone else wrote, and a teardown, all
// without a forbidden request. Then the installer's ClusterRole is bound as
// the chart does with sail.install=true. (The installer mode itself runs
// under core + installer rules in TestIntegration and TestSailTeardownIntegration.)
func TestRBACModesIntegration(t *testing.T) {
	log := &eventLog{r: events.NewFakeRecorder(500)}
	b := startSailBed(t, log.r, false)
	ctx := context.Background()
	admin := b.admin
	require.False(t, b.r.Config.SailInstall)

	t.Run("sail.install=false holds none of the installer's rights", func(t *testing.T) {
		for _, a := range installerOnlyAccess {
			assert.False(t, operatorMay(t, admin, a), "the operator may %+v", a)
		}
		for _, a := range coreAccess {
			assert.True(t, operatorMay(t, admin, a), "the operator may not %+v", a)
		}
		// Its ConfigMap reads are by name: Cilium's configuration and the holders record.
		assert.False(t, operatorMay(t, admin, authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "kubeadm-config"}))
	})

	// The Sail Operator was installed by someone else: its API is served.
	crds, err := filepath.Glob(filepath.Join(b.root, "mesh-operator/config/sail-test-crds/sailoperator.io_*.yaml"))
	require.NoError(t, err)
	require.Len(t, crds, 3)
	installCRDs(t, admin, crds...)
	fake := fakeSail{t: t, c: admin}
	reconcile := func() *v1alpha1.ServiceMesh {
		t.Helper()
		_, m := b.reconcile(t)
		return m
	}
	record := func() *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{}
		err := admin.Get(ctx, client.ObjectKey{Namespace: "sail-operator", Name: sailinstall.RecordName}, cm)
		if apierrors.IsNotFound(err) {
			return nil
		}
		require.NoError(t, err)
		return cm
	}
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}))

	t.Run("managed mode on a pre-installed Sail Operator", func(t *testing.T) {
		reconcile()
		fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel)
		m := reconcile()
		assert.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
		require.NotNil(t, m.Status.SailOperator)
		assert.Equal(t, v1alpha1.SailPreinstalled, m.Status.SailOperator.Source)
		assert.Nil(t, record(), "the operator writes no holders record without sail.install")
	})

	t.Run("a holders record written by another installer is read, not joined", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sail-operator"}}))
		require.NoError(t, admin.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "sail-operator", Name: sailinstall.RecordName,
				Annotations: map[string]string{sailinstall.AnnotationRelease: SailReleaseName}},
			Data: map[string]string{"other-tool": "installed it"}}))
		m := reconcile()
		assert.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
		require.NotNil(t, m.Status.SailOperator)
		assert.Equal(t, v1alpha1.SailInstalled, m.Status.SailOperator.Source)
		assert.Equal(t, []string{"other-tool"}, m.Status.SailOperator.Holders)
		assert.Equal(t, []string{"other-tool"}, keys(record().Data), "not joined: the operator may not uninstall, so it holds nothing")
	})

	t.Run("a teardown holding an installation it may not uninstall leaves it and says so", func(t *testing.T) {
		// As if an earlier release of the operator, with sail.install=true,
		// had installed the Sail Operator.
		cm := record()
		cm.Data[sailinstall.HolderKey] = "ServiceMesh cluster"
		require.NoError(t, admin.Update(ctx, cm))
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		m.Finalizers = append(m.Finalizers, testHold)
		require.NoError(t, admin.Update(ctx, m))
		require.NoError(t, admin.Delete(ctx, m))
		for range 10 {
			fake.sync()
			m = reconcile()
			require.NotNil(t, m)
			if len(m.Finalizers) == 1 {
				break
			}
		}
		require.Equal(t, []string{testHold}, m.Finalizers, "%+v", m.Status.Conditions)
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionSailTeardown))
		require.NotNil(t, c, "%+v", m.Status.Conditions)
		assert.Equal(t, string(v1alpha1.ReasonSailUninstallDisabled), c.Reason)
		assert.Contains(t, c.Message, "sail.install")
		assert.Equal(t, []string{"other-tool", sailinstall.HolderKey}, sortedKeys(record().Data), "the record is left as it was")
		for _, n := range []string{"istios.sailoperator.io", "istiocnis.sailoperator.io", "ztunnels.sailoperator.io"} {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: n}, crd))
			assert.Nil(t, crd.DeletionTimestamp, "CRD %s stays", n)
		}
		assert.NotEmpty(t, log.find(string(v1alpha1.ReasonSailUninstallDisabled)))
	})

	t.Run("sail.install=true binds the installer's ClusterRole as well", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(b.root, "mesh-operator/config/rbac/sail-installer/role.yaml"))
		require.NoError(t, err)
		role := &rbacv1.ClusterRole{}
		require.NoError(t, yaml.Unmarshal(data, role))
		require.NoError(t, admin.Create(ctx, role))
		require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}}}))
		testenv.WaitAllowed(t, admin, operatorUser, installerOnlyAccess...)
	})
}

func sortedKeys(m map[string]string) []string {
	out := keys(m)
	sort.Strings(out)
	return out
}
