//go:build integration

package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// rechart rewrites the test chart archive as version: its Chart.yaml
// version and its default image tag.
func rechart(t *testing.T, archive []byte, version string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		switch h.Name {
		case "sail-operator/Chart.yaml", "sail-operator/values.yaml":
			data = []byte(strings.ReplaceAll(string(data), "1.30.0", version))
		case "sail-operator/crds/sailoperator.io_ztunnels.yaml":
			// A changed CRD: Helm's upgrade alone would leave the old one.
			data = []byte(strings.Replace(string(data), "  name: ztunnels.sailoperator.io\n",
				"  name: ztunnels.sailoperator.io\n  labels:\n    example.invalid/chart-version: "+version+"\n", 1))
		}
		h.Size = int64(len(data))
		require.NoError(t, tw.WriteHeader(h))
		_, err = tw.Write(data)
		require.NoError(t, err)
	}
	// A CRD the new version adds.
	widgets := []byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.sailoperator.io
spec:
  group: sailoperator.io
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "sail-operator/crds/sailoperator.io_widgets.yaml", Mode: 0o644, Size: int64(len(widgets)), ModTime: time.Unix(0, 0)}))
	_, err = tw.Write(widgets)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, gz.Close())
	return buf.Bytes()
}

// serveCharts serves every given version of the chart as one Helm
// repository on 127.0.0.1.
func serveCharts(t *testing.T, charts map[string][]byte) *httptest.Server {
	index := "apiVersion: v1\nentries:\n  sail-operator:\n"
	for v, archive := range charts {
		sum := sha256.Sum256(archive)
		index += fmt.Sprintf("  - name: sail-operator\n    version: %s\n    digest: %s\n    urls: [charts/sail-operator-%s.tgz]\n", v, hex.EncodeToString(sum[:]), v)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/index.yaml" {
			_, _ = w.Write([]byte(index))
			return
		}
		for v, archive := range charts {
			if req.URL.Path == "/charts/sail-operator-"+v+".tgz" {
				_, _ = w.Write(archive)
				return
			}
		}
		http.NotFound(w, req)
	}))
	t.Cleanup(srv.Close)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), "tests only talk to loopback")
	return srv
}

// TestSailUpgradeInPlace: when the pinned chart version (a new operator
// release) or the user's sail.values change, the operator upgrades the
// Helm release it installed, in place: the release's revision grows and
// the Sail Operator's Deployment is the same object, now from the new
// chart and values. Nothing changes while both stay the same. The
// reconciler acts under the chart's installer RBAC (sail.install=true).
func TestSailUpgradeInPlace(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	env := testenv.Start(t, s, "mesh-operator/config/crd/bases")
	root := testenv.RepoRoot(t)
	ctx := context.Background()
	admin := env.Client
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh-system"}}))
	grantOperatorRBAC(t, admin, root, true)
	asOperator := rest.CopyConfig(env.Config)
	asOperator.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	opClient, err := client.New(asOperator, client.Options{Scheme: s})
	require.NoError(t, err)
	dc, err := discovery.NewDiscoveryClientForConfig(asOperator)
	require.NoError(t, err)

	base := packageChart(t, root)
	charts := map[string][]byte{"1.30.0": base, "1.31.0": rechart(t, base, "1.31.0")}
	srv := serveCharts(t, charts)
	mesh := &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}, Spec: v1alpha1.ServiceMeshSpec{Version: "1.30"}}
	require.NoError(t, admin.Create(ctx, mesh))
	helm := &sailinstall.Helm{Config: asOperator, StorageNamespace: "mesh-system", Namespace: "sail-operator", ReleaseName: SailReleaseName, Log: ctrl.Log, Timeout: time.Minute}

	// operator is a fresh process of an operator release pinning version
	// with the given sail.values: its own reconciler, chart not yet fetched.
	install := func(version string, values map[string]any) {
		t.Helper()
		r := &ServiceMeshReconciler{
			Client: opClient, Reader: opClient, Served: &served.Catalog{Discovery: dc}, HTTP: srv.Client(), Helm: helm,
			Config: Config{OperatorNamespace: "mesh-system", SailInstall: true, SailNamespace: "sail-operator", HelmTimeout: time.Minute,
				SailChart: pinnedChart(srv.URL, version, charts), SailValues: values},
			Recorder: events.NewFakeRecorder(100), Now: time.Now,
		}
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(mesh), m))
		_, err := r.installSail(ctx, m)
		require.NoError(t, err)
	}
	state := func() (*sailinstall.Release, *appsv1.Deployment) {
		t.Helper()
		rel, err := helm.Get()
		require.NoError(t, err)
		require.NotNil(t, rel, "the release exists")
		d := &appsv1.Deployment{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "sail-operator", Name: "sail-operator"}, d))
		return rel, d
	}

	install("1.30.0", nil)
	rel, d := state()
	assert.Equal(t, "1.30.0", rel.ChartVersion)
	assert.True(t, rel.Deployed)
	uid := d.UID
	assert.Equal(t, "example.invalid/sail-operator:1.30.0", d.Spec.Template.Spec.Containers[0].Image)

	install("1.31.0", nil)
	rel, d = state()
	assert.Equal(t, "1.31.0", rel.ChartVersion, "the release follows the pinned chart version")
	assert.True(t, rel.Deployed, "status %s", rel.Status)
	assert.Equal(t, 2, rel.Revision, "upgraded, not reinstalled")
	assert.Equal(t, uid, d.UID, "the same Deployment, changed in place")
	assert.Equal(t, "example.invalid/sail-operator:1.31.0", d.Spec.Template.Spec.Containers[0].Image)
	// The chart's CRDs came along: the changed one is applied, the new one
	// created and recorded for the last holder to remove.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "ztunnels.sailoperator.io"}, crd))
	assert.Equal(t, "1.31.0", crd.Labels["example.invalid/chart-version"])
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "widgets.sailoperator.io"}, crd))
	rec, err := sailinstall.Records{Client: admin, Reader: admin}.Get(ctx, "sail-operator")
	require.NoError(t, err)
	require.NotNil(t, rec)
	assert.Contains(t, rec.CRDs, "widgets.sailoperator.io")
	assert.Contains(t, rec.CRDs, "ztunnels.sailoperator.io", "the install's CRDs stay recorded")

	mirrored := map[string]any{"image": "mirror.invalid/sail-operator:1.31.0"}
	install("1.31.0", mirrored)
	rel, d = state()
	assert.Equal(t, 3, rel.Revision, "a sail.values change upgrades too")
	assert.Equal(t, uid, d.UID)
	assert.Equal(t, "mirror.invalid/sail-operator:1.31.0", d.Spec.Template.Spec.Containers[0].Image)

	install("1.31.0", map[string]any{"image": "mirror.invalid/sail-operator:1.31.0"})
	rel, _ = state()
	assert.Equal(t, 3, rel.Revision, "nothing changed: no upgrade")

	// An older operator (pinning 1.30.0) never downgrades.
	install("1.30.0", mirrored)
	rel, _ = state()
	assert.Equal(t, 3, rel.Revision, "no downgrade")
	assert.Equal(t, "1.31.0", rel.ChartVersion)

	// Once another party holds the installation too, it stays as it is.
	require.NoError(t, sailinstall.Records{Client: admin, Reader: admin}.Join(ctx, "sail-operator", "other-tool", "shares it"))
	install("1.31.0", nil)
	rel, _ = state()
	assert.Equal(t, 3, rel.Revision, "another holder: no upgrade")
}
