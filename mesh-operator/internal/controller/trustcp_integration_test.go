//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// editorOf is a client acting as a tenant bound to the built-in edit
// ClusterRole in namespace ns only: everything a namespace editor may do
// there (Deployments, labels on them), nothing cluster-wide.
func editorOf(t *testing.T, b *enrollmentBed, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	user := "editor-of-" + ns
	// The built-in edit ClusterRole is an aggregation: its rules are
	// filled in by kube-controller-manager's aggregation controller.
	b.env.RunControllers(t, "clusterrole-aggregation")
	require.NoError(t, b.admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}))
	testenv.WaitAllowed(t, b.admin, user, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "apps", Resource: "deployments"})
	cfg := rest.CopyConfig(b.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: b.scheme})
	require.NoError(t, err)
	return c
}

// istiodIn creates, as c, a Deployment that looks like istiod (app=istiod,
// a discovery container) in ns; the admin then plays the Deployment
// controller and marks it Available, the most a fake can look like.
func istiodIn(t *testing.T, c, admin client.Client, ns string) *appsv1.Deployment {
	t.Helper()
	ctx := context.Background()
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "istiod", Labels: map[string]string{"app": "istiod"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "istiod"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.30.1"}}}}}}
	require.NoError(t, c.Create(ctx, dep))
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, AvailableReplicas: 1, ReadyReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
	require.NoError(t, admin.Status().Update(ctx, dep))
	return dep
}

// injectorFor creates, as the admin, the sidecar injector webhook an Istio
// installation registers for the istiod in ns.
func injectorFor(t *testing.T, admin client.Client, ns string) {
	t.Helper()
	path := "/inject"
	none := admissionregistrationv1.SideEffectClassNone
	require.NoError(t, admin.Create(context.Background(), &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-" + ns},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "namespace.sidecar-injector.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "istiod", Path: &path}},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"istio-injection": "enabled"}},
		}},
	}))
}

// TestTenantIstiodIntegration (issue 41 item 1): a Deployment labelled
// app=istiod that a namespace editor created is never taken for the
// control plane: in managed mode the operator builds its own; in adopt
// mode the istiod in the trusted namespace is chosen, whatever the list
// order; two trusted candidates are reported, never picked between. The
// tenant's namespace never becomes mesh-control-plane nor is it exempt
// from namespace isolation.
func TestTenantIstiodIntegration(t *testing.T) {
	ctx := context.Background()
	enrolledShop := func(t *testing.T, b *enrollmentBed) (map[string]string, string) {
		t.Helper()
		ns := &corev1.Namespace{}
		require.NoError(t, b.admin.Get(ctx, client.ObjectKey{Name: "shop"}, ns))
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(enroll.KindAuthorizationPolicy))
		spec := ""
		if err := b.admin.Get(ctx, client.ObjectKey{Namespace: "shop", Name: enroll.IsolationPolicyName}, u); err == nil {
			data, err := json.Marshal(u.Object["spec"])
			require.NoError(t, err)
			spec = string(data)
		}
		return ns.Labels, spec
	}
	setup := func(t *testing.T, name string) (*enrollmentBed, client.Client) {
		b := startEnrollmentBed(t, name, events.NewFakeRecorder(1000))
		require.NoError(t, b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme"}}))
		require.NoError(t, b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
		tenant := editorOf(t, b, "acme")
		istiodIn(t, tenant, b.admin, "acme")
		return b, tenant
	}

	t.Run("managed: the operator installs its own Istio beside a tenant's fake istiod", func(t *testing.T) {
		b, _ := setup(t, "lic-fake-istiod-managed")
		serveSailAPI(t, b.admin, b.root, b.discovery)
		fake := fakeSail{t: t, c: b.admin}
		require.NoError(t, b.admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, Version: "1.30", DataPlane: v1alpha1.DataPlaneSidecar}}))
		b.reconcile(t)
		istio := &unstructured.Unstructured{}
		istio.SetGroupVersionKind(sail.GVK(sail.KindIstio))
		require.NoError(t, b.admin.Get(ctx, client.ObjectKey{Name: sail.IstioName}, istio), "the operator creates its own Istio; the tenant's Deployment is not a control plane")
		fake.sync(sail.KindIstio)
		_, m := b.reconcile(t)
		require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
		assert.Equal(t, v1alpha1.ManagementManaged, m.Status.ControlPlane.Management)
		assert.Equal(t, "istio-system", m.Status.ControlPlane.Namespace)
		l, iso := enrolledShop(t, b)
		assert.Equal(t, "istio-system", l[labels.MeshControlPlane])
		require.NotEmpty(t, iso, "shop is isolated")
		assert.NotContains(t, iso, "acme", "the tenant's namespace is not exempt from isolation")
	})

	t.Run("adopt: the istiod in the trusted namespace is chosen, not the tenant's that lists first", func(t *testing.T) {
		b, _ := setup(t, "lic-fake-istiod-adopt")
		readyIstiod(t, b.admin)
		require.NoError(t, b.admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar}}))
		_, m := b.reconcile(t)
		require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
		assert.Equal(t, "istio-system", m.Status.ControlPlane.Namespace)
		assert.NotContains(t, m.Status.ControlPlane.Resources, "Deployment/acme/istiod")
		_, m = b.reconcile(t)
		l, iso := enrolledShop(t, b)
		assert.Equal(t, "istio-system", l[labels.MeshControlPlane])
		require.NotEmpty(t, iso, "shop is isolated")
		assert.NotContains(t, iso, "acme", "the tenant's namespace is not exempt from isolation")
		assert.Contains(t, m.Status.EnrolledNamespaces, "shop")
	})

	t.Run("two trusted control planes: AmbiguousControlPlane, nothing picked", func(t *testing.T) {
		b, _ := setup(t, "lic-two-istiods")
		for _, ns := range []string{"mesh-a", "mesh-b"} {
			require.NoError(t, b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			istiodIn(t, b.admin, b.admin, ns)
			injectorFor(t, b.admin, ns)
		}
		require.NoError(t, b.admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar}}))
		_, m := b.reconcile(t)
		ready := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, ready)
		assert.Equal(t, "AmbiguousControlPlane", ready.Reason, ready.Message)
		assert.Contains(t, ready.Message, "mesh-a")
		assert.Contains(t, ready.Message, "mesh-b")
		assert.NotEqual(t, PhaseReady, m.Status.Phase)
		assert.True(t, m.Status.ControlPlane == nil || m.Status.ControlPlane.Namespace == "", "nothing is picked: %+v", m.Status.ControlPlane)
		_, m = b.reconcile(t)
		l, _ := enrolledShop(t, b)
		assert.Empty(t, l[labels.MeshControlPlane], "nothing is enrolled against a guessed control plane")
		assert.Empty(t, m.Status.EnrolledNamespaces)
		assert.Equal(t, []string{"acme/istiod@default"}, m.Status.Detected.IgnoredIstiods, "the tenant's istiod is listed as ignored")

		// The admin names the one to use.
		m.Spec.ControlPlaneNamespace = "mesh-b"
		require.NoError(t, b.admin.Update(ctx, m))
		_, m = b.reconcile(t)
		require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
		assert.Equal(t, "mesh-b", m.Status.ControlPlane.Namespace)
		_, _ = b.reconcile(t)
		l, _ = enrolledShop(t, b)
		assert.Equal(t, "mesh-b", l[labels.MeshControlPlane])
	})
}
