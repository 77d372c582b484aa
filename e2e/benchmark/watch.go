package benchmark

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	pkglabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// observer follows objects through watches, so that waiting for a state
// while a phase is timed costs the API server nothing: the waits used to
// list every CelldFleet every 250 ms, or the floor's Pods namespace by
// namespace, on the two cores the operator and the API server share
// (docs/benchmark.md, issue #20's sixth round).
type observer struct {
	cache   cache.Cache
	stop    context.CancelFunc
	changed chan struct{}
}

// observe starts watches of objs (all namespaces; Pods only the celld
// members) and returns once their lists are in, so it belongs before a
// clock starts.
func observe(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, objs ...client.Object) (*observer, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme,
		ByObject:         map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: pkglabels.SelectorFromSet(pkglabels.Set{labels.Name: "celld"})}},
		DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	o := &observer{cache: c, stop: stop, changed: make(chan struct{}, 1)}
	note := func() {
		select {
		case o.changed <- struct{}{}:
		default:
		}
	}
	for _, obj := range objs {
		inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			stop()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { note() }, UpdateFunc: func(_, _ any) { note() }, DeleteFunc: func(any) { note() },
		}); err != nil {
			stop()
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		stop()
		return nil, fmt.Errorf("the bench's watches did not sync")
	}
	return o, nil
}

// wait calls done after every change it sees, at most every 50 ms and at
// least every 250 ms (done may depend on more than the watched objects,
// such as a member's /state), until done says so, fails, or the deadline
// passes.
func (o *observer) wait(ctx context.Context, deadline time.Time, done func() (bool, error)) error {
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errDeadline
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-o.changed:
		case <-time.After(250 * time.Millisecond):
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var errDeadline = fmt.Errorf("deadline passed")

// fleets are the CelldFleets as last seen (not copies: read only).
func (o *observer) fleets(ctx context.Context) ([]fleetv1.CelldFleet, error) {
	list := &fleetv1.CelldFleetList{}
	err := o.cache.List(ctx, list, client.UnsafeDisableDeepCopy)
	return list.Items, err
}

// pods are the celld member Pods as last seen (not copies: read only).
func (o *observer) pods(ctx context.Context) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	err := o.cache.List(ctx, list, client.UnsafeDisableDeepCopy)
	return list.Items, err
}
