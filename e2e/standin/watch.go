package standin

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Run keeps a stand-in serving for every running celld member Pod in the
// cluster until ctx ends. It polls (the test bed is small and local) so that
// it needs no informer machinery; errors are passed to report.
func Run(ctx context.Context, cfg *rest.Config, pool *Pool, every time.Duration, report func(error)) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	defer pool.StopAll()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: labels.Name + "=celld"})
		if err == nil {
			for _, e := range pool.Sync(ctx, running(list.Items)) {
				report(e)
			}
		} else if ctx.Err() == nil {
			report(err)
		}
		select {
		case <-ctx.Done():
			return nil
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
