package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/roll"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
)

func TestNextLook(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &FleetReconciler{Config: Config{StateInterval: 30 * time.Second}, Now: func() time.Time { return now }}
	readySince := func(d time.Duration) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "f-0"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-d))}}}}
	}
	readyPod := readySince(time.Hour)
	healthy := map[string]state.Result{"f-0": {Report: &state.Report{Healthy: true}}}
	steady := func() *observed { return &observed{pods: []corev1.Pod{readyPod}, reports: healthy} }

	assert.Equal(t, 30*time.Second, r.nextLook(steady()), "steady: the /state interval")

	rolling := steady()
	rolling.decision = roll.Decision{Outdated: 1}
	assert.Equal(t, rollPoll, r.nextLook(rolling), "members move without events")

	settling := steady()
	settling.stsSettling = true
	assert.Equal(t, 30*time.Second, r.nextLook(settling), "the StatefulSet controller's status update wakes the fleet; it is not polled")

	notReady := steady()
	notReady.reports = map[string]state.Result{"f-0": {Err: errors.New("connection refused")}}
	assert.Equal(t, notReadyPoll, r.nextLook(notReady), "a running member's /state changes without an event")

	// A member that does not run yet changes through Pod events; there is
	// nothing to read until then. The fleet still looks now and then: an
	// API being installed sends no event.
	pending := func() *observed {
		return &observed{pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "f-0"}, Status: corev1.PodStatus{Phase: corev1.PodPending}}}, reports: map[string]state.Result{}}
	}
	assert.Equal(t, idleLooks*30*time.Second, r.nextLook(pending()), "a member being scheduled is not polled")
	missing := &observed{reports: map[string]state.Result{}}
	assert.Equal(t, idleLooks*30*time.Second, r.nextLook(missing), "a member the StatefulSet controller has yet to create is not polled")
	// The pass that created the StatefulSet writes no status; it looks
	// again once the StatefulSet controller had its turn (a refused member
	// sends no event), and that pass writes the status whatever it finds
	// (membersAboutToAppear).
	created := &observed{reports: map[string]state.Result{}, membersCreated: true}
	assert.True(t, membersAboutToAppear(created))
	assert.Equal(t, membersAppearWait, r.nextLook(created), "the status that waits for the members is written by the next pass at the latest")
	assert.Equal(t, handler.LowPriority, *r.look(created).Priority)
	failedStep := &observed{membersCreated: true, failed: &stepError{step: "roll", err: errors.New("boom")}}
	assert.Equal(t, idleLooks*30*time.Second, r.nextLook(failedStep), "a failed step: its usual look (outcome bounds it by the failure's backoff)")
	blockedToo := &observed{membersCreated: true, blocked: &blockage{reason: v1alpha1.ReasonOwnershipConflict}}
	assert.Equal(t, 30*time.Second, r.nextLook(blockedToo), "a blockage: the blocked look")
	routeWaits := &observed{membersCreated: true, routing: routingOutcome{readiness: &routing.Readiness{Status: metav1.ConditionUnknown}}}
	assert.Equal(t, routingPoll, r.nextLook(routeWaits), "a route without its verdict keeps its poll")
	for what, o := range map[string]*observed{"a failed step": failedStep, "a blockage": blockedToo, "a route without its verdict": routeWaits} {
		assert.False(t, membersAboutToAppear(o), "%s is reported at once", what)
	}
	beside := steady()
	beside.pods = append(beside.pods, pending().pods[0])
	beside.pods[1].Name = "f-1"
	assert.Equal(t, 30*time.Second, r.nextLook(beside), "a running member beside a pending one is read at the /state interval")
	cannotGrow := pending()
	cannotGrow.diskResize = "Cannot grow member disks to 2Gi: data-f-0 is not expandable"
	assert.Equal(t, 30*time.Second, r.nextLook(cannotGrow), "a claim sends the fleet no event: a refused resize is looked at again")
	pendingRoute := pending()
	pendingRoute.routing = routingOutcome{readiness: &routing.Readiness{Status: metav1.ConditionUnknown}}
	assert.Equal(t, routingPoll, r.nextLook(pendingRoute), "a route waiting for its verdict is polled whatever the members do")

	// A member that just turned Ready and is still Starting on /state: soon,
	// in a roll (the next member waits for it) and after its last step
	// (Ready waits for it), but only for startingWindow.
	starting := func(since time.Duration, rolling bool) *observed {
		o := &observed{pods: []corev1.Pod{readySince(since)}, reports: map[string]state.Result{"f-0": {Report: &state.Report{Phase: "Starting"}}}}
		if rolling {
			o.decision = roll.Decision{Outdated: 1}
		}
		return o
	}
	assert.Equal(t, startingPoll, r.nextLook(starting(time.Second, true)))
	assert.Equal(t, startingPoll, r.nextLook(starting(time.Second, false)))
	assert.Equal(t, rollPoll, r.nextLook(starting(startingWindow, true)), "past the window: the roll's poll")
	assert.Equal(t, notReadyPoll, r.nextLook(starting(startingWindow, false)))
	terminating := starting(time.Second, true)
	terminating.pods[0].DeletionTimestamp = ptr.To(metav1.NewTime(now))
	assert.Equal(t, rollPoll, r.nextLook(terminating), "a terminating member sends events")

	blocked := steady()
	blocked.blocked = &blockage{reason: v1alpha1.ReasonIstioAPIUnavailable}
	assert.Equal(t, 30*time.Second, r.nextLook(blocked), "a blocked fleet still looks again: a CRD install sends no event")

	awaiting := steady()
	awaiting.routing = routingOutcome{readiness: &routing.Readiness{Status: metav1.ConditionUnknown}}
	assert.Equal(t, routingPoll, r.nextLook(awaiting))
}

// The fleets' gauges are their spec and status as the cache holds them, on
// the leader only; a fleet that is gone has none.
// TestFailedPassLooksAgainWithinItsPoll: a failed pass is not returned to
// the work queue (whose backoff grows toward 1,000 s and replaces the
// fleet's periodic look): it asks for a look after a backoff of its own,
// never later than the fleet's next look nor its /state interval; a pass
// that succeeds resets it, and each fleet counts its own failures.
func TestFailedPassLooksAgainWithinItsPoll(t *testing.T) {
	ctx := context.Background()
	r := &FleetReconciler{Config: Config{StateInterval: 20 * time.Second}, Now: time.Now}
	shop, other := types.NamespacedName{Namespace: "apps", Name: "shop"}, types.NamespacedName{Namespace: "apps", Name: "other"}
	boom := errors.New("namespaces \"apps\" is forbidden: denied by policy")
	idle := func() *observed { return &observed{reports: map[string]state.Result{}} } // next look: idleLooks intervals
	failedBefore := testutil.ToFloat64(failedPassesMetric)
	var got []time.Duration
	for range 7 {
		res := r.outcome(ctx, shop, idle(), boom)
		assert.Equal(t, ptr.To(handler.LowPriority), res.Priority, "a retry is a look, not an event")
		got = append(got, res.RequeueAfter)
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 20 * time.Second, 20 * time.Second}, got,
		"doubling from 1 s, never past the /state interval")
	assert.Equal(t, 7.0, testutil.ToFloat64(failedPassesMetric)-failedBefore, "each failed pass is counted")
	assert.Equal(t, time.Second, r.outcome(ctx, other, idle(), boom).RequeueAfter, "another fleet's failures are its own")
	rolling := idle()
	rolling.decision = roll.Decision{Outdated: 1}
	assert.Equal(t, rollPoll, r.outcome(ctx, shop, rolling, boom).RequeueAfter, "never later than the look the pass owes")
	assert.Equal(t, idleLooks*20*time.Second, r.outcome(ctx, shop, idle(), nil).RequeueAfter, "a pass that succeeds looks as usual")
	assert.Equal(t, time.Second, r.outcome(ctx, shop, idle(), boom).RequeueAfter, "and resets the backoff")
}

func TestMetricsFollowStatus(t *testing.T) {
	f := v1alpha1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m"}, Spec: v1alpha1.CelldFleetSpec{Replicas: ptr.To[int32](3)},
		Status: v1alpha1.CelldFleetStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 1,
			Conditions: []metav1.Condition{{Type: string(v1alpha1.ConditionReady), Status: metav1.ConditionFalse}}}}
	var fleets []v1alpha1.CelldFleet
	leading := make(chan struct{})
	c := &fleetCollector{leading: leading, fleets: func(context.Context) ([]v1alpha1.CelldFleet, error) { return fleets, nil }}
	fleets = []v1alpha1.CelldFleet{f}
	assert.Zero(t, testutil.CollectAndCount(c), "a standby publishes nothing")

	close(leading)
	want := `
# HELP celld_fleet_condition 1 when the fleet's condition has the given status.
# TYPE celld_fleet_condition gauge
celld_fleet_condition{fleet="m",namespace="ns",status="False",type="Ready"} 1
celld_fleet_condition{fleet="m",namespace="ns",status="True",type="Ready"} 0
celld_fleet_condition{fleet="m",namespace="ns",status="Unknown",type="Ready"} 0
# HELP celld_fleet_members Member Pods of a fleet by state: desired, present, ready (Pod Ready), updated (on the target revision).
# TYPE celld_fleet_members gauge
celld_fleet_members{fleet="m",namespace="ns",state="desired"} 3
celld_fleet_members{fleet="m",namespace="ns",state="present"} 3
celld_fleet_members{fleet="m",namespace="ns",state="ready"} 2
celld_fleet_members{fleet="m",namespace="ns",state="updated"} 1
`
	assert.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want)))

	fleets = nil
	assert.Zero(t, testutil.CollectAndCount(c), "a deleted fleet leaves no series")

	c.fleets = func(context.Context) ([]v1alpha1.CelldFleet, error) { return nil, errors.New("cache not synced") }
	assert.Zero(t, testutil.CollectAndCount(c), "a failed read leaves the fleets out, it fails no scrape")
}

// TestLookPriority: a look at members that move keeps the events'
// priority; a look at rest or at something outside goes after events.
func TestLookPriority(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &FleetReconciler{Config: Config{StateInterval: 30 * time.Second}, Now: func() time.Time { return now }}
	running := func(report state.Result, readyFor time.Duration) *observed {
		return &observed{pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "f-0"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-readyFor))}}}}},
			reports: map[string]state.Result{"f-0": report}}
	}
	healthy := state.Result{Report: &state.Report{Healthy: true}}
	rolling := running(healthy, time.Hour)
	rolling.decision = roll.Decision{Outdated: 1}
	routePending := running(healthy, time.Hour)
	routePending.routing = routingOutcome{readiness: &routing.Readiness{Status: metav1.ConditionUnknown}}
	for what, obs := range map[string]*observed{
		"starting":    running(state.Result{Report: &state.Report{Phase: "Starting"}}, time.Second),
		"rolling":     rolling,
		"not healthy": running(state.Result{Err: errors.New("refused")}, time.Hour),
	} {
		assert.Equal(t, 0, *r.look(obs).Priority, "members move: %s keeps the events' priority", what)
	}
	for what, obs := range map[string]*observed{
		"steady":        running(healthy, time.Hour),
		"route pending": routePending,
		"no member":     {},
		"blocked":       {blocked: &blockage{reason: v1alpha1.ReasonIstioAPIUnavailable}},
	} {
		assert.Equal(t, handler.LowPriority, *r.look(obs).Priority, "at rest or waiting outside: %s goes after events", what)
	}
}
