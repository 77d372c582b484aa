//go:build integration

package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/metrics"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// find returns the events so far whose reason is reason.
func (l *eventLog) find(reason string) []string {
	var out []string
	for _, e := range l.drain() {
		if strings.Contains(e, " "+reason+" ") {
			out = append(out, e)
		}
	}
	return out
}

// startSailBed is the enrollment bed without Istio's CRDs: the Sail chart
// the test installs ships its own (Helm fails on a CRD someone else applied).
func startSailBed(t *testing.T, rec recorder.EventRecorder, installer bool) *enrollmentBed {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	env := testenv.Start(t, s, "mesh-operator/config/crd/bases")
	b := &enrollmentBed{env: env, scheme: s, root: testenv.RepoRoot(t), admin: env.Client, clock: &fakeClock{t: time.Now()}}
	ctx := context.Background()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	require.NoError(t, b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh-system"}}))
	grantOperatorRBAC(t, b.admin, b.root, installer)
	b.asOperator = rest.CopyConfig(env.Config)
	b.asOperator.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	opClient, err := client.New(b.asOperator, client.Options{Scheme: s})
	require.NoError(t, err)
	b.discovery, err = discovery.NewDiscoveryClientForConfig(b.asOperator)
	require.NoError(t, err)
	now := b.clock.Now()
	lic, err := license.Sign(license.License{Version: license.FormatVersion, ID: "lic-sail", Licensee: "integration", Features: []string{"service-mesh"},
		IssuedAt: now.Add(-2 * time.Hour), NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}, priv)
	require.NoError(t, err)
	b.license = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "license"}, Data: map[string][]byte{"license": lic}}
	require.NoError(t, b.admin.Create(ctx, b.license))
	b.r = &ServiceMeshReconciler{
		Client: opClient, Reader: opClient, Served: &served.Catalog{Discovery: b.discovery},
		Config:   Config{OperatorNamespace: "mesh-system", LicenseSecret: "license", Keys: []ed25519.PublicKey{pub}, SailNamespace: "sail-operator"},
		Recorder: rec, Now: b.clock.Now, Metrics: metrics.NewLicense(b.clock.Now),
	}
	return b
}

// testHold is a finalizer the test puts on the ServiceMesh so that its last
// status stays readable after the operator has finished its teardown.
const testHold = "test.example.com/hold"

// TestSailTeardownIntegration covers what the operator may install and
// remove around the Sail Operator: the chart only over https (or with the
// explicit insecure flag), the pinned default version, and a last-holder
// teardown that deletes only the chart's own Sail CRDs and keeps Sail while
// a Sail resource the operator does not own still uses it.
func TestSailTeardownIntegration(t *testing.T) {
	log := &eventLog{r: events.NewFakeRecorder(500)}
	b := startSailBed(t, log.r, true)
	ctx := context.Background()
	admin := b.admin
	archive := packageChart(t, b.root)
	repo := serveChart(t, archive)
	b.r.HTTP = repo.Client()
	b.r.Helm = &sailinstall.Helm{Config: b.asOperator, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
	b.r.Config.SailInstall = true
	b.r.Config.HelmTimeout = time.Minute
	// The tests serve the chart on 127.0.0.1 over http: only the explicit
	// insecure setting allows that.
	b.r.Config.SailChart = pinnedChart(repo.URL, DefaultSailChartVersion, map[string][]byte{DefaultSailChartVersion: archive})
	fake := fakeSail{t: t, c: admin}

	exists := func(obj client.Object) bool {
		t.Helper()
		err := admin.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return false
		}
		require.NoError(t, err)
		return true
	}
	crdGone := func(name string) bool {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		return !exists(crd) || crd.DeletionTimestamp != nil
	}
	holders := func() *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: b.r.Config.SailNamespace, Name: sailinstall.RecordName}}
		if !exists(cm) {
			return nil
		}
		return cm
	}
	sailDeployment := func() bool {
		return exists(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: b.r.Config.SailNamespace, Name: "sail-operator"}})
	}
	reconcile := func() *v1alpha1.ServiceMesh {
		t.Helper()
		_, m := b.reconcile(t)
		return m
	}
	createMesh := func() {
		t.Helper()
		require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
			Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar}}))
	}
	// deleteHeld deletes the ServiceMesh with the test's finalizer on it, so
	// the status the teardown wrote last can be read afterwards.
	deleteHeld := func() {
		t.Helper()
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		m.Finalizers = append(m.Finalizers, testHold)
		require.NoError(t, admin.Update(ctx, m))
		require.NoError(t, admin.Delete(ctx, m))
	}
	// tornDown reconciles (playing Sail between rounds) until only the
	// test's finalizer holds the ServiceMesh, and returns it.
	tornDown := func() *v1alpha1.ServiceMesh {
		t.Helper()
		var m *v1alpha1.ServiceMesh
		for range 10 {
			fake.sync()
			m = reconcile()
			require.NotNil(t, m)
			if len(m.Finalizers) == 1 && m.Finalizers[0] == testHold {
				return m
			}
		}
		t.Fatalf("the teardown did not finish: finalizers %v, status %+v", m.Finalizers, m.Status.Conditions)
		return nil
	}
	release := func() {
		t.Helper()
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		m.Finalizers = nil
		require.NoError(t, admin.Update(ctx, m))
		eventually(t, 10*time.Second, "the ServiceMesh to be gone", func() bool { return !exists(&v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}) })
	}
	// crdsDeleted waits until the CRDs are gone, not only terminating, so that
	// a later install creates them afresh: Helm skips a CRD that still exists
	// and then waits in vain for it to be ready (seen in CI, where the
	// PeerAuthentication CRD a teardown had just deleted outlived the wait).
	crdsDeleted := func(names []string) {
		t.Helper()
		for _, n := range names {
			eventually(t, 60*time.Second, "CRD "+n+" deleted, not only terminating", func() bool {
				return !exists(&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: n}})
			})
		}
	}
	teardownCond := func(m *v1alpha1.ServiceMesh) metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionSailTeardown))
		require.NotNil(t, c, "condition %s in %+v", v1alpha1.ConditionSailTeardown, m.Status.Conditions)
		return *c
	}

	createMesh()

	t.Run("the chart is never fetched over plain http without the explicit insecure setting", func(t *testing.T) {
		strict := &ServiceMeshReconciler{Client: b.r.Client, Reader: b.r.Reader, Served: b.r.Served, Helm: b.r.Helm, HTTP: b.r.HTTP,
			Config: b.r.Config, Recorder: b.r.Recorder, Now: b.r.Now, Metrics: b.r.Metrics}
		strict.Config.SailChart.InsecureHTTP = false
		_, err := strict.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
		require.NoError(t, err, "a failed step is reported in status, not returned")
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		assert.Equal(t, PhaseError, m.Status.Phase)
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		assert.Equal(t, string(v1alpha1.ReasonSailChartUnavailable), c.Reason)
		assert.Contains(t, c.Message, "https")
		assert.Contains(t, c.Message, "--sail-chart-insecure-http")
		assert.Zero(t, repo.count("/index.yaml"), "nothing was requested over http")
		assert.Nil(t, holders(), "nothing installed")
	})

	t.Run("a chart whose archive is not the pinned one is refused", func(t *testing.T) {
		// The repository (its index's digest included) serves this archive;
		// the operator pins another one for the version.
		other := &ServiceMeshReconciler{Client: b.r.Client, Reader: b.r.Reader, Served: b.r.Served, Helm: b.r.Helm, HTTP: b.r.HTTP,
			Config: b.r.Config, Recorder: b.r.Recorder, Now: b.r.Now, Metrics: b.r.Metrics}
		other.Config.SailChart.Digest = strings.Repeat("ab", 32)
		_, err := other.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
		require.NoError(t, err, "a failed step is reported in status, not returned")
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		assert.Equal(t, PhaseError, m.Status.Phase)
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		assert.Equal(t, "SailChartUntrusted", c.Reason, c.Message)
		assert.Contains(t, c.Message, strings.Repeat("ab", 32), "the message names the pinned digest")
		assert.Nil(t, holders(), "nothing installed")
		assert.False(t, sailDeployment())
	})

	t.Run("with the insecure setting the pinned default version is installed, with the user's values", func(t *testing.T) {
		// sail.values: an air-gapped cluster points the Sail Operator's image at its mirror.
		b.r.Config.SailValues = map[string]any{"image": "mirror.example:5000/sail-operator:1.30.0"}
		m := reconcile()
		require.NotNil(t, m.Status.SailOperator)
		assert.Equal(t, DefaultSailChartVersion, m.Status.SailOperator.ChartVersion)
		assert.True(t, sailDeployment())
		d := &appsv1.Deployment{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: b.r.Config.SailNamespace, Name: "sail-operator"}, d))
		assert.Equal(t, "mirror.example:5000/sail-operator:1.30.0", d.Spec.Template.Spec.Containers[0].Image, "sail.values reach the Sail chart")
		eventually(t, 10*time.Second, "the Sail API in discovery", func() bool {
			_, err := b.discovery.ServerResourcesForGroupVersion("sailoperator.io/v1")
			return err == nil
		})
		reconcile()
		fake.sync(sail.KindIstio)
		assert.Equal(t, PhaseReady, reconcile().Status.Phase)
	})

	userIstio := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"version": "v1.29.2", "namespace": "istio-user"}}}
		u.SetGroupVersionKind(sail.GVK(sail.KindIstio))
		u.SetName("user-mesh")
		return u
	}

	t.Run("the last holder keeps Sail while an Istio it does not own uses it", func(t *testing.T) {
		require.NoError(t, admin.Create(ctx, userIstio()))
		assert.Equal(t, PhaseReady, reconcile().Status.Phase, "our own Istio stays managed next to the user's")
		deleteHeld()
		m := tornDown()
		assert.Nil(t, func() *unstructured.Unstructured {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(sail.GVK(sail.KindIstio))
			if err := admin.Get(ctx, client.ObjectKey{Name: "default"}, u); err != nil {
				return nil
			}
			return u
		}(), "our own Istio is removed")
		assert.True(t, sailDeployment(), "Sail stays for the user's Istio")
		for _, n := range []string{"istios.sailoperator.io", "istiocnis.sailoperator.io", "ztunnels.sailoperator.io"} {
			assert.False(t, crdGone(n), "CRD %s stays", n)
		}
		rec := holders()
		require.NotNil(t, rec, "the record stays, so a later last holder can still uninstall")
		assert.Equal(t, []string{sailinstall.HolderKey}, keys(rec.Data))
		c := teardownCond(m)
		assert.Equal(t, string(v1alpha1.ReasonSailInUse), c.Reason)
		assert.Contains(t, c.Message, "Istio/user-mesh")
		kept := log.find(string(v1alpha1.ReasonSailInUse))
		require.NotEmpty(t, kept)
		assert.Contains(t, kept[0], "Istio/user-mesh")
		assert.Empty(t, log.find(string(v1alpha1.ReasonSailOperatorUninstalled)))
		release()

		// The user's Istio goes; a new ServiceMesh joins the install again.
		require.NoError(t, admin.Delete(ctx, userIstio()))
		fake.sync()
		createMesh()
		reconcile()
		fake.sync(sail.KindIstio)
		assert.Equal(t, PhaseReady, reconcile().Status.Phase)
		assert.Equal(t, []string{sailinstall.HolderKey}, keys(holders().Data))
	})

	t.Run("the holders record cannot make the operator delete a CRD that is not the chart's own Sail CRD", func(t *testing.T) {
		foreign := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}}}}},
		}
		require.NoError(t, admin.Create(ctx, foreign))
		rec := holders()
		require.NotNil(t, rec)
		installed := strings.Split(rec.Annotations[sailinstall.AnnotationCRDs], ",")
		// Planted by someone who may write ConfigMaps in the Sail namespace:
		// a foreign CRD, the operator's own, an Istio CRD the chart does not
		// ship, and one it ships but which existed before the install.
		planted := []string{"widgets.example.com", "servicemeshes.core.navique.com", "authorizationpolicies.security.istio.io", "istiorevisions.sailoperator.io"}
		// The two Sail-group names exist, as a user's own CRDs.
		for _, n := range planted[2:] {
			parts := strings.SplitN(n, ".", 2)
			kind := strings.ToUpper(parts[0][:1]) + strings.TrimSuffix(parts[0][1:], "s")
			require.NoError(t, admin.Create(ctx, &apiextensionsv1.CustomResourceDefinition{
				ObjectMeta: metav1.ObjectMeta{Name: n},
				Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: parts[1], Scope: apiextensionsv1.NamespaceScoped,
					Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: parts[0], Kind: kind, ListKind: kind + "List"},
					Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
						Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptrTo(true)}}}}},
			}))
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			sailinstall.AnnotationCRDs: rec.Annotations[sailinstall.AnnotationCRDs] + "," + strings.Join(planted, ","),
		}}})
		require.NoError(t, err)
		require.NoError(t, admin.Patch(ctx, rec, client.RawPatch(types.MergePatchType, patch)))

		deleteHeld()
		m := tornDown()
		assert.False(t, sailDeployment(), "the release is uninstalled")
		assert.Nil(t, holders())
		for _, n := range []string{"istios.sailoperator.io", "istiocnis.sailoperator.io", "ztunnels.sailoperator.io"} {
			assert.True(t, crdGone(n), "the chart's CRD %s the install created is removed", n)
		}
		for _, n := range planted {
			assert.False(t, crdGone(n), "planted CRD %s survives", n)
		}
		c := teardownCond(m)
		assert.Equal(t, string(v1alpha1.ReasonUntrustedCRDsIgnored), c.Reason)
		for _, n := range planted {
			assert.Contains(t, c.Message, n)
		}
		warned := log.find(string(v1alpha1.ReasonUntrustedCRDsIgnored))
		require.NotEmpty(t, warned)
		assert.True(t, strings.HasPrefix(warned[0], corev1.EventTypeWarning), warned[0])
		assert.Contains(t, warned[0], "widgets.example.com")
		release()
		crdsDeleted(installed)
	})

	t.Run("a holders record newer than the CRDs it names cannot have them deleted", func(t *testing.T) {
		// A fresh install: record first, then the chart's CRDs. (The first
		// install's namespace stays Terminating: no namespace controller here.)
		b.r.Config.SailNamespace = "sail-operator-2"
		b.r.Helm = &sailinstall.Helm{Config: b.asOperator, StorageNamespace: "mesh-system", Namespace: b.r.Config.SailNamespace, ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
		createMesh()
		eventually(t, 30*time.Second, "the Sail API in discovery again", func() bool {
			if !b.reconcileDuringInstall(t) {
				return false
			}
			_, err := b.discovery.ServerResourcesForGroupVersion("sailoperator.io/v1")
			return err == nil
		})
		rec := holders()
		require.NotNil(t, rec)
		crds := rec.Annotations[sailinstall.AnnotationCRDs]
		require.Contains(t, crds, "istios.sailoperator.io")
		// Someone replaces the record: the same content, created later
		// than the CRDs it names, so it cannot vouch for them.
		time.Sleep(1100 * time.Millisecond) // creation timestamps have second granularity
		require.NoError(t, admin.Delete(ctx, rec))
		require.NoError(t, admin.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: rec.Namespace, Name: rec.Name, Labels: rec.Labels, Annotations: rec.Annotations},
			Data:       rec.Data,
		}))

		deleteHeld()
		m := tornDown()
		assert.False(t, sailDeployment(), "the release is uninstalled")
		for _, n := range strings.Split(crds, ",") {
			assert.False(t, crdGone(n), "CRD %s, older than the record, survives", n)
		}
		c := teardownCond(m)
		assert.Equal(t, string(v1alpha1.ReasonUntrustedCRDsIgnored), c.Reason)
		assert.Contains(t, c.Message, "istios.sailoperator.io")
		release()
		// Clean up by hand, so the next step installs afresh.
		for _, n := range strings.Split(crds, ",") {
			require.NoError(t, client.IgnoreNotFound(admin.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: n}})))
		}
		crdsDeleted(strings.Split(crds, ","))
		// (The group stays served: the planted istiorevisions CRD survives.)
		eventually(t, 30*time.Second, "the Sail Istio API to disappear", func() bool {
			fake.sync() // Sail's finalizers on what is left
			l, err := b.discovery.ServerResourcesForGroupVersion("sailoperator.io/v1")
			if err != nil {
				return true
			}
			for _, r := range l.APIResources {
				if r.Name == "istios" {
					return false
				}
			}
			return true
		})
	})

	t.Run("a stored Helm release that is not the one the operator recorded is not uninstalled", func(t *testing.T) {
		// The uninstall deletes what the stored release's manifest lists.
		// The release is a Secret in the operator's namespace; whoever
		// alters it there (here the admin) gets a refusal, not a deletion.
		// (Helm 4 also deletes only objects annotated as this release's.)
		b.r.Config.SailNamespace = "sail-operator-3"
		b.r.Helm = &sailinstall.Helm{Config: b.asOperator, StorageNamespace: "mesh-system", Namespace: b.r.Config.SailNamespace, ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
		createMesh()
		eventually(t, 30*time.Second, "the Sail Operator installed again", func() bool {
			return b.reconcileDuringInstall(t) && sailDeployment()
		})
		victim := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "victim"}, Data: map[string]string{"k": "v"}}
		require.NoError(t, admin.Create(ctx, victim))
		cs, err := kubernetes.NewForConfig(b.env.Config)
		require.NoError(t, err)
		store := driver.NewSecrets(cs.CoreV1().Secrets(b.r.Config.OperatorNamespace))
		key := "sh.helm.release.v1." + SailReleaseName + ".v1"
		stored, err := store.Get(key)
		require.NoError(t, err)
		rel := stored.(*releasev1.Release)
		rel.Manifest += "\n---\n# Source: sail-operator/templates/planted.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: victim\n  namespace: default\n"
		require.NoError(t, store.Update(key, rel))

		deleteHeld()
		m := tornDown()
		assert.True(t, exists(victim), "the planted ConfigMap survives")
		assert.True(t, sailDeployment(), "the altered release is left as it is")
		c := teardownCond(m)
		assert.Equal(t, string(v1alpha1.ReasonSailReleaseUntrusted), c.Reason)
		assert.Contains(t, c.Message, "Secret mesh-system/"+key)
		assert.NotEmpty(t, log.find(string(v1alpha1.ReasonSailReleaseUntrusted)), "a Warning event says so")
		release()
	})
}

func ptrTo[T any](v T) *T { return &v }
