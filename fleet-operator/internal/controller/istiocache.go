package controller

import (
	"context"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/pacing"
)

// +kubebuilder:rbac:groups=security.istio.io,resources=authorizationpolicies;peerauthentications,verbs=list;watch
// +kubebuilder:rbac:groups=networking.istio.io,resources=destinationrules,verbs=list;watch

// istioKinds are the kinds of Istio's the operator writes: every reconcile
// where they are served reads the fleet's one object of each.
var istioKinds = []schema.GroupVersionKind{mesh.AuthorizationPolicyKind, mesh.PeerAuthenticationKind}

// readOnlyKinds are the kinds of Istio's the operator only reads, whoever
// wrote them: their caches hold every object of the cluster (the mesh's
// root namespace need not be one the operator watches), and a change wakes
// the fleets it may concern (see readOnlyEvents).
var readOnlyKinds = []schema.GroupVersionKind{mesh.DestinationRuleKind}

// followedKinds: every kind that gets an optional cache.
func followedKinds() []schema.GroupVersionKind {
	return append(append([]schema.GroupVersionKind(nil), istioKinds...), readOnlyKinds...)
}

func isReadOnlyKind(gk schema.GroupKind) bool {
	for _, k := range readOnlyKinds {
		if k.GroupKind() == gk {
			return true
		}
	}
	return false
}

// optionalCaches hold the operator's own objects (labelled managed-by
// fleet-operator) of kinds that may be served or not, and may come and go
// under a running operator: Istio's CRDs can be installed after the
// operator started, or removed. The manager's cache cannot hold them: an
// informer of a kind that is not served never syncs, and a read from it
// waits for the sync (a reconcile, or the manager's start, would hang); and
// the cache of a removed kind keeps the objects it had, which must not be
// trusted. So each kind gets a cache.Cache of its own, started when the
// reconciler finds the kind served (start) and stopped when it finds it
// gone (stop) or the cache's own list finds the resource missing. The
// kinds served when the controller starts are listed before its workers run
// (startingSource). Until a kind's cache has synced, reads go to the API
// server, as they would without a cache.
type optionalCaches struct {
	// newCache builds the cache of one kind; onListGone is called (once)
	// when its list finds the resource gone.
	newCache func(gvk schema.GroupVersionKind, onListGone func(error)) (cache.Cache, error)
	// api answers reads where no synced cache does.
	api client.Reader
	// gone tells the reconciler that a kind's cache found it gone.
	gone func(schema.GroupVersionKind, error)
	// events wakes the fleet whose policy another writer changed or deleted.
	events chan event.GenericEvent
	// readOnlyEvents carries every change of a read-only kind's object
	// (readOnlyKinds), to be mapped to the fleets it may concern.
	readOnlyEvents chan event.GenericEvent

	mu sync.Mutex
	// ctx is the manager's, set by Start; nothing is started before it.
	// started is closed once it is set.
	ctx     context.Context
	started chan struct{}
	byKind  map[schema.GroupKind]*kindCache
}

type kindCache struct {
	c      cache.Cache
	inf    cache.Informer
	cancel context.CancelFunc
}

func newOptionalCaches(mgr ctrl.Manager, cfg Config, gone func(schema.GroupVersionKind, error)) *optionalCaches {
	ours := k8slabels.SelectorFromSet(k8slabels.Set{labels.ManagedBy: names.Operator})
	oc := &optionalCaches{
		api:    mgr.GetAPIReader(),
		gone:   gone,
		events: make(chan event.GenericEvent, 1024),
		// Buffered like events: a cache that starts sends an event per
		// object it lists.
		readOnlyEvents: make(chan event.GenericEvent, 1024),
		started:        make(chan struct{}),
		byKind:         map[schema.GroupKind]*kindCache{},
	}
	oc.newCache = func(gvk schema.GroupVersionKind, onListGone func(error)) (cache.Cache, error) {
		opts := cache.Options{
			HTTPClient: mgr.GetHTTPClient(), Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
			DefaultTransform: cache.TransformStripManagedFields(),
			// Only the API server's "no such resource" means the kind is
			// gone; anything else is retried by the informer as usual.
			DefaultWatchErrorHandler: func(ctx context.Context, r *toolscache.Reflector, err error) {
				if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
					onListGone(err)
				}
				toolscache.DefaultWatchErrorHandler(ctx, r, err)
			},
		}
		if isReadOnlyKind(gvk.GroupKind()) {
			return cache.New(mgr.GetConfig(), opts)
		}
		opts.DefaultLabelSelector = ours
		if len(cfg.WatchNamespaces) > 0 {
			opts.DefaultNamespaces = map[string]cache.Config{}
			for _, ns := range cfg.WatchNamespaces {
				opts.DefaultNamespaces[ns] = cache.Config{}
			}
		}
		return cache.New(mgr.GetConfig(), opts)
	}
	return oc
}

// Start records the manager's context (caches live at most as long) and
// stops every cache when it ends. It implements manager.Runnable.
func (oc *optionalCaches) Start(ctx context.Context) error {
	oc.mu.Lock()
	oc.ctx = ctx
	oc.mu.Unlock()
	close(oc.started)
	<-ctx.Done()
	oc.mu.Lock()
	defer oc.mu.Unlock()
	for gk, kc := range oc.byKind {
		kc.cancel()
		delete(oc.byKind, gk)
	}
	return nil
}

// NeedLeaderElection: reads are needed by whoever reconciles; a standby
// replica starts nothing, since only the controller's source and its
// reconciles call start, and both run on the leader only.
func (oc *optionalCaches) NeedLeaderElection() bool { return false }

// initialSyncWait bounds how long the controller's start waits for the
// caches of Istio's kinds to list (startingSource).
var initialSyncWait = 30 * time.Second

// source wakes a fleet when another writer changes or deletes its policy,
// and starts the caches of the kinds served (the reconciler's answer)
// before the controller's workers.
func (oc *optionalCaches) source(served func(schema.GroupVersionKind) (bool, error)) source.Source {
	return startingSource{
		Source: source.Channel(oc.events, handler.EnqueueRequestsFromMapFunc(controllingFleet)),
		oc:     oc, served: served,
	}
}

// startingSource is the source of the optional caches' events. The
// controller waits for its WaitForSync before it starts its workers, which
// is where the caches of the kinds served at start-up are started and
// listed. Otherwise they would start only when the first reconcile asks,
// and the whole first pass over the fleets (after every restart) would
// read Istio's policies from the API server: at 1,000 fleets that was the
// first thing every worker waited on (issue #20's cold restart).
type startingSource struct {
	source.Source
	oc     *optionalCaches
	served func(schema.GroupVersionKind) (bool, error)
}

// WaitForSync starts the caches of the kinds served and waits until they
// have listed, at most initialSyncWait: a cache that cannot list (its list
// fails, or is slow) must not keep the operator from starting, and until
// it syncs reads go to the API server. It implements source.SyncingSource.
func (s startingSource) WaitForSync(ctx context.Context) error {
	select {
	case <-s.oc.started:
	case <-ctx.Done():
		return nil
	}
	s.oc.follow(s.served)
	ctx, cancel := context.WithTimeout(ctx, initialSyncWait)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return s.oc.synced(), nil
	}); err != nil {
		ctrl.LoggerFrom(ctx).Info("Istio's policies not listed yet; reading them from the API server until they are", "waited", initialSyncWait)
	}
	return nil
}

// synced: every running cache has listed its kind.
func (oc *optionalCaches) synced() bool {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	for _, kc := range oc.byKind {
		if !kc.inf.HasSynced() {
			return false
		}
	}
	return true
}

// follow starts the caches of the kinds served, and stops those of the
// kinds that are not. served is the reconciler's answer.
func (oc *optionalCaches) follow(served func(schema.GroupVersionKind) (bool, error)) {
	if oc == nil {
		return
	}
	for _, gvk := range followedKinds() {
		ok, err := served(gvk)
		switch {
		case err != nil:
			// Discovery failed: keep what runs, start nothing.
		case ok:
			oc.start(gvk)
		default:
			oc.stop(gvk.GroupKind())
		}
	}
}

// start starts the cache of a served kind unless it runs. It never waits
// for the cache to sync.
func (oc *optionalCaches) start(gvk schema.GroupVersionKind) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if oc.ctx == nil || oc.ctx.Err() != nil || oc.byKind[gvk.GroupKind()] != nil {
		return
	}
	ctx, cancel := context.WithCancel(oc.ctx)
	var once sync.Once
	var kc *kindCache
	c, err := oc.newCache(gvk, func(err error) {
		once.Do(func() {
			oc.dropIf(gvk.GroupKind(), kc)
			oc.gone(gvk, err)
		})
	})
	if err != nil {
		cancel()
		return // the next reconcile tries again; reads go to the API server
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		cancel()
		return
	}
	h := oc.handler(ctx)
	if isReadOnlyKind(gvk.GroupKind()) {
		h = oc.readOnlyHandler(ctx)
	}
	if _, err := inf.AddEventHandler(h); err != nil {
		cancel()
		return
	}
	kc = &kindCache{c: c, inf: inf, cancel: cancel}
	oc.byKind[gvk.GroupKind()] = kc
	go func() { _ = c.Start(ctx) }()
}

// stop drops the cache of a kind that is not served (any more).
func (oc *optionalCaches) stop(gk schema.GroupKind) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if kc := oc.byKind[gk]; kc != nil {
		kc.cancel()
		delete(oc.byKind, gk)
	}
}

// dropIf drops the kind's cache if it is still kc (not a newer one).
func (oc *optionalCaches) dropIf(gk schema.GroupKind, kc *kindCache) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	if kc != nil && oc.byKind[gk] == kc {
		kc.cancel()
		delete(oc.byKind, gk)
	}
}

// serves reports the kinds whose reads go through Get (cached or not).
func (oc *optionalCaches) serves(gk schema.GroupKind) bool {
	for _, k := range istioKinds {
		if k.GroupKind() == gk {
			return true
		}
	}
	return false
}

// Get reads from the kind's cache once it has synced, and from the API
// server before that (or when the kind has none).
func (oc *optionalCaches) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gk := obj.GetObjectKind().GroupVersionKind().GroupKind()
	oc.mu.Lock()
	kc := oc.byKind[gk]
	oc.mu.Unlock()
	if kc == nil || !kc.inf.HasSynced() {
		return oc.api.Get(ctx, key, obj, opts...)
	}
	return kc.c.Get(ctx, key, obj, opts...)
}

// List lists a read-only kind (readOnlyKinds) from its cache once it has
// synced, and from the API server before that (or when it has none).
func (oc *optionalCaches) List(ctx context.Context, list *unstructured.UnstructuredList, opts ...client.ListOption) error {
	gvk := list.GroupVersionKind()
	gk := schema.GroupKind{Group: gvk.Group, Kind: strings.TrimSuffix(gvk.Kind, "List")}
	oc.mu.Lock()
	kc := oc.byKind[gk]
	oc.mu.Unlock()
	if kc == nil || !kc.inf.HasSynced() {
		return oc.api.List(ctx, list, opts...)
	}
	return kc.c.List(ctx, list, opts...)
}

// readOnlyHandler passes every add, change and deletion of a read-only
// kind's object on: a DestinationRule that is deleted, changed, or added
// (a more specific one that overrides another) may release a held roll.
// Resyncs are dropped, and so are the adds of a cache's first list: every
// fleet's own pass after a start decides with the rules it lists, and
// mapping each listed rule to the fleets would read every fleet once per
// rule.
func (oc *optionalCaches) readOnlyHandler(ctx context.Context) toolscache.ResourceEventHandler {
	send := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		o, ok := obj.(client.Object)
		if !ok {
			return
		}
		select {
		case oc.readOnlyEvents <- event.GenericEvent{Object: o}:
		case <-ctx.Done():
		}
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initialList bool) {
			if !initialList {
				send(obj)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(client.Object)
			n, ok2 := newObj.(client.Object)
			if ok1 && ok2 && o.GetResourceVersion() == n.GetResourceVersion() {
				return // resync
			}
			send(newObj)
		},
		DeleteFunc: send,
	}
}

// handler turns another writer's change to, or deletion of, a fleet's
// policy into a reconcile of that fleet, so a policy someone deleted or
// edited is restored at once instead of at the fleet's next periodic look
// (minutes at rest). Adds are skipped: the operator made the object, or a
// cache just started and listed it. Updates that change the applied-hash
// annotation are the operator's own applies.
func (oc *optionalCaches) handler(ctx context.Context) toolscache.ResourceEventHandler {
	send := func(o client.Object) {
		select {
		case oc.events <- event.GenericEvent{Object: o}:
		case <-ctx.Done():
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(client.Object)
			n, ok2 := newObj.(client.Object)
			if !ok1 || !ok2 || o.GetResourceVersion() == n.GetResourceVersion() {
				return // resync, or not an object
			}
			if o.GetAnnotations()[HashAnnotation] != n.GetAnnotations()[HashAnnotation] {
				pacing.Dropped(controllerName, "istio-own-applies").Inc()
				return
			}
			// Status written by Istio's control plane changes no generation
			// and none of what the operator applies.
			if onlyStatusChanged(o, n) {
				pacing.Dropped(controllerName, "istio-status-only").Inc()
				return
			}
			send(n)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(client.Object); ok {
				send(o)
			}
		},
	}
}

// controllingFleet maps an object to the fleet that controls it, in its
// namespace: only a controller reference to a CelldFleet counts.
func controllingFleet(_ context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOfNoCopy(o)
	if ref == nil || ref.Kind != "CelldFleet" {
		return nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != v1alpha1.GroupVersion.Group {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
}

// routedReader is the Applier's cache: Istio's kinds from the optional
// caches, every other kind from the manager's.
type routedReader struct {
	client.Reader
	optional *optionalCaches
}

func (r routedReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if r.optional.serves(obj.GetObjectKind().GroupVersionKind().GroupKind()) {
		return r.optional.Get(ctx, key, obj, opts...)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}
