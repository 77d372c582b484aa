//go:build integration

package controller

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
)

// sailServed waits until discovery serves the Sail Istio kind.
func sailServed(t *testing.T, b *enrollmentBed) {
	t.Helper()
	eventually(t, 30*time.Second, "the Sail API in discovery", func() bool {
		l, err := b.discovery.ServerResourcesForGroupVersion("sailoperator.io/v1")
		if err != nil {
			return false
		}
		for _, r := range l.APIResources {
			if r.Name == "istios" {
				return true
			}
		}
		return false
	})
}

// TestManagedSailKeptCurrent: once the operator has installed the Sail
// Operator, every pass compares the release with the wanted one: a newer
// pinned chart (a new operator release) or changed sail.values move the
// release in place while the Sail API is served, which is all the time
// after the first install. The status follows the release; nothing moves
// while both stay the same, towards an older chart, or once another party
// holds the installation too.
func TestManagedSailKeptCurrent(t *testing.T) {
	log := &eventLog{r: events.NewFakeRecorder(500)}
	b := startSailBedWithCharts(t, log)
	ctx := context.Background()
	admin := b.admin
	helm := b.r.Helm.(*sailinstall.Helm)
	state := func() (*sailinstall.Release, *appsv1.Deployment) {
		t.Helper()
		rel, err := helm.Get()
		require.NoError(t, err)
		require.NotNil(t, rel, "the release exists")
		d := &appsv1.Deployment{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "sail-operator", Name: "sail-operator"}, d))
		return rel, d
	}
	pass := func() *v1alpha1.ServiceMesh {
		t.Helper()
		_, m := b.reconcile(t)
		require.NotNil(t, m)
		return m
	}

	pass()
	sailServed(t, b)
	m := pass()
	rel, d := state()
	require.Equal(t, "1.30.0", rel.ChartVersion)
	require.Equal(t, 1, rel.Revision)
	require.Equal(t, "1.30.0", m.Status.SailOperator.ChartVersion)
	require.True(t, m.Status.Detected.SailAPI, "the passes below run with the Sail API served")
	uid := d.UID

	t.Run("a newer pinned chart upgrades the release in place", func(t *testing.T) {
		b.r.Config.SailChart = pinnedChart(b.r.Config.SailChart.Repository, "1.31.0", b.sailCharts)
		m := pass()
		rel, d := state()
		assert.Equal(t, "1.31.0", rel.ChartVersion, "the release follows the pinned chart")
		assert.True(t, rel.Deployed, "status %s", rel.Status)
		assert.Equal(t, 2, rel.Revision, "upgraded, not reinstalled")
		assert.Equal(t, uid, d.UID, "the same Deployment, changed in place")
		assert.Equal(t, "example.invalid/sail-operator:1.31.0", d.Spec.Template.Spec.Containers[0].Image)
		assert.Equal(t, "1.31.0", m.Status.SailOperator.ChartVersion, "the status reports the release after the upgrade")
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "widgets.sailoperator.io"}, crd), "the new chart's CRD is applied")
		assert.Equal(t, 1, log.count(string(v1alpha1.EventSailOperatorUpgraded), "(chart 1.30.0 -> 1.31.0)"))
	})

	t.Run("changed sail.values upgrade the release", func(t *testing.T) {
		b.r.Config.SailValues = map[string]any{"image": "mirror.invalid/sail-operator:1.31.0"}
		pass()
		rel, d := state()
		assert.Equal(t, 1, log.count(string(v1alpha1.EventSailOperatorUpgraded), "(sail.values changed)"))
		assert.Equal(t, 3, rel.Revision)
		assert.Equal(t, uid, d.UID)
		assert.Equal(t, "mirror.invalid/sail-operator:1.31.0", d.Spec.Template.Spec.Containers[0].Image)
	})

	t.Run("nothing changed: the release stays", func(t *testing.T) {
		pass()
		rel, _ := state()
		assert.Equal(t, 3, rel.Revision)
		assert.Equal(t, 2, log.count(string(v1alpha1.EventSailOperatorUpgraded), ""), "no further upgrade")
	})

	t.Run("an older pinned chart is no downgrade", func(t *testing.T) {
		b.r.Config.SailChart = pinnedChart(b.r.Config.SailChart.Repository, "1.30.0", b.sailCharts)
		pass()
		rel, _ := state()
		assert.Equal(t, 3, rel.Revision)
		assert.Equal(t, "1.31.0", rel.ChartVersion)
		b.r.Config.SailChart = pinnedChart(b.r.Config.SailChart.Repository, "1.31.0", b.sailCharts)
	})

	t.Run("once another party holds the installation, it stays as it is", func(t *testing.T) {
		require.NoError(t, sailinstall.Records{Client: admin, Reader: admin}.Join(ctx, "sail-operator", "other-tool", "shares it"))
		b.r.Config.SailValues = nil
		m := pass()
		rel, _ := state()
		assert.Equal(t, 3, rel.Revision, "another holder: no upgrade")
		assert.Equal(t, "1.31.0", m.Status.SailOperator.ChartVersion)
		require.NoError(t, sailinstall.Records{Client: admin, Reader: admin}.Leave(ctx, "sail-operator", "other-tool"))
	})

	t.Run("a release that cannot be read is left as it is", func(t *testing.T) {
		b.r.Config.SailValues = map[string]any{"image": "mirror.invalid/sail-operator:other"}
		blind := &unreadableHelm{Helm: helm}
		b.r.Helm = blind
		_, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
		b.r.Helm = helm
		requireFailedPass(t, b.admin, err)
		assert.Zero(t, blind.writes.Load(), "no install, upgrade, rollback or uninstall on an unread release")
		rel, d := state()
		assert.Equal(t, 3, rel.Revision)
		assert.True(t, rel.Deployed)
		assert.Equal(t, uid, d.UID)
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Contains(t, c.Message, "release unreadable")

		// Readable again: the pending change goes through.
		pass()
		rel, _ = state()
		assert.Equal(t, 4, rel.Revision)
	})

	t.Run("a holders record that cannot be read holds the release", func(t *testing.T) {
		b.r.Config.SailValues = map[string]any{"image": "mirror.invalid/sail-operator:yet-another"}
		opClient, opReader := b.r.Client, b.r.Reader
		b.operatorThrough(t, func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if strings.HasSuffix(req.URL.Path, "/configmaps/"+sailinstall.RecordName) {
					return nil, errors.New("holders record unreadable")
				}
				return rt.RoundTrip(req)
			})
		})
		_, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
		b.r.Client, b.r.Reader = opClient, opReader
		requireFailedPass(t, b.admin, err)
		rel, d := state()
		assert.Equal(t, 4, rel.Revision, "nothing moved")
		assert.Equal(t, uid, d.UID)
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		assert.Equal(t, string(v1alpha1.ReasonDetectionFailed), c.Reason)
		assert.Contains(t, c.Message, "holders record unreadable")

		pass()
		rel, _ = state()
		assert.Equal(t, 5, rel.Revision, "readable again: the change goes through")
	})
}

// unreadableHelm fails every read of the release and counts the writes
// attempted through it.
type unreadableHelm struct {
	*sailinstall.Helm
	writes atomic.Int32
}

func (h *unreadableHelm) Get() (*sailinstall.Release, error) {
	return nil, errors.New("release unreadable")
}

func (h *unreadableHelm) Install(ctx context.Context, ch *sailinstall.Chart, values map[string]any) error {
	h.writes.Add(1)
	return h.Helm.Install(ctx, ch, values)
}

func (h *unreadableHelm) Upgrade(ctx context.Context, ch *sailinstall.Chart, values map[string]any) error {
	h.writes.Add(1)
	return h.Helm.Upgrade(ctx, ch, values)
}

func (h *unreadableHelm) Rollback(revision int) error {
	h.writes.Add(1)
	return h.Helm.Rollback(revision)
}

func (h *unreadableHelm) Uninstall() error {
	h.writes.Add(1)
	return h.Helm.Uninstall()
}

// startSailBedWithCharts serves the chart as 1.30.0 and as 1.31.0 and pins 1.30.0.
func startSailBedWithCharts(t *testing.T, log *eventLog) *enrollmentBed {
	t.Helper()
	b := startSailBed(t, log.r, true)
	base := packageChart(t, b.root)
	charts := map[string][]byte{"1.30.0": base, "1.31.0": rechart(t, base, "1.31.0")}
	srv := serveCharts(t, charts)
	b.r.HTTP = srv.Client()
	b.r.Helm = &sailinstall.Helm{Config: b.asOperator, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
	b.r.Config.SailInstall = true
	b.r.Config.HelmTimeout = time.Minute
	b.sailCharts = charts
	b.r.Config.SailChart = pinnedChart(srv.URL, "1.30.0", charts)
	require.NoError(t, b.admin.Create(context.Background(), &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneSidecar}}))
	return b
}

// TestSailInstallKilledMidwayIsFinished: the operator dies in the middle
// of its Helm install, after Helm applied the chart's crds/: before Helm
// wrote the release, or after it wrote it as pending-install but before
// the Sail Operator's Deployment exists. From then on the Sail API is
// served. The restarted operator finishes the install: the release is
// deployed and the Deployment exists, while the CRDs Helm had created and
// the Sail resources made with them stay the same objects.
func TestSailInstallKilledMidwayIsFinished(t *testing.T) {
	for _, tc := range []struct {
		name string
		// killAt: the first request of Helm's that does not get through.
		killAt func(*http.Request) bool
		// left is the release status the kill leaves ("" for none).
		left string
		// event and says: how the restarted operator reports finishing.
		event v1alpha1.EventReason
		says  string
	}{
		{
			name: "before Helm wrote the release",
			killAt: func(req *http.Request) bool {
				return req.Method == http.MethodPost && strings.Contains(req.URL.Path, "/secrets")
			},
			event: v1alpha1.EventSailOperatorInstalled, says: "Installed the Sail Operator chart sail-operator 1.30.0",
		},
		{
			name: "after Helm wrote the release, before the Deployment",
			killAt: func(req *http.Request) bool {
				return req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/deployments")
			},
			left:  "pending-install",
			event: v1alpha1.EventSailOperatorRepaired, says: "was left pending-install and never deployed",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &eventLog{r: events.NewFakeRecorder(500)}
			b := startSailBedWithCharts(t, log)
			ctx := context.Background()
			admin := b.admin

			first := b.r
			dying, killed := dyingHelm(b, tc.killAt)
			first.Helm = dying
			_, err := first.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
			requireFailedPass(t, b.admin, err, "the install died")
			require.True(t, killed.Load())

			asAdmin := &sailinstall.Helm{Config: b.env.Config, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
			rel, err := asAdmin.Get()
			require.NoError(t, err)
			if tc.left == "" {
				require.Nil(t, rel, "no release")
			} else {
				require.NotNil(t, rel)
				require.Equal(t, tc.left, rel.Status, "the release is left as Helm wrote it before the resources")
			}
			assert.True(t, apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: "sail-operator", Name: "sail-operator"}, &appsv1.Deployment{})),
				"the Sail Operator's Deployment was never created")
			rec, err := sailinstall.Records{Client: admin, Reader: admin}.Get(ctx, "sail-operator")
			require.NoError(t, err)
			require.NotNil(t, rec, "the holders record is written before the install")
			sailServed(t, b)
			// What exists of the installation and must survive its repair: the
			// CRDs Helm created from crds/, and a Sail resource made with them.
			crdUIDs := map[string]types.UID{}
			for _, n := range []string{"istios.sailoperator.io", "istiocnis.sailoperator.io", "ztunnels.sailoperator.io"} {
				crd := &apiextensionsv1.CustomResourceDefinition{}
				require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: n}, crd))
				crdUIDs[n] = crd.UID
			}
			// (An IstioCNI: a user's Istio would have the ServiceMesh adopt it.)
			userCNI := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"namespace": "istio-user"}}}
			userCNI.SetGroupVersionKind(sail.GVK(sail.KindIstioCNI))
			userCNI.SetName("user-cni")
			require.NoError(t, admin.Create(ctx, userCNI))

			b.r = restarted(b, first)
			var m *v1alpha1.ServiceMesh
			for range 3 {
				_, m = b.reconcile(t)
			}
			rel, err = asAdmin.Get()
			require.NoError(t, err)
			require.NotNil(t, rel)
			assert.True(t, rel.Deployed, "the install is finished: status %s", rel.Status)
			assert.Equal(t, "1.30.0", rel.ChartVersion)
			assert.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "sail-operator", Name: "sail-operator"}, &appsv1.Deployment{}), "the Sail Operator runs")
			for n, uid := range crdUIDs {
				crd := &apiextensionsv1.CustomResourceDefinition{}
				require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: n}, crd))
				assert.Equal(t, uid, crd.UID, "CRD %s is the same object", n)
				assert.Nil(t, crd.DeletionTimestamp, "CRD %s is not being deleted", n)
			}
			require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(userCNI), userCNI), "the Sail resource survives")
			require.NotNil(t, m.Status.SailOperator)
			assert.Equal(t, "1.30.0", m.Status.SailOperator.ChartVersion)
			assert.Equal(t, 1, log.count(string(tc.event), tc.says), "the finished install is reported")
		})
	}
}

// dyingHelm is the Helm of an operator process that is killed at the
// first request killAt picks: that request and everything after it never
// reach the API server, so Helm cannot record the failure either and the
// release stays as it was. killed reports that it happened.
func dyingHelm(b *enrollmentBed, killAt func(*http.Request) bool) (helm *sailinstall.Helm, killed *atomic.Bool) {
	killed = &atomic.Bool{}
	cfg := rest.CopyConfig(b.asOperator)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if killAt(req) {
				killed.Store(true)
			}
			if killed.Load() {
				return nil, errors.New("the operator process is gone")
			}
			return rt.RoundTrip(req)
		})
	})
	return &sailinstall.Helm{Config: cfg, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}, killed
}

// restarted is the operator after a restart: a new process with the
// configuration of old, its own reconciler (no chart fetched yet).
func restarted(b *enrollmentBed, old *ServiceMeshReconciler) *ServiceMeshReconciler {
	return &ServiceMeshReconciler{Client: old.Client, Reader: old.Reader, Served: old.Served, HTTP: old.HTTP, Config: old.Config,
		Recorder: old.Recorder, Now: old.Now, Metrics: old.Metrics,
		Helm: &sailinstall.Helm{Config: b.asOperator, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}}
}

// TestSailUpgradeKilledMidwayIsFinished: the operator dies in the middle
// of the Helm upgrade to a newer pinned chart, leaving the release
// pending-upgrade, which Helm refuses to upgrade. The restarted operator
// rolls it back to the deployed revision and upgrades from there; the
// Sail Operator's Deployment is the same object throughout. An upgrade
// that fails (Helm records it failed) is retried on the next pass.
func TestSailUpgradeKilledMidwayIsFinished(t *testing.T) {
	log := &eventLog{r: events.NewFakeRecorder(500)}
	b := startSailBedWithCharts(t, log)
	ctx := context.Background()
	admin := b.admin
	asAdmin := &sailinstall.Helm{Config: b.env.Config, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
	release := func() *sailinstall.Release {
		t.Helper()
		rel, err := asAdmin.Get()
		require.NoError(t, err)
		require.NotNil(t, rel)
		return rel
	}
	deployment := func() *appsv1.Deployment {
		t.Helper()
		d := &appsv1.Deployment{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "sail-operator", Name: "sail-operator"}, d))
		return d
	}
	b.reconcile(t)
	sailServed(t, b)
	b.reconcile(t)
	require.True(t, release().Deployed)
	uid := deployment().UID

	// The operator is upgraded (pins 1.31.0) and killed during the upgrade.
	b.r.Config.SailChart = pinnedChart(b.r.Config.SailChart.Repository, "1.31.0", b.sailCharts)
	first := b.r
	dying, killed := dyingHelm(b, func(req *http.Request) bool {
		return req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/deployments")
	})
	first.Helm = dying
	_, err := first.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
	requireFailedPass(t, b.admin, err)
	require.True(t, killed.Load())
	rel := release()
	require.Equal(t, "pending-upgrade", rel.Status)
	require.Equal(t, 2, rel.Revision)

	b.r = restarted(b, first)
	_, m := b.reconcile(t)
	rel = release()
	assert.True(t, rel.Deployed, "status %s", rel.Status)
	assert.Equal(t, "1.31.0", rel.ChartVersion)
	assert.Equal(t, 4, rel.Revision, "2 left pending, 3 the rollback to 1, 4 the upgrade")
	d := deployment()
	assert.Equal(t, uid, d.UID, "the same Deployment throughout")
	assert.Equal(t, "example.invalid/sail-operator:1.31.0", d.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, "1.31.0", m.Status.SailOperator.ChartVersion)
	assert.Equal(t, 1, log.count(string(v1alpha1.EventSailOperatorRepaired), "was left pending-upgrade: back to revision 1"))
	assert.Equal(t, 1, log.count(string(v1alpha1.EventSailOperatorUpgraded), "(chart 1.30.0 -> 1.31.0)"))

	t.Run("a failed upgrade is reported and retried", func(t *testing.T) {
		// The Deployment's update is refused once: Helm records the
		// release failed, and the ServiceMesh says why.
		var refused atomic.Bool
		cfg := rest.CopyConfig(b.asOperator)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/deployments") && refused.CompareAndSwap(false, true) {
					return nil, errors.New("the API server refused the Deployment")
				}
				return rt.RoundTrip(req)
			})
		})
		helm := b.r.Helm
		b.r.Helm = &sailinstall.Helm{Config: cfg, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}
		b.r.Config.SailValues = map[string]any{"image": "mirror.invalid/sail-operator:1.31.0"}
		_, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
		requireFailedPass(t, b.admin, err)
		require.True(t, refused.Load())
		rel := release()
		require.Equal(t, "failed", rel.Status)
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		assert.Equal(t, string(v1alpha1.ReasonSailInstallFailed), c.Reason)
		assert.Contains(t, c.Message, "the API server refused the Deployment")

		_, m = b.reconcile(t)
		rel = release()
		assert.True(t, rel.Deployed, "status %s", rel.Status)
		assert.Equal(t, 6, rel.Revision, "5 failed, 6 the retried upgrade")
		d := deployment()
		assert.Equal(t, uid, d.UID)
		assert.Equal(t, "mirror.invalid/sail-operator:1.31.0", d.Spec.Template.Spec.Containers[0].Image)
		c = meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady))
		require.NotNil(t, c)
		assert.NotEqual(t, string(v1alpha1.ReasonSailInstallFailed), c.Reason)
		b.r.Helm = helm
	})
}
