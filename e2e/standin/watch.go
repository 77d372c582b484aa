package standin

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Run keeps a stand-in serving for every running celld member Pod in the
// cluster until ctx ends. It follows a Pod watch, so a stand-in stops as soon
// as its Pod is deleted, before kwok can give the IP to a replacement: a real
// runtime's process is gone with its Pod, and a stale stand-in answering for
// the new Pod would fool the operator's health gate. Errors go to report.
func Run(ctx context.Context, cfg *rest.Config, pool *Pool, report func(error)) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	defer pool.StopAll()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Name + "=celld"
	}))
	informer := factory.Core().V1().Pods().Informer()
	// The handlers note which Pods changed; the loop below looks at those
	// alone. Rebuilding every member from the whole store on each change
	// kept the bench process at about half a core (that loop and the
	// garbage it made) at 6,000 Pods, on the two cores the operator and the
	// control plane share (docs/benchmark.md, eleventh round).
	var mu sync.Mutex
	changedKeys := map[string]struct{}{}
	changed := make(chan struct{}, 1)
	note := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		mu.Lock()
		changedKeys[key] = struct{}{}
		mu.Unlock()
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    note,
		UpdateFunc: func(_, n any) { note(n) },
		DeleteFunc: note,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("stand-in: Pod cache did not sync")
	}
	// served is the UID whose stand-in this loop asked for, by Pod key: a
	// Pod deleted and recreated under its name between two passes shows
	// as one change with a new UID.
	served := map[string]string{}
	// A periodic pass retries stand-ins whose port was still taken.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		mu.Lock()
		keys := changedKeys
		changedKeys = map[string]struct{}{}
		mu.Unlock()
		var gone []string
		var pods []PodInfo
		for key := range keys {
			obj, exists, err := informer.GetStore().GetByKey(key)
			var pod *corev1.Pod
			if err == nil && exists {
				pod, _ = obj.(*corev1.Pod)
			}
			info, ok := runningPod(pod)
			if uid, had := served[key]; had && (!ok || uid != info.UID) {
				gone = append(gone, uid)
				delete(served, key)
			}
			if ok {
				pods = append(pods, info)
				served[key] = info.UID
			}
		}
		for _, e := range pool.Update(ctx, gone, pods) {
			report(e)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

// runningPod is what the pool needs of pod, if it is a running member Pod
// with an IP and not on its way out.
func runningPod(p *corev1.Pod) (PodInfo, bool) {
	if p == nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
		return PodInfo{}, false
	}
	image := ""
	for _, c := range p.Spec.Containers {
		if c.Name == "celld" {
			image = c.Image
		}
	}
	return PodInfo{
		UID: string(p.UID), Name: p.Name, IP: p.Status.PodIP, Image: image,
		Unhealthy: p.Annotations[labels.StandinUnhealthy] == "true",
	}, true
}
