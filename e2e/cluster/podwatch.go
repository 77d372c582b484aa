package cluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// PodIP is a running Pod's address, the unit a loopback stand-in for a Pod's
// runtime binds to in the local tier.
type PodIP struct {
	Namespace string
	Name      string
	UID       types.UID
	Node      string
	IP        string
	Labels    map[string]string
}

// PodIPHandler receives Pod IP lifecycle events. Assigned fires when a Pod is
// Running with an IP; Released fires when that Pod is deleted, stops running
// or its IP changes (Released for the old IP comes before Assigned for the
// new). Calls are serial, so handlers need no locking of their own state.
type PodIPHandler struct {
	Assigned func(PodIP)
	Released func(PodIP)
}

// WatchPodIPs calls h for Pods in namespace ("" for all) that match selector
// (nil for all) until ctx ends. It returns once the initial list is synced, so
// Pods that already run have been reported when it returns.
func WatchPodIPs(ctx context.Context, cfg *rest.Config, namespace string, selector labels.Selector, h PodIPHandler) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if selector == nil {
		selector = labels.Everything()
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }))
	informer := factory.Core().V1().Pods().Informer()

	// client-go calls one registration's handlers sequentially and in order,
	// so the tracker needs no lock, and the registration reports synced only
	// once the initial list has been handed to them.
	t := &podIPTracker{handler: h, current: map[types.UID]PodIP{}}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.observe,
		UpdateFunc: func(_, obj any) { t.observe(obj) },
		DeleteFunc: t.forget,
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("pod watch did not sync: %w", ctx.Err())
	}
	return nil
}

type podIPTracker struct {
	handler PodIPHandler
	current map[types.UID]PodIP
}

func (t *podIPTracker) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	old, had := t.current[pod.UID]
	want, has := runningIP(pod)
	if had && (!has || old.IP != want.IP) {
		delete(t.current, pod.UID)
		t.call(t.handler.Released, old)
	}
	if has && (!had || old.IP != want.IP) {
		t.current[pod.UID] = want
		t.call(t.handler.Assigned, want)
	}
}

func (t *podIPTracker) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if old, had := t.current[pod.UID]; had {
		delete(t.current, pod.UID)
		t.call(t.handler.Released, old)
	}
}

func (t *podIPTracker) call(f func(PodIP), ip PodIP) {
	if f != nil {
		f(ip)
	}
}

// runningIP reports the Pod's IP while it is Running and not terminating.
func runningIP(pod *corev1.Pod) (PodIP, bool) {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
		return PodIP{}, false
	}
	return PodIP{
		Namespace: pod.Namespace,
		Name:      pod.Name,
		UID:       pod.UID,
		Node:      pod.Spec.NodeName,
		IP:        pod.Status.PodIP,
		Labels:    pod.Labels,
	}, true
}
