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
	f := &v1alpha1.CelldFleet{Spec: v1alpha1.CelldFleetSpec{Replicas: ptr.To[int32](1)}}
	readySince := func(d time.Duration) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "f-0"}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-d))}}}}
	}
	readyPod := readySince(time.Hour)
	healthy := map[string]state.Result{"f-0": {Report: &state.Report{Healthy: true}}}
	steady := func() *observed { return &observed{pods: []corev1.Pod{readyPod}, reports: healthy} }

	assert.Equal(t, 30*time.Second, r.nextLook(f, steady()), "steady: the /state interval")

	rolling := steady()
	rolling.decision = roll.Decision{Outdated: 1}
	assert.Equal(t, rollPoll, r.nextLook(f, rolling), "members move without events")

	notReady := steady()
	notReady.reports = map[string]state.Result{}
	assert.Equal(t, notReadyPoll, r.nextLook(f, notReady))

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
	assert.Equal(t, startingPoll, r.nextLook(f, starting(time.Second, true)))
	assert.Equal(t, startingPoll, r.nextLook(f, starting(time.Second, false)))
	assert.Equal(t, rollPoll, r.nextLook(f, starting(startingWindow, true)), "past the window: the roll's poll")
	assert.Equal(t, notReadyPoll, r.nextLook(f, starting(startingWindow, false)))
	terminating := starting(time.Second, true)
	terminating.pods[0].DeletionTimestamp = ptr.To(metav1.NewTime(now))
	assert.Equal(t, rollPoll, r.nextLook(f, terminating), "a terminating member sends events")

	blocked := steady()
	blocked.blocked = &blockage{reason: v1alpha1.ReasonIstioAPIUnavailable}
	assert.Equal(t, 30*time.Second, r.nextLook(f, blocked), "a blocked fleet still looks again: a CRD install sends no event")

	awaiting := steady()
	awaiting.routing = routingOutcome{readiness: &routing.Readiness{Status: metav1.ConditionUnknown}}
	assert.Equal(t, routingPoll, r.nextLook(f, awaiting))
}

// The fleets' gauges are their spec and status as the cache holds them, on
// the leader only; a fleet that is gone has none.
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

func TestLookPriority(t *testing.T) {
	for _, moving := range []time.Duration{startingPoll, rollPoll, notReadyPoll} {
		assert.Equal(t, 0, *lookPriority(moving), "members move: %s keeps the events' priority", moving)
	}
	for _, rest := range []time.Duration{30 * time.Second, routingPoll, 50 * time.Millisecond} {
		assert.Equal(t, handler.LowPriority, *lookPriority(rest), "at rest or waiting outside: %s goes after events", rest)
	}
}
