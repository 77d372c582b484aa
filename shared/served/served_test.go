package served

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// fakeDiscovery answers with what the test sets and counts the runs: the
// error injection and counting a real API server cannot give. The
// behaviour against a real one is in served_integration_test.go.
type fakeDiscovery struct {
	mu    sync.Mutex
	lists []*metav1.APIResourceList
	err   error
	runs  int
	// gate, when set, holds every run until it is closed.
	gate chan struct{}
}

func (f *fakeDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	f.mu.Lock()
	gate := f.gate
	f.runs++
	lists, err := f.lists, f.err
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return nil, lists, err
}

func (f *fakeDiscovery) set(err error, lists ...*metav1.APIResourceList) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists, f.err = lists, err
}

func (f *fakeDiscovery) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs
}

func list(gv string, kinds ...string) *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: gv}
	for i := 0; i+1 < len(kinds); i += 2 {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: kinds[i+1], Kind: kinds[i]})
	}
	return l
}

var (
	authz      = schema.GroupVersionKind{Group: "security.istio.io", Version: "v1", Kind: "AuthorizationPolicy"}
	peerAuthn  = schema.GroupVersionKind{Group: "security.istio.io", Version: "v1", Kind: "PeerAuthentication"}
	httpRoute  = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
	istioLists = list("security.istio.io/v1", "AuthorizationPolicy", "authorizationpolicies", "PeerAuthentication", "peerauthentications")
	coreList   = list("v1", "Pod", "pods", "Pod", "pods/status", "Namespace", "namespaces")
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }
func catalog(d Discoverer, maxAge time.Duration, c *clock) *Catalog {
	return &Catalog{Discovery: d, MaxAge: maxAge, Now: c.now}
}

func kind(t *testing.T, c *Catalog, gvk schema.GroupVersionKind) bool {
	t.Helper()
	ok, err := c.Kind(gvk)
	require.NoError(t, err)
	return ok
}

// TestSnapshotIsReusedForMaxAge: every ask within MaxAge is answered from
// one discovery run (1,000 fleets ask every reconcile); an API installed
// later is found by the first ask after MaxAge, without a restart.
func TestSnapshotIsReusedForMaxAge(t *testing.T) {
	d, clk := &fakeDiscovery{}, newClock()
	d.set(nil, coreList)
	c := catalog(d, 5*time.Second, clk)
	for range 10 {
		assert.False(t, kind(t, c, authz))
		assert.False(t, kind(t, c, httpRoute))
		clk.add(400 * time.Millisecond)
	}
	assert.Equal(t, 1, d.count(), "one discovery run within MaxAge")

	d.set(nil, coreList, istioLists) // Istio installed
	clk.add(999 * time.Millisecond)  // 4.999 s after the run
	assert.False(t, kind(t, c, authz), "the snapshot is at most MaxAge old, not fresher")
	clk.add(time.Millisecond)
	assert.True(t, kind(t, c, authz), "found once the snapshot is MaxAge old")
	assert.Equal(t, 2, d.count())
}

// TestFreshRunsDiscoveryForEveryAsk: MaxAge 0 (the mesh operator) answers
// every ask from a discovery run made after it.
func TestFreshRunsDiscoveryForEveryAsk(t *testing.T) {
	d := &fakeDiscovery{}
	d.set(nil, coreList)
	c := &Catalog{Discovery: d, MaxAge: Fresh}
	assert.False(t, kind(t, c, authz))
	d.set(nil, coreList, istioLists)
	assert.True(t, kind(t, c, authz))
	d.set(nil, coreList)
	assert.False(t, kind(t, c, authz))
	assert.Equal(t, 3, d.count())
}

// TestConcurrentAsksShareOneRun: askers that find the snapshot stale at
// once wait for one discovery run instead of each running their own.
func TestConcurrentAsksShareOneRun(t *testing.T) {
	d := &fakeDiscovery{gate: make(chan struct{})}
	d.set(nil, coreList, istioLists)
	c := &Catalog{Discovery: d, MaxAge: 5 * time.Second}
	var wg sync.WaitGroup
	results := make([]bool, 8)
	for i := range results {
		wg.Go(func() {
			ok, err := c.Kind(authz)
			assert.NoError(t, err)
			results[i] = ok
		})
	}
	require.Eventually(t, func() bool { return d.count() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond) // let the others queue behind the run
	close(d.gate)
	wg.Wait()
	assert.Equal(t, 1, d.count())
	for _, ok := range results {
		assert.True(t, ok)
	}
}

// TestDiscoveryErrorIsNotNotServed: a failed discovery run is an error for
// the asker, not "not served" (which would make a fleet tear down its
// Istio policies, or the mesh operator install a second Sail operator);
// the next ask tries again.
func TestDiscoveryErrorIsNotNotServed(t *testing.T) {
	d, clk := &fakeDiscovery{}, newClock()
	d.set(apierrors.NewServiceUnavailable("etcd is down"))
	c := catalog(d, 5*time.Second, clk)
	ok, err := c.Kind(authz)
	require.Error(t, err)
	assert.True(t, apierrors.IsServiceUnavailable(err), "the cause is kept: %v", err)
	assert.False(t, ok)
	_, err = c.Snapshot()
	require.Error(t, err)

	d.set(nil, coreList, istioLists)
	assert.True(t, kind(t, c, authz), "an error is not remembered")
	assert.Equal(t, 3, d.count())

	// A failed refresh does not make an older snapshot look fresh either.
	d.set(errors.New("connection refused"))
	clk.add(5 * time.Second)
	_, err = c.Kind(authz)
	require.Error(t, err)
}

// TestFailedGroupLeavesTheRestStanding: a broken aggregated API fails its
// own group version's discovery; questions about other groups are
// answered, a question about that group version is an error.
func TestFailedGroupLeavesTheRestStanding(t *testing.T) {
	d := &fakeDiscovery{}
	metrics := schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}
	d.set(&discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{metrics: apierrors.NewServiceUnavailable("no endpoints")}},
		coreList, istioLists)
	c := &Catalog{Discovery: d, MaxAge: time.Minute}
	assert.True(t, kind(t, c, authz))
	assert.False(t, kind(t, c, httpRoute))
	_, err := c.Kind(metrics.WithKind("PodMetrics"))
	var failed *GroupFailedError
	require.ErrorAs(t, err, &failed)
	assert.Equal(t, metrics, failed.GroupVersion)
	s, err := c.Snapshot()
	require.NoError(t, err)
	assert.NotContains(t, s.Resources(), "metrics.k8s.io")
	assert.False(t, s.Group("metrics.k8s.io"))
}

// TestResources: the group -> resources map the mesh operator's detection
// reads: subresources left out, the core group as "", every version's
// resources under its group.
func TestResources(t *testing.T) {
	d := &fakeDiscovery{}
	d.set(nil, coreList, istioLists, list("security.istio.io/v1beta1", "AuthorizationPolicy", "authorizationpolicies"),
		list("route.openshift.io/v1"), list("", "Broken", "broken"))
	s, err := (&Catalog{Discovery: d}).Snapshot()
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"":                   {"pods", "namespaces"},
		"security.istio.io":  {"authorizationpolicies", "peerauthentications", "authorizationpolicies"},
		"route.openshift.io": nil,
	}, s.Resources())
	assert.True(t, s.Group("route.openshift.io"), "a group serving no resource is still served")
	assert.False(t, s.Group("gateway.networking.k8s.io"))
}

// kindGone is what client-go makes of the API server's answer to a write
// of a kind it does not serve: a plain-text 404.
func kindGone(gvk schema.GroupVersionKind, resource, name string) error {
	return apierrors.NewGenericServerResponse(http.StatusNotFound, "PATCH", schema.GroupResource{Group: gvk.Group, Resource: resource}, name, "404 page not found", 0, true)
}

// TestGoneAtOnceThenDiscoveryDecides: a write answered "the server could
// not find the requested resource" makes the kind not served at once,
// although the snapshot (and, lagging, discovery) still list it; the
// other kinds are judged by a new discovery run; after MaxAge a discovery
// run made after the mark decides again.
func TestGoneAtOnceThenDiscoveryDecides(t *testing.T) {
	d, clk := &fakeDiscovery{}, newClock()
	d.set(nil, coreList, istioLists)
	c := catalog(d, 5*time.Second, clk)
	require.True(t, kind(t, c, authz))

	assert.True(t, c.Gone(authz, kindGone(authz, "authorizationpolicies", "f-mesh")))
	assert.False(t, kind(t, c, authz), "gone at once")
	assert.True(t, kind(t, c, peerAuthn), "discovery still lists the other kind")
	assert.Equal(t, 2, d.count(), "the snapshot was dropped: discovery ran again")

	clk.add(4 * time.Second)
	assert.False(t, kind(t, c, authz), "still gone although discovery lists it (it lags)")
	clk.add(time.Second)
	assert.True(t, kind(t, c, authz), "MaxAge after the write, discovery decides again")
	assert.Equal(t, 3, d.count(), "by a run made after the mark, not the snapshot taken during it")

	// Removed for real this time: discovery agrees after the mark.
	assert.True(t, c.Gone(authz, kindGone(authz, "authorizationpolicies", "f-mesh")))
	d.set(nil, coreList)
	clk.add(5 * time.Second)
	assert.False(t, kind(t, c, authz))
	assert.False(t, kind(t, c, peerAuthn))

	// A group version whose only kinds are gone is not served either.
	d.set(nil, coreList, list("gateway.networking.k8s.io/v1", "HTTPRoute", "httproutes"))
	clk.add(5 * time.Second)
	require.True(t, kind(t, c, httpRoute))
	require.True(t, c.Gone(httpRoute, kindGone(httpRoute, "httproutes", "f-routing")))
	s, err := c.Snapshot()
	require.NoError(t, err)
	assert.False(t, s.Group(httpRoute.Group))
	assert.NotContains(t, s.Resources(), httpRoute.Group)
}

// TestGoneIgnoresOtherNotFounds: a missing namespace or object is answered
// with a Status naming it; that is not about the kind. Nor is any other
// error.
func TestGoneIgnoresOtherNotFounds(t *testing.T) {
	d, clk := &fakeDiscovery{}, newClock()
	d.set(nil, coreList, istioLists)
	c := catalog(d, 5*time.Second, clk)
	require.True(t, kind(t, c, authz))
	for _, err := range []error{
		apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "gone"),
		apierrors.NewNotFound(schema.GroupResource{Group: authz.Group, Resource: "authorizationpolicies"}, "f-mesh"),
		apierrors.NewConflict(schema.GroupResource{Group: authz.Group, Resource: "authorizationpolicies"}, "f-mesh", errors.New("x")),
		errors.New("connection reset"),
		nil,
	} {
		assert.False(t, c.Gone(authz, err), "%v", err)
		assert.True(t, kind(t, c, authz), "%v", err)
	}
	assert.Equal(t, 1, d.count())
}

// TestNamespacedListable: what a caller lists to learn everything in a
// namespace: namespaced resources with the list verb, each group and
// resource once (its first version), and the group versions whose
// discovery failed, which leave the answer incomplete.
func TestNamespacedListable(t *testing.T) {
	d := &fakeDiscovery{}
	metrics := schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}
	listVerbs := metav1.Verbs{"get", "list", "watch"}
	d.set(&discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{metrics: apierrors.NewServiceUnavailable("no endpoints")}},
		&metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "namespaces", Kind: "Namespace", Verbs: listVerbs},
			{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: listVerbs},
			{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: listVerbs},
			{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
		}},
		&metav1.APIResourceList{GroupVersion: "security.istio.io/v1", APIResources: []metav1.APIResource{
			{Name: "peerauthentications", Kind: "PeerAuthentication", Namespaced: true, Verbs: listVerbs}}},
		&metav1.APIResourceList{GroupVersion: "security.istio.io/v1beta1", APIResources: []metav1.APIResource{
			{Name: "peerauthentications", Kind: "PeerAuthentication", Namespaced: true, Verbs: listVerbs}}},
	)
	s, err := (&Catalog{Discovery: d}).Snapshot()
	require.NoError(t, err)
	resources, failed := s.NamespacedListable()
	assert.Equal(t, []Listable{
		{GroupVersion: schema.GroupVersion{Version: "v1"}, Resource: "secrets", Kind: "Secret"},
		{GroupVersion: schema.GroupVersion{Group: "security.istio.io", Version: "v1"}, Resource: "peerauthentications", Kind: "PeerAuthentication"},
	}, resources)
	assert.Equal(t, []schema.GroupVersion{metrics}, failed)
}
