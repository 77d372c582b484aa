package pacing

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Defaults of a Gate.
const (
	// DefaultRetry: how soon a deferred reconcile runs again. An informer
	// delivers a write the API server has answered within milliseconds on
	// an idle API server and within tens of them on a busy one.
	DefaultRetry = 100 * time.Millisecond
	// DefaultMaxWait: past it, a reconcile runs on whatever the cache
	// shows (the object may have been deleted by someone else since, and a
	// cache that far behind is better read past than waited for).
	DefaultMaxWait = 10 * time.Second
	// DefaultMissingWait: past it, an object the cache does not hold at
	// all is no longer waited for. An informer delivers a create within
	// milliseconds (the fleet operator's awaitCached waited at most this
	// long for a StatefulSet it had created); one still missing was
	// deleted since, by someone else, and the reconcile must see that to
	// repair it.
	DefaultMissingWait = time.Second
)

// Gate is a controller's read-your-writes gate. Every write of its own
// (a status patch, a finalizer, a child it created) is recorded with the
// resourceVersion the API server answered (Wrote); the next reconcile of
// the same owner asks Defer, which puts it off by Retry while the cache
// shows any of those objects older than written. A reconcile on such a
// cache would decide from the world before its own write: send the same
// status again, or miss the child it created and read it from the API
// server. Cluster API's DeferNextReconcileUntilCacheUpToDate does the
// same; it neither blocks a worker nor guesses how long the cache needs.
type Gate struct {
	// Controller names the metric series.
	Controller string
	// Now is the clock (tests replace it); nil is time.Now.
	Now func() time.Time
	// Retry, MaxWait and MissingWait: zero is DefaultRetry,
	// DefaultMaxWait, DefaultMissingWait.
	Retry, MaxWait, MissingWait time.Duration

	mu      sync.Mutex
	pending map[types.NamespacedName][]expectation
}

// expectation is one own write the cache has yet to show.
type expectation struct {
	obj client.Object // a copy as written; read into a copy of it
	rv  string
	at  time.Time
}

func (g *Gate) now() time.Time {
	if g.Now == nil {
		return time.Now()
	}
	return g.Now()
}

// Wrote records that owner's reconcile wrote obj, which holds the
// resourceVersion the API server answered. A later write of the same
// object replaces the earlier one; an older version (a copy taken before
// a write recorded already) never does.
func (g *Gate) Wrote(owner types.NamespacedName, obj client.Object) {
	if obj == nil || obj.GetResourceVersion() == "" {
		return
	}
	e := expectation{obj: obj.DeepCopyObject().(client.Object), rv: obj.GetResourceVersion(), at: g.now()}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending == nil {
		g.pending = map[types.NamespacedName][]expectation{}
	}
	list := g.pending[owner]
	for i := range list {
		if sameObject(list[i].obj, obj) {
			if !Older(e.rv, list[i].rv) {
				list[i] = e
			}
			return
		}
	}
	g.pending[owner] = append(list, e)
}

// Forget drops what is recorded for owner (it is gone).
func (g *Gate) Forget(owner types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.pending, owner)
}

// Defer reports whether owner's reconcile should be put off, and the
// result to return then. The objects in have were read by this reconcile
// already (the owner itself, typically) and are not read again; the rest
// are read from cache. An expectation the cache met, or one older than
// MaxWait, is dropped. A read that fails other than with NotFound does not
// defer: the reconcile finds the failure itself. An object the cache does
// not hold at all is waited for at most MissingWait: a child someone else
// deleted right after this controller created it must not hold its owner
// for MaxWait.
func (g *Gate) Defer(ctx context.Context, cache client.Reader, owner types.NamespacedName, have ...client.Object) (ctrl.Result, bool) {
	g.mu.Lock()
	list := append([]expectation(nil), g.pending[owner]...)
	g.mu.Unlock()
	if len(list) == 0 {
		return ctrl.Result{}, false
	}
	now, maxWait, missingWait := g.now(), g.MaxWait, g.MissingWait
	if maxWait == 0 {
		maxWait = DefaultMaxWait
	}
	if missingWait == 0 {
		missingWait = DefaultMissingWait
	}
	var behind []expectation
	for _, e := range list {
		if now.Sub(e.at) >= maxWait {
			continue
		}
		seen, ok := seenVersion(ctx, cache, e.obj, have)
		if ok && !Older(seen, e.rv) {
			continue
		}
		if !ok && now.Sub(e.at) >= missingWait {
			continue // deleted since: the reconcile is to see it missing
		}
		behind = append(behind, e)
	}
	g.mu.Lock()
	// Keep what was recorded meanwhile; drop what was met.
	var keep []expectation
	for _, e := range g.pending[owner] {
		if !containsExpectation(list, e) || containsExpectation(behind, e) {
			keep = append(keep, e)
		}
	}
	if len(keep) == 0 {
		delete(g.pending, owner)
	} else {
		g.pending[owner] = keep
	}
	g.mu.Unlock()
	if len(behind) == 0 {
		return ctrl.Result{}, false
	}
	deferredMetric.WithLabelValues(g.Controller).Inc()
	retry := g.Retry
	if retry == 0 {
		retry = DefaultRetry
	}
	return ctrl.Result{RequeueAfter: retry}, true
}

// seenVersion is the resourceVersion of obj as have or the cache show it;
// ok false when the cache does not hold it (yet) or cannot be read.
func seenVersion(ctx context.Context, cache client.Reader, obj client.Object, have []client.Object) (string, bool) {
	for _, h := range have {
		if h != nil && sameObject(h, obj) {
			return h.GetResourceVersion(), true
		}
	}
	into := obj.DeepCopyObject().(client.Object)
	err := cache.Get(ctx, client.ObjectKeyFromObject(obj), into)
	switch {
	case err == nil:
		return into.GetResourceVersion(), true
	case apierrors.IsNotFound(err):
		return "", false
	default:
		return "", true // not the gate's to judge; seen as caught up
	}
}

// Older reports whether resourceVersion seen precedes written. The API
// server's resourceVersions are etcd revisions (decimal integers, growing);
// one that is not a number is taken as caught up: the gate never holds a
// reconcile on what it cannot compare.
func Older(seen, written string) bool {
	if seen == "" {
		return true
	}
	s, err1 := strconv.ParseUint(seen, 10, 64)
	w, err2 := strconv.ParseUint(written, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return s < w
}

func sameObject(a, b client.Object) bool {
	return a.GetNamespace() == b.GetNamespace() && a.GetName() == b.GetName() &&
		typeName(a) == typeName(b)
}

// typeName tells kinds apart: a typed object by its Go type (its GVK is
// not always set on what a client returns), an unstructured one by its
// group and kind.
func typeName(o client.Object) string {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return u.GroupVersionKind().GroupKind().String()
	}
	return fmt.Sprintf("%T", o)
}

func containsExpectation(list []expectation, e expectation) bool {
	for _, x := range list {
		if x.rv == e.rv && x.at.Equal(e.at) && sameObject(x.obj, e.obj) {
			return true
		}
	}
	return false
}
