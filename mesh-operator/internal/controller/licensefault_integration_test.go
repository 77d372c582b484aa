//go:build integration

package controller

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
	"github.com/ericdev/fleetmesh/shared/served"
)

// licenseSecretPath is the license Secret's URL path, as the operator's
// client requests it.
const licenseSecretPath = "/api/v1/namespaces/mesh-system/secrets/license"

// enrolledSnapshot is the resourceVersion of everything that makes a
// namespace enrolled: the namespace (its labels), its mesh-mtls
// PeerAuthentication and its isolation AuthorizationPolicy. An unchanged
// snapshot means nothing was written to any of them.
func enrolledSnapshot(t *testing.T, admin client.Client, namespaces ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, n := range namespaces {
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: n}, ns))
		require.Equal(t, labels.MeshEnabled, ns.Labels[labels.Mesh])
		out["Namespace/"+n] = ns.ResourceVersion
		for _, obj := range []struct{ kind, name string }{
			{enroll.KindPeerAuthentication, enroll.PeerAuthenticationName},
			{enroll.KindAuthorizationPolicy, enroll.IsolationPolicyName},
		} {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(obj.kind))
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: n, Name: obj.name}, u), "%s %s/%s", obj.kind, n, obj.name)
			out[obj.kind+"/"+n+"/"+obj.name] = u.GetResourceVersion()
		}
	}
	return out
}

// strictSidecarMesh brings up an adopted sidecar mesh with two enrolled
// namespaces at STRICT with namespace isolation.
func strictSidecarMesh(t *testing.T, b *enrollmentBed) []string {
	t.Helper()
	ctx, admin := context.Background(), b.admin
	readyIstiod(t, admin)
	always := corev1.ContainerRestartPolicyAlways
	names := []string{"pay", "shop"}
	for _, n := range names {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
		require.NoError(t, admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "app", Labels: map[string]string{"app": "app"}},
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: podmesh.ProxyContainer, Image: "example.invalid/proxyv2", RestartPolicy: &always}},
				Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}))
	}
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneSidecar}}))
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase)
	_, m = b.reconcile(t)
	require.Equal(t, names, m.Status.EnrolledNamespaces)
	for _, n := range names {
		require.Equal(t, "strict", meshMTLSMode(t, admin, n), n)
	}
	return names
}

// failingGet answers the operator's GETs of path with what fail returns,
// and counts them; every other request goes through.
func failingGet(path string, hits *atomic.Int32, fail func(*http.Request) (*http.Response, error)) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet && req.URL.Path == path {
				hits.Add(1)
				return fail(req)
			}
			return rt.RoundTrip(req)
		})
	}
}

// statusResponse is an API server error answer with a Status body.
func statusResponse(req *http.Request, code int, reason metav1.StatusReason, header http.Header) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the test","reason":"` + string(reason) + `","code":` + strconv.Itoa(code) + `}`
	h := http.Header{"Content-Type": []string{"application/json"}}
	for k, v := range header {
		h[k] = v
	}
	return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: req}
}

// assertHeldWhileUnreadable runs passes while the license cannot be read
// and checks after each one that nothing of the enrolled namespaces was
// written, that status says why, and that the next look is soon.
func assertHeldWhileUnreadable(t *testing.T, b *enrollmentBed, names []string, before map[string]string, passes int) {
	t.Helper()
	for i := 0; i < passes; i++ {
		res, m := b.reconcile(t)
		assert.Equal(t, before, enrolledSnapshot(t, b.admin, names...), "pass %d: an unreadable license changes nothing", i)
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionPreviewLocked))
		require.NotNil(t, c)
		assert.Equal(t, metav1.ConditionUnknown, c.Status, "pass %d: the license is not known to be invalid", i)
		assert.Equal(t, string(v1alpha1.ReasonLicenseUnreadable), c.Reason, "pass %d", i)
		assert.Equal(t, names, m.Status.EnrolledNamespaces, "pass %d: status still lists what is enrolled", i)
		assert.Greater(t, res.RequeueAfter, time.Duration(0), "pass %d: looks again", i)
		assert.LessOrEqual(t, res.RequeueAfter, licenseUnreadableRecheck, "pass %d: looks again soon", i)
		b.clock.Advance(time.Minute)
	}
}

// TestUnreadableLicenseHoldsTheMesh (issue 40 item 1): a license Secret
// the operator cannot read is not a missing license. With the read refused
// by RBAC, answered 500 or 429, or timing out, every enrolled namespace
// keeps its labels, STRICT PeerAuthentication and isolation policy (not
// one write), status says LicenseUnreadable, and once the read works again
// nothing has moved.
func TestUnreadableLicenseHoldsTheMesh(t *testing.T) {
	b := startEnrollmentBed(t, "lic-unreadable", events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	names := strictSidecarMesh(t, b)
	before := enrolledSnapshot(t, admin, names...)

	t.Run("RBAC removed", func(t *testing.T) {
		binding := &rbacv1.RoleBinding{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: "mesh-system", Name: "mesh-operator"}, binding))
		require.NoError(t, admin.Delete(ctx, binding))
		waitDenied(t, admin, operatorUser, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "mesh-system", Name: "license"})
		assertHeldWhileUnreadable(t, b, names, before, 3)

		binding.ResourceVersion, binding.UID = "", ""
		require.NoError(t, admin.Create(ctx, binding))
		waitAllowedLicense(t, admin)
		_, m := b.reconcile(t)
		assert.Equal(t, before, enrolledSnapshot(t, admin, names...))
		assert.Equal(t, string(v1alpha1.ReasonLicenseValid), meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionPreviewLocked)).Reason)
		assert.Equal(t, PhaseReady, m.Status.Phase)
	})

	faults := map[string]func(*http.Request) (*http.Response, error){
		"500": func(req *http.Request) (*http.Response, error) {
			return statusResponse(req, http.StatusInternalServerError, metav1.StatusReasonInternalError, nil), nil
		},
		"429 with Retry-After": func(req *http.Request) (*http.Response, error) {
			return statusResponse(req, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, http.Header{"Retry-After": []string{"0"}}), nil
		},
		"timeout": func(req *http.Request) (*http.Response, error) {
			return nil, &timeoutError{}
		},
	}
	for name, fail := range faults {
		t.Run("transport "+name, func(t *testing.T) {
			var hits atomic.Int32
			b.operatorThrough(t, failingGet(licenseSecretPath, &hits, fail))
			assertHeldWhileUnreadable(t, b, names, before, 3)
			require.Positive(t, hits.Load(), "the fault was reached")

			b.operatorThrough(t)
			_, m := b.reconcile(t)
			assert.Equal(t, before, enrolledSnapshot(t, admin, names...))
			assert.Equal(t, PhaseReady, m.Status.Phase)
		})
	}
}

// TestLicenseRenewedByDeleteAndCreate (issue 40 item 1): a license Secret
// that disappears is given licenseMissingGrace before anything is
// released, long enough for a renewal done as delete + create; one that
// stays missing past it is positive evidence, and the namespaces are
// released.
func TestLicenseRenewedByDeleteAndCreate(t *testing.T) {
	b := startEnrollmentBed(t, "lic-renewal", events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	names := strictSidecarMesh(t, b)
	before := enrolledSnapshot(t, admin, names...)

	// The renewal: deleted, then created again a minute later.
	require.NoError(t, admin.Delete(ctx, b.license.DeepCopy()))
	res, m := b.reconcile(t)
	assert.Equal(t, before, enrolledSnapshot(t, admin, names...), "a Secret just gone releases nothing")
	c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionPreviewLocked))
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonLicenseMissing), c.Reason)
	assert.Contains(t, c.Message, "kept as they are until")
	assert.LessOrEqual(t, res.RequeueAfter, lockedRecheck)
	b.clock.Advance(time.Minute)
	_, _ = b.reconcile(t)
	assert.Equal(t, before, enrolledSnapshot(t, admin, names...))

	renewed := b.license.DeepCopy()
	renewed.ResourceVersion = ""
	require.NoError(t, admin.Create(ctx, renewed))
	_, m = b.reconcile(t)
	assert.Equal(t, before, enrolledSnapshot(t, admin, names...), "the renewal moved nothing")
	assert.Equal(t, PhaseReady, m.Status.Phase)

	// Gone for good: after the grace the namespaces are released.
	require.NoError(t, admin.Delete(ctx, renewed))
	_, _ = b.reconcile(t)
	assert.Equal(t, before, enrolledSnapshot(t, admin, names...))
	b.clock.Advance(licenseMissingGrace + time.Second)
	_, m = b.reconcile(t)
	assert.Empty(t, m.Status.EnrolledNamespaces)
	for _, n := range names {
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: n}, ns))
		assert.Empty(t, ns.Labels[labels.MeshMTLS], "%s: released once the license stayed missing", n)
	}
}

// timeoutError is a client-side timeout, as net/http reports one.
type timeoutError struct{}

func (*timeoutError) Error() string   { return "injected: i/o timeout" }
func (*timeoutError) Timeout() bool   { return true }
func (*timeoutError) Temporary() bool { return true }

func waitAllowedLicense(t *testing.T, admin client.Client) {
	t.Helper()
	waitAccess(t, admin, operatorUser, true, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "mesh-system", Name: "license"})
}

func waitDenied(t *testing.T, admin client.Client, user string, a authorizationv1.ResourceAttributes) {
	t.Helper()
	waitAccess(t, admin, user, false, a)
}

// waitAccess waits until a SubjectAccessReview for user answers want: RBAC
// changes reach the authorizer's cache a moment after they are written.
func waitAccess(t *testing.T, admin client.Client, user string, want bool, a authorizationv1.ResourceAttributes) {
	t.Helper()
	eventually(t, 20*time.Second, "access review settled", func() bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &a}}
		require.NoError(t, admin.Create(context.Background(), sar))
		return sar.Status.Allowed == want
	})
}

// TestFailingStepKeepsPromisedTimers (issue 40 item 2): a step that keeps
// failing (here a namespace whose PeerAuthentication name is taken by
// someone else's object: EnrollmentConflict on every pass) must not
// postpone what the operator promised. Under a manager, as in a cluster, a
// maintenance window ends while that error persists; STRICT must be back
// within seconds of the window's end, not after an error backoff grown
// toward controller-runtime's 1,000 s.
func TestFailingStepKeepsPromisedTimers(t *testing.T) {
	b := startEnrollmentBed(t, "lic-timers", events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	names := strictSidecarMesh(t, b)

	// Someone else's PeerAuthentication with the operator's name: that
	// namespace cannot be enrolled, and every pass reports it.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "taken", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
	foreign := &unstructured.Unstructured{}
	foreign.SetGroupVersionKind(enroll.SecurityGroupVersion.WithKind(enroll.KindPeerAuthentication))
	foreign.SetNamespace("taken")
	foreign.SetName(enroll.PeerAuthenticationName)
	require.NoError(t, unstructured.SetNestedField(foreign.Object, "PERMISSIVE", "spec", "mtls", "mode"))
	require.NoError(t, admin.Create(ctx, foreign))

	mgr, err := ctrl.NewManager(b.asOperator, ctrl.Options{Scheme: b.scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	require.NoError(t, err)
	live := &ServiceMeshReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Served: &served.Catalog{Discovery: b.discovery}, Config: b.r.Config,
		Recorder: events.NewFakeRecorder(10000), Now: time.Now, Metrics: b.r.Metrics}
	require.NoError(t, live.setup(mgr, "servicemesh-timers"))

	// The window opens before the manager starts and ends windowLength
	// later: long enough for the failing passes to grow an error backoff.
	const windowLength = 25 * time.Second
	end := time.Now().Add(windowLength).Truncate(time.Second)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m := &v1alpha1.ServiceMesh{}
		if err := admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m); err != nil {
			return err
		}
		until := metav1.NewTime(end)
		m.Spec.MTLS.MaintenanceUntil = &until
		return admin.Update(ctx, m)
	}))

	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	eventually(t, 20*time.Second, "the window relaxed every enrolled namespace", func() bool {
		for _, n := range names {
			if meshMTLSMode(t, admin, n) != "permissive" {
				return false
			}
		}
		return true
	})
	eventually(t, 20*time.Second, "the conflict reported", func() bool {
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionEnrollmentConflict))
		return c != nil && c.Status == metav1.ConditionTrue
	})
	time.Sleep(time.Until(end))
	restored := time.Now()
	eventually(t, 2*windowLength, "STRICT restored after the window", func() bool {
		for _, n := range names {
			if meshMTLSMode(t, admin, n) != "strict" {
				return false
			}
		}
		restored = time.Now()
		return true
	})
	late := restored.Sub(end)
	t.Logf("STRICT restored %s after the window's end", late.Round(10*time.Millisecond))
	assert.Less(t, late, 3*time.Second, "the window's end was not postponed by the failing namespace's backoff")
}
