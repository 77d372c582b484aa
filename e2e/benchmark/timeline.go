package benchmark

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// progress is how far the objects of one namespace prefix got.
type progress struct{ sts, observed, claims, bound, pods, scheduled, ready int }

func (p progress) String() string {
	return fmt.Sprintf("StatefulSets observed %d/%d, claims bound %d/%d, Pods scheduled %d, Ready %d of %d",
		p.observed, p.sts, p.bound, p.claims, p.scheduled, p.ready, p.pods)
}

// timeline logs every 10 s until ctx ends how far the StatefulSets, claims
// and member Pods of each namespace prefix (bench, floor, pfloor, qfloor) got: the
// thirteenth round found the convergence waiting on claims being bound
// with it, where no count of the operator's showed it.
func (b *bench) timeline(ctx context.Context) {
	o, err := observe(ctx, b.cfg, b.scheme, &corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &appsv1.StatefulSet{})
	if err != nil {
		logf("timeline: %v", err)
		return
	}
	defer o.stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		by := map[string]*progress{}
		of := func(ns string) *progress {
			prefix, _, _ := strings.Cut(ns, "-")
			if by[prefix] == nil {
				by[prefix] = &progress{}
			}
			return by[prefix]
		}
		var sets appsv1.StatefulSetList
		var claims corev1.PersistentVolumeClaimList
		if o.cache.List(ctx, &sets, client.UnsafeDisableDeepCopy) != nil || o.cache.List(ctx, &claims, client.UnsafeDisableDeepCopy) != nil {
			continue
		}
		pods, err := o.pods(ctx)
		if err != nil {
			continue
		}
		for _, s := range sets.Items {
			p := of(s.Namespace)
			p.sts++
			if s.Status.ObservedGeneration > 0 {
				p.observed++
			}
		}
		for _, c := range claims.Items {
			p := of(c.Namespace)
			p.claims++
			if c.Status.Phase == corev1.ClaimBound {
				p.bound++
			}
		}
		for i := range pods {
			p := of(pods[i].Namespace)
			p.pods++
			if pods[i].Spec.NodeName != "" {
				p.scheduled++
			}
			if podReady(&pods[i]) {
				p.ready++
			}
		}
		var lines []string
		for prefix, p := range by {
			lines = append(lines, prefix+": "+p.String())
		}
		slices.Sort(lines)
		logf("N=%d: timeline: %s", b.n, strings.Join(lines, "; "))
	}
}
