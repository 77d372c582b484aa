//go:build integration

package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/metrics"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// enrollmentBed is what the enrollment integration tests share: a real API
// server with the ServiceMesh and Istio CRDs, the operator's generated RBAC,
// a valid license in mesh-system/license signed by a key the reconciler
// trusts, and a reconciler acting as the operator on a fake clock.
type enrollmentBed struct {
	env        *testenv.Env
	scheme     *runtime.Scheme
	root       string
	admin      client.Client
	asOperator *rest.Config
	discovery  *discovery.DiscoveryClient
	clock      *fakeClock
	license    *corev1.Secret
	r          *ServiceMeshReconciler
	// sailCharts are the Sail chart archives served, by version.
	sailCharts map[string][]byte
}

func startEnrollmentBed(t *testing.T, licenseID string, rec recorder.EventRecorder) *enrollmentBed {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, v1alpha1.AddToScheme(s))
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	env := testenv.Start(t, s, "mesh-operator/config/crd/bases")
	env.InstallCRDs(t, testenv.ModuleFile(t, "istio.io/api", "v1.32.0", "kubernetes/customresourcedefinitions.gen.yaml"))
	b := &enrollmentBed{env: env, scheme: s, root: testenv.RepoRoot(t), admin: env.Client, clock: &fakeClock{t: time.Now()}}
	ctx := context.Background()

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	require.NoError(t, b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh-system"}}))
	// sail.install=false: only the operator's own rules.
	grantOperatorRBAC(t, b.admin, b.root, false)
	b.asOperator = rest.CopyConfig(env.Config)
	b.asOperator.Impersonate = rest.ImpersonationConfig{UserName: operatorUser}
	opClient, err := client.New(b.asOperator, client.Options{Scheme: s})
	require.NoError(t, err)
	b.discovery, err = discovery.NewDiscoveryClientForConfig(b.asOperator)
	require.NoError(t, err)

	now := b.clock.Now()
	lic, err := license.Sign(license.License{Version: license.FormatVersion, ID: licenseID, Licensee: "integration", Features: []string{"service-mesh"},
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

// reconcileDuringInstall is one reconcile while Helm installs the Sail
// chart: a Sail kind whose CRD is not served yet fails the pass (phase
// Error), which the operator retries on its own; here the caller's polling
// retries it, so it is logged and reported as not done yet.
func (b *enrollmentBed) reconcileDuringInstall(t *testing.T) bool {
	t.Helper()
	_, m := b.reconcile(t)
	if m != nil && m.Status.Phase == PhaseError {
		t.Logf("reconcile while the Sail API appears: %s", meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionReady)).Message)
		return false
	}
	return true
}

// reconcile runs one reconcile of the singleton and returns its result and
// the ServiceMesh as stored afterwards (nil once it is gone).
func (b *enrollmentBed) reconcile(t *testing.T) (ctrl.Result, *v1alpha1.ServiceMesh) {
	t.Helper()
	ctx := context.Background()
	res, err := b.r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: "cluster"}})
	require.NoError(t, err)
	m := &v1alpha1.ServiceMesh{}
	err = b.admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m)
	if apierrors.IsNotFound(err) {
		return res, nil
	}
	require.NoError(t, err)
	return res, m
}

// operatorThrough points the reconciler's clients at the operator's
// identity through the given transport wrappers (outermost first).
func (b *enrollmentBed) operatorThrough(t *testing.T, wraps ...func(http.RoundTripper) http.RoundTripper) {
	t.Helper()
	cfg := rest.CopyConfig(b.asOperator)
	for i := len(wraps) - 1; i >= 0; i-- {
		cfg.Wrap(wraps[i])
	}
	c, err := client.New(cfg, client.Options{Scheme: b.scheme})
	require.NoError(t, err)
	b.r.Client, b.r.Reader = c, c
}

// createBeforeLabelApply has the admin create pod, synchronously, when the
// operator's first label apply on the Pod's namespace is about to be sent:
// a Pod admitted the moment before the data-plane label lands.
func createBeforeLabelApply(t *testing.T, admin client.Client, pod *corev1.Pod) func(http.RoundTripper) http.RoundTripper {
	var once sync.Once
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && req.URL.Path == "/api/v1/namespaces/"+pod.Namespace {
				once.Do(func() { require.NoError(t, admin.Create(context.Background(), pod)) })
			}
			return rt.RoundTrip(req)
		})
	}
}
