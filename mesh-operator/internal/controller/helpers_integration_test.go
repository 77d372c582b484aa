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
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
)

// packageChart builds the fake sail-operator chart archive: testdata's
// templates plus the project's minimal Sail CRDs as its crds/.
func packageChart(t *testing.T, root string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, data []byte) {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "sail-operator/" + name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}))
		_, err := tw.Write(data)
		require.NoError(t, err)
	}
	dir := filepath.Join("testdata", "sail-operator")
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		add(filepath.ToSlash(rel), data)
		return nil
	}))
	crds, err := filepath.Glob(filepath.Join(root, "mesh-operator/config/sail-test-crds/*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, crds)
	for _, f := range crds {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		add("crds/"+filepath.Base(f), data)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, gz.Close())
	return buf.Bytes()
}

// chartRepo serves the chart as a Helm repository on 127.0.0.1 and counts
// the requests per path.
type chartRepo struct {
	*httptest.Server
	hits map[string]*atomic.Int32
}

func serveChart(t *testing.T, archive []byte) *chartRepo {
	sum := sha256.Sum256(archive)
	index := fmt.Sprintf(`apiVersion: v1
entries:
  sail-operator:
  - name: sail-operator
    version: 1.30.0
    digest: %s
    urls: [charts/sail-operator-1.30.0.tgz]
  - name: sail-operator
    version: 1.31.0-rc.1
    urls: [charts/does-not-exist.tgz]
  - name: sail-operator
    version: 1.29.3
    urls: [charts/does-not-exist.tgz]
`, hex.EncodeToString(sum[:]))
	repo := &chartRepo{hits: map[string]*atomic.Int32{"/index.yaml": {}, "/charts/sail-operator-1.30.0.tgz": {}}}
	repo.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, ok := repo.hits[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		c.Add(1)
		if strings.HasSuffix(req.URL.Path, ".tgz") {
			_, _ = w.Write(archive)
			return
		}
		_, _ = w.Write([]byte(index))
	}))
	t.Cleanup(repo.Close)
	require.True(t, strings.HasPrefix(repo.URL, "http://127.0.0.1:"), "tests only talk to loopback")
	return repo
}

func (c *chartRepo) count(path string) int32 { return c.hits[path].Load() }

// pinnedChart is the source of version among charts (served at url), with
// its archive's digest pinned as the operator pins its tested chart.
func pinnedChart(url, version string, charts map[string][]byte) sailinstall.ChartSource {
	sum := sha256.Sum256(charts[version])
	return sailinstall.ChartSource{Repository: url, Name: "sail-operator", Version: version, Digest: hex.EncodeToString(sum[:]), InsecureHTTP: true}
}

// fakeSail plays the Sail controller: it puts its finalizer on every Sail
// CR, releases it when the CR is deleted, and reports Ready for the current
// generation of the kinds it is told are ready.
type fakeSail struct {
	t *testing.T
	c client.Client
}

func (f fakeSail) sync(ready ...string) {
	f.t.Helper()
	ctx := context.Background()
	for _, kind := range []string{sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel} {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sail.GVK(kind + "List"))
		if err := f.c.List(ctx, list); err != nil {
			if apierrors.IsNotFound(err) || strings.Contains(err.Error(), "no matches for kind") {
				continue
			}
			require.NoError(f.t, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			fins := u.GetFinalizers()
			has := false
			for _, fin := range fins {
				has = has || fin == sail.Finalizer
			}
			switch {
			case u.GetDeletionTimestamp() != nil && has:
				u.SetFinalizers(nil)
				require.NoError(f.t, f.c.Update(ctx, u))
				continue
			case u.GetDeletionTimestamp() != nil:
				continue
			case !has:
				u.SetFinalizers(append(fins, sail.Finalizer))
				require.NoError(f.t, f.c.Update(ctx, u))
			}
			isReady := false
			for _, k := range ready {
				isReady = isReady || k == kind
			}
			status := "False"
			if isReady {
				status = "True"
			}
			st := map[string]any{
				"observedGeneration": u.GetGeneration(),
				"conditions": []any{
					map[string]any{"type": "Reconciled", "status": "True", "reason": "Reconciled"},
					map[string]any{"type": "Ready", "status": status, "reason": "Fake", "message": "set by the test's fake Sail controller"},
				},
			}
			if kind == sail.KindIstio {
				st["activeRevisionName"] = u.GetName()
			}
			u.Object["status"] = st
			require.NoError(f.t, f.c.Status().Update(ctx, u))
		}
	}
}

// installCRDs creates CRDs from YAML files and waits until they are established.
func installCRDs(t *testing.T, c client.Client, files ...string) {
	t.Helper()
	ctx := context.Background()
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, yaml.Unmarshal(data, crd))
		require.NoError(t, c.Create(ctx, crd))
		names = append(names, crd.Name)
	}
	for _, n := range names {
		eventually(t, 20*time.Second, "CRD "+n+" established", func() bool {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if c.Get(ctx, types.NamespacedName{Name: n}, crd) != nil {
				return false
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true
				}
			}
			return false
		})
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readyIstiod puts an available istiod Deployment (Istio 1.30.1) in
// istio-system, as an existing mesh a ServiceMesh in mode adopt finds.
func readyIstiod(t *testing.T, admin client.Client) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod", Labels: map[string]string{"app": "istiod"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "istiod"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.30.1"}}}}}}
	require.NoError(t, admin.Create(ctx, dep))
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, AvailableReplicas: 1, ReadyReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "Test"}}}
	require.NoError(t, admin.Status().Update(ctx, dep))
}

// meshMTLSMode is the mode of the namespace's mesh-mtls PeerAuthentication,
// which must exist.
func meshMTLSMode(t *testing.T, admin client.Client, namespace string) string {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(enroll.KindPeerAuthentication))
	require.NoError(t, admin.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: enroll.PeerAuthenticationName}, u))
	return enroll.ModeOf(u)
}

// failedStep is the message of EnrollmentFailed when the pass that wrote
// m's status failed a step ("" when none did): the operator reports a
// failed step in status instead of returning it to controller-runtime.
func failedStep(m *v1alpha1.ServiceMesh) string {
	c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionEnrollmentFailed))
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Message
}

// serveSailAPI installs the project's minimal Sail CRDs and waits until
// discovery (as dc sees it) serves their group.
func serveSailAPI(t *testing.T, admin client.Client, root string, dc discovery.ServerResourcesInterface) {
	t.Helper()
	var crds []string
	for _, k := range []string{"istios", "istiocnis", "ztunnels"} {
		crds = append(crds, filepath.Join(root, "mesh-operator/config/sail-test-crds/sailoperator.io_"+k+".yaml"))
	}
	installCRDs(t, admin, crds...)
	eventually(t, 10*time.Second, "the Sail API in discovery", func() bool {
		_, err := dc.ServerResourcesForGroupVersion("sailoperator.io/v1")
		return err == nil
	})
}

// requireFailedPass: the pass that returned err failed a step, which the
// operator reports in status (phase Error, or EnrollmentFailed) and retries
// on its own timers instead of returning it.
func requireFailedPass(t *testing.T, admin client.Client, err error, msgAndArgs ...any) *v1alpha1.ServiceMesh {
	t.Helper()
	require.NoError(t, err, "a failed step is reported in status, not returned")
	m := &v1alpha1.ServiceMesh{}
	require.NoError(t, admin.Get(context.Background(), client.ObjectKey{Name: v1alpha1.SingletonName}, m))
	if m.Status.Phase != PhaseError && failedStep(m) == "" {
		require.Failf(t, "the pass did not fail", "phase %s, conditions %+v %v", m.Status.Phase, m.Status.Conditions, msgAndArgs)
	}
	return m
}
