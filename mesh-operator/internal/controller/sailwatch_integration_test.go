//go:build integration

package controller

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/served"
)

// writeLog records every write request the operator's client sends, as the
// API server receives it (method and path), with its time.
type writeLog struct {
	mu     sync.Mutex
	writes []string
	at     []time.Time
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodGet {
			l.mu.Lock()
			l.writes = append(l.writes, req.Method+" "+req.URL.Path)
			l.at = append(l.at, time.Now())
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// since is every write sent at or after t.
func (l *writeLog) since(t time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, at := range l.at {
		if !at.Before(t) {
			out = append(out, l.writes[i])
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// reconcileMarks records when a reconcile began: every reconcile of a
// licensed mesh first reads the license Secret through Reader.
type reconcileMarks struct {
	client.Reader
	mu sync.Mutex
	at []time.Time
}

func (m *reconcileMarks) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		m.mu.Lock()
		m.at = append(m.at, time.Now())
		m.mu.Unlock()
	}
	return m.Reader.Get(ctx, key, obj, opts...)
}

func (m *reconcileMarks) last() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.at) == 0 {
		return time.Time{}
	}
	return m.at[len(m.at)-1]
}

func (m *reconcileMarks) since(t time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, at := range m.at {
		if !at.Before(t) {
			n++
		}
	}
	return n
}

// TestSailWatchAndRestIntegration runs the operator under a manager, as it
// runs in a cluster, with a managed ambient mesh and namespaces whose Pods
// ztunnel already captures:
//   - the Sail resources are watched: a Sail resource turning Ready moves
//     the ServiceMesh to Ready at once, not on the next timed re-check;
//   - once every namespace is STRICT and the status says so, the operator
//     writes nothing more (no status patch, no label or policy apply).
func TestSailWatchAndRestIntegration(t *testing.T) {
	const namespaces = 40
	b := startEnrollmentBed(t, "lic-sail-watch", events.NewFakeRecorder(1000))
	ctx, admin := context.Background(), b.admin
	serveSailAPI(t, admin, b.root, b.discovery)
	var names []string
	for i := 0; i < namespaces; i++ {
		name := fmt.Sprintf("app-%d", i)
		names = append(names, name)
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
		require.NoError(t, admin.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "app", Annotations: map[string]string{labels.IstioAmbientRedirection: "enabled"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}))
	}

	writes := &writeLog{}
	cfg := rest.CopyConfig(b.asOperator)
	cfg.WrapTransport = writes.wrap
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: b.scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	require.NoError(t, err)
	marks := &reconcileMarks{Reader: mgr.GetAPIReader()}
	live := &ServiceMeshReconciler{Client: mgr.GetClient(), Reader: marks, Served: &served.Catalog{Discovery: b.discovery}, Config: b.r.Config,
		Recorder: events.NewFakeRecorder(1000), Now: time.Now, Metrics: b.r.Metrics}
	require.NoError(t, live.setup(mgr, "servicemesh-sailwatch"))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeManaged, Provider: v1alpha1.ProviderAuto, DataPlane: v1alpha1.DataPlaneAmbient,
			Isolation: v1alpha1.IsolationNamespace, MTLS: v1alpha1.MTLS{Mode: v1alpha1.MTLSStrict}}}))
	get := func() *v1alpha1.ServiceMesh {
		m := &v1alpha1.ServiceMesh{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "cluster"}, m))
		return m
	}
	sailExists := func(kind string) bool {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(kind))
		return admin.Get(ctx, client.ObjectKey{Name: "default"}, u) == nil
	}
	eventually(t, 20*time.Second, "the operator created the Sail resources", func() bool {
		return sailExists(sail.KindIstio) && sailExists(sail.KindIstioCNI) && sailExists(sail.KindZTunnel)
	})
	fake := fakeSail{t: t, c: admin}
	fake.sync() // finalizers, and Ready=False for the current generation
	eventually(t, 20*time.Second, "ServiceMesh Progressing on the Sail resources", func() bool {
		c := meta.FindStatusCondition(get().Status.Conditions, string(v1alpha1.ConditionControlPlaneReady))
		return c != nil && c.Status == metav1.ConditionFalse && get().Status.Phase == PhaseProgressing
	})
	// Wait until the operator is quiet (its own status write's reconcile
	// done), then turn the Sail resources Ready right after a reconcile: a
	// timed re-check would only come back convergingRecheck later.
	eventually(t, 20*time.Second, "the operator idle for 700 ms", func() bool {
		l := marks.last()
		return !l.IsZero() && time.Since(l) > 700*time.Millisecond
	})
	readyAt := time.Now()
	fake.sync(sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel)
	// The operator's first write after that (a namespace's policy or
	// labels: enrollment waits for the control plane) shows it noticed.
	eventually(t, 15*time.Second, "the operator acting on the Ready control plane", func() bool { return len(writes.since(readyAt)) > 0 })
	took := time.Since(readyAt)
	assert.Less(t, took, 2*time.Second, "the operator followed the Sail resources' Ready within %s (first write %v); a timed re-check would take up to %s",
		took, writes.since(readyAt)[0], convergingRecheck)

	strict := func(name string) bool {
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, ns))
		return ns.Labels[labels.MeshState] == labels.MeshStateEnrolled && ns.Labels[labels.MeshMTLS] == "strict"
	}
	eventually(t, 60*time.Second, "every namespace STRICT", func() bool {
		for _, n := range names {
			if !strict(n) {
				return false
			}
		}
		return true
	})
	// From the moment the status reports every namespace enrolled and cut
	// over, the world is settled: for longer than the converging re-check,
	// nothing is written (a reconcile queued behind the enrollment pass
	// included).
	var rest time.Time
	eventually(t, 30*time.Second, "status lists every namespace enrolled, cut over", func() bool {
		m := get()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionMTLSCutover))
		rest = time.Now()
		return len(m.Status.EnrolledNamespaces) == namespaces && c != nil && c.Status == metav1.ConditionTrue && m.Status.Phase == PhaseReady
	})
	time.Sleep(convergingRecheck + 2*time.Second)
	assert.Empty(t, writes.since(rest), "writes once every namespace is STRICT and reported")
	t.Logf("reconciles at rest: %d; writes in all: %d", marks.since(rest), len(writes.since(time.Time{})))
}
