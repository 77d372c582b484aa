//go:build integration

package served

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/testenv"
)

var (
	widget   = schema.GroupVersionKind{Group: "served.example.com", Version: "v1", Kind: "Widget"}
	crdGVK   = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	widgetID = types.NamespacedName{Namespace: "default", Name: "w"}
)

func widgetCRD() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "widgets.served.example.com"},
		"spec": map[string]any{
			"group": widget.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": widget.Kind, "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	u.SetGroupVersionKind(crdGVK)
	return u
}

func widgetObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"k": "v"}}}
	u.SetGroupVersionKind(widget)
	u.SetNamespace(widgetID.Namespace)
	u.SetName(widgetID.Name)
	return u
}

// countingConfig counts the requests made through it.
func countingConfig(cfg *rest.Config, n *atomic.Int64) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			n.Add(1)
			return rt.RoundTrip(r)
		})
	}
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestCatalogAgainstAnAPIServer: a CRD created under a running operator is
// reported served within MaxAge of discovery listing it; once deleted, a
// write of its kind is answered with a 404 that Gone recognises (and that
// a missing namespace or object is not), after which the kind is not
// served at once, however long its snapshot still had to live; re-created,
// it is served again within MaxAge of the mark's end.
func TestCatalogAgainstAnAPIServer(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, clientgoscheme.Scheme)
	var requests atomic.Int64
	dc, err := discovery.NewDiscoveryClientForConfig(countingConfig(env.Config, &requests))
	require.NoError(t, err)
	direct := discovery.NewDiscoveryClientForConfigOrDie(env.Config)
	listed := func() bool {
		l, err := direct.ServerResourcesForGroupVersion(widget.GroupVersion().String())
		if err != nil {
			return false
		}
		for _, r := range l.APIResources {
			if r.Kind == widget.Kind {
				return true
			}
		}
		return false
	}

	const maxAge = 2 * time.Second
	bounded := &Catalog{Discovery: dc, MaxAge: maxAge}
	stale := &Catalog{Discovery: dc, MaxAge: time.Hour} // never refreshes by age in this test
	fresh := &Catalog{Discovery: dc, MaxAge: Fresh}
	for _, c := range []*Catalog{bounded, stale, fresh} {
		ok, err := c.Kind(widget)
		require.NoError(t, err)
		require.False(t, ok)
	}
	before := requests.Load()
	_, err = fresh.Snapshot()
	require.NoError(t, err)
	perRun := requests.Load() - before
	t.Logf("one discovery run: %d requests", perRun)
	assert.LessOrEqual(t, perRun, int64(3), "aggregated discovery: /api and /apis")

	// Created: served within the bound.
	require.NoError(t, env.Client.Create(ctx, widgetCRD()))
	snap, err := bounded.Snapshot()
	require.NoError(t, err)
	require.Eventually(t, listed, 30*time.Second, 50*time.Millisecond, "discovery lists the new kind")
	discovered := time.Now()
	var servedAt time.Time
	require.Eventually(t, func() bool {
		ok, err := bounded.Kind(widget)
		require.NoError(t, err)
		servedAt = time.Now()
		return ok
	}, 30*time.Second, 20*time.Millisecond)
	assertBound(t, snap, discovered, maxAge, servedAt)
	ok, err := fresh.Kind(widget)
	require.NoError(t, err)
	assert.True(t, ok, "a fresh catalog sees it at once")
	ok, err = stale.Kind(widget)
	require.NoError(t, err)
	assert.False(t, ok, "a snapshot is not refreshed before MaxAge")
	stale = &Catalog{Discovery: dc, MaxAge: time.Hour} // one that has seen the kind
	ok, err = stale.Kind(widget)
	require.NoError(t, err)
	require.True(t, ok)

	// The kind in use; the operator's client (a lazy REST mapper) learns it.
	c, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, widgetObject()))
	// 404s that are not about the kind.
	elsewhere := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "nowhere", Name: "x"}}
	err = c.Create(ctx, elsewhere)
	require.True(t, apierrors.IsNotFound(err), "%v", err)
	assert.False(t, KindMissing(err), "a missing namespace: %v", err)
	missing := widgetObject()
	missing.SetName("missing")
	err = c.Patch(ctx, missing, client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"w"}}`)))
	require.True(t, apierrors.IsNotFound(err), "%v", err)
	assert.False(t, KindMissing(err), "a missing object: %v", err)
	assert.False(t, bounded.Gone(widget, err))

	// Deleted: the REST mapper still maps the kind, the write reaches the
	// API server and is answered 404.
	require.NoError(t, env.Client.Delete(ctx, widgetCRD()))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: "widgets.served.example.com"}, widgetCRD()))
	}, 30*time.Second, 50*time.Millisecond, "CRD deleted")
	require.Eventually(t, func() bool { return !listed() }, 30*time.Second, 50*time.Millisecond, "discovery no longer lists the kind")
	ok, err = stale.Kind(widget)
	require.NoError(t, err)
	require.True(t, ok, "the old snapshot still says served")
	err = c.Create(ctx, widgetObject())
	require.Error(t, err)
	assert.True(t, KindMissing(err), "a write of a removed kind: %v", err)
	// The mark is set by Gone: taken before it, marked bounds it from below.
	marked := time.Now()
	for _, cat := range []*Catalog{stale, bounded} {
		require.True(t, cat.Gone(widget, err))
		ok, err := cat.Kind(widget)
		require.NoError(t, err)
		assert.False(t, ok, "gone at once after the write's 404")
	}
	ok, err = fresh.Kind(widget)
	require.NoError(t, err)
	assert.False(t, ok)

	// Re-created: served again once the mark has run its MaxAge.
	require.NoError(t, env.Client.Create(ctx, widgetCRD()))
	require.Eventually(t, listed, 30*time.Second, 50*time.Millisecond, "discovery lists the kind again")
	discovered = time.Now()
	require.Eventually(t, func() bool {
		ok, err := bounded.Kind(widget)
		require.NoError(t, err)
		servedAt = time.Now()
		return ok
	}, 30*time.Second, 20*time.Millisecond)
	assert.False(t, servedAt.Before(marked.Add(maxAge)), "not served before the mark's MaxAge is over (served %v after it)", servedAt.Sub(marked))
	latest := marked.Add(maxAge)
	if discovered.After(latest) {
		latest = discovered
	}
	assert.False(t, servedAt.After(latest.Add(500*time.Millisecond)), "served again within MaxAge of the mark (%v after it; discovery listed it %v after it)",
		servedAt.Sub(marked), discovered.Sub(marked))
	require.NoError(t, c.Create(ctx, widgetObject()), "writes work again")
}

// assertBound: a kind discovery started listing at discovered is reported
// served when snap (taken before, without it) is MaxAge old, or at once if
// it was already, and not before.
func assertBound(t *testing.T, snap *Snapshot, discovered time.Time, maxAge time.Duration, servedAt time.Time) {
	t.Helper()
	if ok, _ := snap.Kind(widget); ok {
		return // the run already saw it
	}
	expired := snap.Taken.Add(maxAge)
	assert.False(t, servedAt.Before(expired), "served %v before the snapshot was MaxAge old", expired.Sub(servedAt))
	latest := expired
	if discovered.After(latest) {
		latest = discovered
	}
	assert.False(t, servedAt.After(latest.Add(300*time.Millisecond)), "served %v after the bound (snapshot taken %v before discovery listed the kind)",
		servedAt.Sub(latest), discovered.Sub(snap.Taken))
}
