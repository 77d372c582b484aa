package standin

import (
	"context"
	"fmt"
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
	changed := make(chan struct{}, 1)
	notify := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
		DeleteFunc: notify,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("stand-in: Pod cache did not sync")
	}
	// A periodic pass retries stand-ins whose port was still taken.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var pods []corev1.Pod
		for _, o := range informer.GetStore().List() {
			pods = append(pods, *o.(*corev1.Pod))
		}
		for _, e := range pool.Sync(ctx, running(pods)) {
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

func running(pods []corev1.Pod) []PodInfo {
	var out []PodInfo
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		image := ""
		for _, c := range p.Spec.Containers {
			if c.Name == "celld" {
				image = c.Image
			}
		}
		out = append(out, PodInfo{
			UID: string(p.UID), Name: p.Name, IP: p.Status.PodIP, Image: image,
			Unhealthy: p.Annotations[labels.StandinUnhealthy] == "true",
		})
	}
	return out
}
