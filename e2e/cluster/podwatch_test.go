package cluster

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func TestPodIPTrackerReportsLifecycle(t *testing.T) {
	var events []string
	tr := &podIPTracker{current: map[types.UID]PodIP{}, handler: PodIPHandler{
		Assigned: func(ip PodIP) { events = append(events, "+"+ip.Name+"="+ip.IP) },
		Released: func(ip PodIP) { events = append(events, "-"+ip.Name+"="+ip.IP) },
	}}
	pod := func(phase corev1.PodPhase, ip string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "m-0", Namespace: "ns", UID: "u1"},
			Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}

	tr.observe(pod(corev1.PodPending, "", false))
	tr.observe(pod(corev1.PodRunning, "127.1.0.1", false))
	tr.observe(pod(corev1.PodRunning, "127.1.0.1", false)) // no change, no event
	tr.observe(pod(corev1.PodRunning, "127.1.0.2", false))
	tr.observe(pod(corev1.PodRunning, "127.1.0.2", true))
	tr.observe(pod(corev1.PodRunning, "127.1.0.3", false))
	tr.forget(cache.DeletedFinalStateUnknown{Obj: pod(corev1.PodRunning, "127.1.0.3", false)})
	tr.forget(pod(corev1.PodRunning, "127.1.0.3", false)) // already gone

	require.Equal(t, []string{
		"+m-0=127.1.0.1",
		"-m-0=127.1.0.1", "+m-0=127.1.0.2",
		"-m-0=127.1.0.2",
		"+m-0=127.1.0.3",
		"-m-0=127.1.0.3",
	}, events)
}
