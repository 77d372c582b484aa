//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestSpecChangeJumpsThePeriodicLooks: with every worker busy re-reading
// fleets at rest (the periodic /state reads), a spec change of one fleet
// must not wait behind all of them. One worker, eight fleets whose /state
// answers after 400 ms and whose next look is always due: the queue always
// holds seven fleets at rest. An image change must reach the StatefulSet
// within about one reconcile (the one in flight, then its own), not after
// the seven waiting ones (~2.8 s).
func TestSpecChangeJumpsThePeriodicLooks(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "busy")
	cfg := newHarness(t, env, true).r.Config
	cfg.Workers = 1
	cfg.StateTimeout = 2 * time.Second
	cfg.StateInterval = 50 * time.Millisecond // always due: a standing backlog

	var reads atomic.Int32
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(400 * time.Millisecond)
		reads.Add(1)
		_ = json.NewEncoder(w).Encode(state.Report{Healthy: true, Phase: "Running", Version: "1.0.0"})
	})
	const fleets = 8
	// 127.252/16: apart from the concurrency test's 127.251/16.
	oneMemberFleets(t, env.Client, "busy", fleets, 252, slow)
	startOperator(t, env, env.Config, cfg)

	healthy := func(name string) bool {
		f := &v1alpha1.CelldFleet{}
		if env.Client.Get(ctx, types.NamespacedName{Namespace: "busy", Name: name}, f) != nil || len(f.Status.Members) != 1 {
			return false
		}
		return f.Status.Members[0].State != nil && f.Status.Members[0].State.Healthy
	}
	require.Eventually(t, func() bool {
		for i := 0; i < fleets; i++ {
			if !healthy("f" + strconv.Itoa(i)) {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "every fleet read and reported")
	// Play the StatefulSet controller: until it has seen a fleet's template,
	// the fleet polls every second at normal priority.
	for i := 0; i < fleets; i++ {
		name := "f" + strconv.Itoa(i)
		require.Eventually(t, func() bool { return playStatefulSetErr(env.Client, "busy", name, "rev1") == nil }, 10*time.Second, 50*time.Millisecond)
	}
	// At rest: each fleet answers the played status once (a round of eight
	// 400 ms reconciles), then only the periodic looks are queued.
	time.Sleep(8 * time.Second)

	var took []time.Duration
	for try := 0; try < 3; try++ {
		name := "f" + strconv.Itoa(try)
		image := fmt.Sprintf("registry.example/celld:2.0.%d", try)
		start := time.Now()
		t.Logf("%s patch %s", start.UTC().Format("15:04:05.000"), name)
		require.NoError(t, env.Client.Patch(ctx, &v1alpha1.CelldFleet{ObjectMeta: fleet("busy", name).ObjectMeta},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":"`+image+`"}}`))))
		require.Eventually(t, func() bool {
			sts := &appsv1.StatefulSet{}
			return env.Client.Get(ctx, types.NamespacedName{Namespace: "busy", Name: name}, sts) == nil &&
				sts.Spec.Template.Spec.Containers[0].Image == image
		}, 30*time.Second, 10*time.Millisecond)
		took = append(took, time.Since(start))
		// Play the StatefulSet controller: the template is the update
		// revision, and the member is of it, so the fleet is at rest again
		// (a fleet whose StatefulSet has not seen its template polls every
		// second at normal priority, ahead of the next try).
		require.Eventually(t, func() bool { return playStatefulSetErr(env.Client, "busy", name, "rev1") == nil }, 10*time.Second, 50*time.Millisecond)
		time.Sleep(3 * time.Second) // the backlog builds up again
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("image change to StatefulSet template: %v (%d /state reads in all)", took, reads.Load())
	assert.Less(t, took[len(took)-1], 1500*time.Millisecond,
		"a spec change is handled before the fleets at rest whose periodic look is due (one reconcile takes ≥ 400 ms; seven wait)")
}

// TestStatusWritesWakeNoReconcile: a fleet is reconciled when something the
// operator reads changes, not when only its status does (the operator writes
// that status itself, and each write used to come back as a reconcile that
// found nothing to do), nor when only its StatefulSet's counters do. Seen through /state: with the periodic look an hour
// away, every reconcile of this one-member fleet reads its /state once.
func TestStatusWritesWakeNoReconcile(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "echo")
	cfg := newHarness(t, env, true).r.Config
	cfg.StateInterval = time.Hour

	var reads atomic.Int32
	serve := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reads.Add(1)
		_ = json.NewEncoder(w).Encode(state.Report{Healthy: true, Phase: "Running", Version: "1.0.0"})
	})
	// 127.253/16: apart from the other tests' 127.251/16 and 127.252/16.
	oneMemberFleets(t, env.Client, "echo", 1, 253, serve)
	startOperator(t, env, env.Config, cfg)
	key := types.NamespacedName{Namespace: "echo", Name: "f0"}
	require.Eventually(t, func() bool { return playStatefulSetErr(env.Client, "echo", "f0", "rev1") == nil }, 10*time.Second, 50*time.Millisecond)
	f := &v1alpha1.CelldFleet{}
	require.Eventually(t, func() bool { return env.Client.Get(ctx, key, f) == nil && f.Status.Phase == PhaseReady }, 30*time.Second, 50*time.Millisecond)
	quiet := func() int32 { // reads once no reconcile has run for two seconds
		for last := reads.Load(); ; {
			time.Sleep(2 * time.Second)
			if n := reads.Load(); n == last {
				return n
			}
			last = reads.Load()
		}
	}
	before := quiet()

	require.NoError(t, env.Client.Get(ctx, key, f))
	f.Status.Phase = "Restored-From-Backup"
	require.NoError(t, env.Client.Status().Update(ctx, f), "someone else writes the status only")
	assert.Equal(t, before, quiet(), "a status write wakes no reconcile")

	sts := &appsv1.StatefulSet{}
	require.NoError(t, env.Client.Get(ctx, key, sts))
	sts.Status.ReadyReplicas, sts.Status.AvailableReplicas = 1, 1
	require.NoError(t, env.Client.Status().Update(ctx, sts), "playing the StatefulSet controller: its member turned ready")
	assert.Equal(t, before, quiet(), "the StatefulSet's counters wake no reconcile: the member's Pod event does")

	pod := &corev1.Pod{}
	require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Namespace: "echo", Name: "f0-0"}, pod))
	pod.Status.HostIP = "127.0.0.1"
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	require.NoError(t, env.Client.Status().Update(ctx, pod), "playing the scheduler and the kubelet: fields the operator does not read")
	assert.Equal(t, before, quiet(), "a member Pod change the fleet does not read wakes no reconcile")

	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"poke":"1"}}}`))))
	require.Eventually(t, func() bool { return env.Client.Get(ctx, key, f) == nil && f.Status.Phase == PhaseReady }, 10*time.Second, 50*time.Millisecond,
		"an annotation wakes a reconcile, which rewrites the status from what it observes")
	assert.Greater(t, reads.Load(), before)
}
