//go:build integration

package controller

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// tenantIn is a client acting as a tenant who may only edit namespace ns:
// a Role there granting rules, bound to the tenant's user, and nothing
// cluster-wide. What the tenant creates is not the operator's, whatever it
// is called.
func tenantIn(t *testing.T, b *enrollmentBed, ns string, rules ...rbacv1.PolicyRule) client.Client {
	t.Helper()
	ctx := context.Background()
	user := "tenant-of-" + ns
	require.NoError(t, b.admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-edit"}, Rules: rules}))
	require.NoError(t, b.admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant-edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	var wait []authorizationv1.ResourceAttributes
	for _, r := range rules {
		wait = append(wait, authorizationv1.ResourceAttributes{Namespace: ns, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]})
	}
	testenv.WaitAllowed(t, b.admin, user, wait...)
	cfg := rest.CopyConfig(b.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: b.scheme})
	require.NoError(t, err)
	return c
}

// holdAndDelete deletes the ServiceMesh with the test's finalizer on it, so
// the status the teardown wrote last stays readable.
func holdAndDelete(t *testing.T, admin client.Client) {
	t.Helper()
	ctx := context.Background()
	m := &v1alpha1.ServiceMesh{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
	m.Finalizers = append(m.Finalizers, testHold)
	require.NoError(t, admin.Update(ctx, m))
	require.NoError(t, admin.Delete(ctx, m))
}

// tearDownHeld reconciles (playing Sail between rounds) until only the
// test's finalizer holds the ServiceMesh, and returns it.
func tearDownHeld(t *testing.T, b *enrollmentBed, fake fakeSail) *v1alpha1.ServiceMesh {
	t.Helper()
	var m *v1alpha1.ServiceMesh
	for range 10 {
		fake.sync()
		_, m = b.reconcile(t)
		require.NotNil(t, m)
		if len(m.Finalizers) == 1 && m.Finalizers[0] == testHold {
			return m
		}
	}
	t.Fatalf("the teardown did not finish: finalizers %v, status %+v", m.Finalizers, m.Status.Conditions)
	return nil
}

// TestTeardownKeepsIstioCRDsOfAForeignControlPlane (issue 41 item 3): the
// operator installs the Sail Operator (recording the chart's CRDs, Istio's
// PeerAuthentication among them); before it creates its Istio, an admin
// installs istiod with istioctl and the next pass adopts it; a tenant
// writes a PeerAuthentication in its namespace. Deleting the ServiceMesh
// uninstalls Sail but must not delete the PeerAuthentication CRD (and with
// it the tenant's policy) from under that istiod.
func TestTeardownKeepsIstioCRDsOfAForeignControlPlane(t *testing.T) {
	log := &eventLog{r: events.NewFakeRecorder(500)}
	b := startSailBed(t, log.r, true)
	ctx, admin := context.Background(), b.admin
	archive := packageChart(t, b.root)
	repo := serveChart(t, archive)
	b.r.HTTP = repo.Client()
	b.r.Helm = &sailinstall.Helm{Config: b.asOperator, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
	b.r.Config.SailInstall = true
	b.r.Config.HelmTimeout = time.Minute
	b.r.Config.SailChart = pinnedChart(repo.URL, DefaultSailChartVersion, map[string][]byte{DefaultSailChartVersion: archive})
	fake := fakeSail{t: t, c: admin}

	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar}}))
	b.reconcile(t) // installs the Sail Operator
	rec := &corev1.ConfigMap{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "sail-operator", Name: sailinstall.RecordName}, rec))
	require.Contains(t, rec.Annotations[sailinstall.AnnotationCRDs], "peerauthentications.security.istio.io")
	eventually(t, 20*time.Second, "the Sail and Istio APIs in discovery", func() bool {
		_, err1 := b.discovery.ServerResourcesForGroupVersion("sailoperator.io/v1")
		_, err2 := b.discovery.ServerResourcesForGroupVersion("security.istio.io/v1")
		return err1 == nil && err2 == nil
	})

	// istioctl install, before the operator's next pass.
	readyIstiod(t, admin)
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}))
	tenant := tenantIn(t, b, "shop", rbacv1.PolicyRule{APIGroups: []string{"security.istio.io"}, Resources: []string{"peerauthentications"}, Verbs: []string{"create", "get"}})
	pa := &unstructured.Unstructured{}
	pa.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(enroll.KindPeerAuthentication))
	pa.SetNamespace("shop")
	pa.SetName("shop-strict")
	pa.Object["spec"] = map[string]any{"mtls": map[string]any{"mode": "STRICT"}}
	require.NoError(t, tenant.Create(ctx, pa))

	_, m := b.reconcile(t)
	require.NotNil(t, m.Status.ControlPlane)
	require.Equal(t, v1alpha1.ManagementAdopted, m.Status.ControlPlane.Management, "the istioctl istiod is adopted: %+v", m.Status.Conditions)

	holdAndDelete(t, admin)
	m = tearDownHeld(t, b, fake)

	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "peerauthentications.security.istio.io"}, crd))
	assert.Nil(t, crd.DeletionTimestamp, "the PeerAuthentication CRD stays: the tenant's policy and the adopted istiod use it")
	assert.NoError(t, tenant.Get(ctx, client.ObjectKeyFromObject(pa), pa.DeepCopy()), "the tenant's PeerAuthentication survives")
	for _, n := range []string{"istios.sailoperator.io", "istiocnis.sailoperator.io", "ztunnels.sailoperator.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := admin.Get(ctx, client.ObjectKey{Name: n}, crd)
		assert.True(t, apierrors.IsNotFound(err) || crd.DeletionTimestamp != nil, "the Sail CRD %s, unused, is removed", n)
	}
	c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionSailTeardown))
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonSailCRDsKept), c.Reason)
	assert.Contains(t, c.Message, "peerauthentications.security.istio.io")
	assert.Contains(t, c.Message, "PeerAuthentication shop/shop-strict")
	assert.Contains(t, c.Message, "Deployment istio-system/istiod")
	warned := log.find(string(v1alpha1.ReasonSailCRDsKept))
	require.NotEmpty(t, warned)
	assert.Contains(t, warned[0], corev1.EventTypeWarning)
	assert.Contains(t, warned[0], "peerauthentications.security.istio.io")
}

// TestTeardownKeepsNamespacesWithOthersObjects (issue 41 item 4): the
// namespaces the operator created for its control plane (istio-system,
// istio-cni, ztunnel) are deleted at teardown only when nothing but what
// the operator, its Sail resources and Kubernetes itself put there is left.
// A tenant's plug-in CA (cacerts) in istio-system keeps that namespace.
func TestTeardownKeepsNamespacesWithOthersObjects(t *testing.T) {
	log := &eventLog{r: events.NewFakeRecorder(500)}
	b := startSailBed(t, log.r, true)
	ctx, admin := context.Background(), b.admin
	serveSailAPI(t, admin, b.root, b.discovery)
	// sail.install=true: the installer's rights let the operator grant
	// itself list on everything in a namespace it created.
	b.r.Config.SailInstall = true
	fake := fakeSail{t: t, c: admin}

	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneAmbient}}))
	_, m := b.reconcile(t)
	for _, n := range []string{sail.IstioNamespace, sail.CNINamespace, sail.ZTunnelNamespace} {
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: n}, ns))
		require.True(t, metav1.IsControlledBy(ns, m), "%s is the operator's", n)
	}
	fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel)
	b.reconcile(t)

	// What Kubernetes puts in every namespace, and an object of the
	// operator's own (controlled by the ServiceMesh), do not keep a namespace.
	require.NoError(t, admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sail.CNINamespace, Name: "kube-root-ca.crt"}}))
	require.NoError(t, admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sail.CNINamespace, Name: "default"}}))
	require.NoError(t, admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sail.ZTunnelNamespace, Name: "ours",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(m, v1alpha1.GroupVersion.WithKind("ServiceMesh"))}}}))
	// A tenant's plug-in CA in istio-system does.
	tenant := tenantIn(t, b, sail.IstioNamespace, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get"}})
	cacerts := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sail.IstioNamespace, Name: "cacerts"}, Data: map[string][]byte{"ca-cert.pem": []byte("x")}}
	require.NoError(t, tenant.Create(ctx, cacerts))

	// A list that fails leaves what ztunnel holds unknown: it is kept too.
	b.operatorThrough(t, func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && req.URL.Path == "/api/v1/namespaces/"+sail.ZTunnelNamespace+"/secrets" {
				body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected: etcdserver: request timed out","reason":"InternalError","code":500}`
				return &http.Response{StatusCode: http.StatusInternalServerError, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
			}
			return rt.RoundTrip(req)
		})
	})

	holdAndDelete(t, admin)
	m = tearDownHeld(t, b, fake)

	istioNS := &corev1.Namespace{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: sail.IstioNamespace}, istioNS))
	assert.Nil(t, istioNS.DeletionTimestamp, "istio-system holds the tenant's cacerts: it stays")
	assert.NoError(t, tenant.Get(ctx, client.ObjectKeyFromObject(cacerts), &corev1.Secret{}))
	cniNS := &corev1.Namespace{}
	err := admin.Get(ctx, client.ObjectKey{Name: sail.CNINamespace}, cniNS)
	assert.True(t, apierrors.IsNotFound(err) || cniNS.DeletionTimestamp != nil, "istio-cni holds only what Kubernetes put there: deleted")
	ztunnelNS := &corev1.Namespace{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: sail.ZTunnelNamespace}, ztunnelNS))
	assert.Nil(t, ztunnelNS.DeletionTimestamp, "ztunnel's Secrets could not be listed: unknown is not empty, it stays")
	for _, n := range []string{sail.IstioNamespace, sail.ZTunnelNamespace} {
		roles := &rbacv1.RoleList{}
		require.NoError(t, admin.List(ctx, roles, client.InNamespace(n)))
		for _, r := range roles.Items {
			assert.False(t, strings.HasPrefix(r.Name, "mesh-operator-teardown-"), "the operator's grant to list %s is revoked once it keeps it", n)
		}
		bindings := &rbacv1.RoleBindingList{}
		require.NoError(t, admin.List(ctx, bindings, client.InNamespace(n)))
		for _, rb := range bindings.Items {
			assert.False(t, strings.HasPrefix(rb.Name, "mesh-operator-teardown-"), "the operator's grant to list %s is revoked once it keeps it", n)
		}
	}
	c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionNamespaceTeardown))
	require.NotNil(t, c, "%+v", m.Status.Conditions)
	assert.Equal(t, string(v1alpha1.ReasonNamespacesKept), c.Reason)
	// The tenant's Role and RoleBinding (written by the admin) are not the operator's either.
	assert.Contains(t, c.Message, "istio-system: it holds objects the operator did not put there: Role tenant-edit, RoleBinding tenant-edit, Secret cacerts")
	assert.Contains(t, c.Message, "ztunnel: what it holds could not be read entirely (listing secrets: ")
	assert.Contains(t, c.Message, "Deleted istio-cni")
	kept := log.find(string(v1alpha1.ReasonNamespacesKept))
	require.Len(t, kept, 2)
	for _, e := range kept {
		assert.True(t, strings.HasPrefix(e, corev1.EventTypeWarning), e)
	}
	assert.Contains(t, strings.Join(kept, "\n"), "Kept namespace istio-system, which the operator created: it holds objects the operator did not put there: Role tenant-edit, RoleBinding tenant-edit, Secret cacerts")
}
