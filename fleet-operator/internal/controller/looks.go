package controller

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ericdev/fleetmesh/shared/pacing"
)

// How soon a fleet is looked at again without an event (see looks).
const (
	// startingPoll: a member whose Pod turned Ready less than startingWindow
	// ago but whose /state does not report healthy yet is usually about to
	// be healthy, and /state sends no event when it is. Looking again soon
	// lets a roll replace the next member (or report Ready) right away.
	startingPoll   = 250 * time.Millisecond
	startingWindow = 5 * time.Second
	rollPoll       = time.Second
	notReadyPoll   = 5 * time.Second
	routingPoll    = 10 * time.Second
	// idleLooks: a fleet none of whose members runs looks again after this
	// many /state intervals (see looks).
	idleLooks = 6
	// membersAppearWait: the look after the pass that created the
	// members' StatefulSet (see looks).
	membersAppearWait = 2 * time.Second
)

// lookFacts is what the requeue table decides from: what the pass
// observed, and whether a member is starting (memberStarting, which needs
// the clock).
type lookFacts struct {
	*observed
	starting bool
}

// looks is the fleet's requeue table: when to look at a fleet again
// without an event, and at which priority (docs/pacing.md). Soon while
// members run but are not healthy or a roll goes on (/state health changes
// without an event); later while waiting on something outside (a CRD being
// installed, a conflicting object removed, a Gateway's verdict), and at
// the /state interval otherwise. A look at members that move keeps the
// events' priority (Urgent): the roll in progress is what the user waits
// for; any other look goes after events.
var looks = pacing.Table[lookFacts]{
	Rows: []pacing.Row[lookFacts]{{
		// A CRD install or a conflicting object's removal sends no event.
		Fact:  "blocked: waiting on something outside",
		Holds: func(f lookFacts) bool { return f.blocked != nil },
		Final: true,
	}, {
		// The StatefulSet controller creates the members within moments
		// and their Pod events wake the fleet to write the status this
		// pass held (membersAboutToAppear); but a member the API server
		// refuses (Pod Security, a quota) sends no event, and the pass that
		// created the StatefulSet could not judge that yet
		// (observeRefusal). A look once the StatefulSet controller had its
		// turn writes the status whatever it finds. A route waiting for its
		// verdict keeps its own poll (the cap).
		Fact:  "this pass created the members' StatefulSet",
		Holds: func(f lookFacts) bool { return membersAboutToAppear(f.observed) },
		After: membersAppearWait,
	}, {
		// A member whose Pod just turned Ready is usually about to report
		// healthy, and /state sends no event when it does: a roll replaces
		// the next member, or the fleet reports Ready, right away.
		Fact:   "a member is starting",
		Holds:  func(f lookFacts) bool { return f.starting },
		After:  startingPoll,
		Urgent: true,
	}, {
		Fact:   "a roll is in progress",
		Holds:  func(f lookFacts) bool { return f.decision.Rolling() },
		After:  rollPoll,
		Urgent: true,
	}, {
		Fact:   "a running member is not healthy",
		Holds:  func(f lookFacts) bool { return runningUnhealthy(f.observed) },
		After:  notReadyPoll,
		Urgent: true,
	}, {
		// What a fleet none of whose members runs waits for (the
		// StatefulSet controller, the scheduler, a claim being bound)
		// ends in a Pod event; an API being installed or removed
		// (Istio's, the Gateway API) sends none, hence a look now and
		// then. A claim that cannot grow sends no event either: it keeps
		// its look, so the condition clears once the claim can.
		Fact:  "no member runs",
		Holds: func(f lookFacts) bool { return !slices.ContainsFunc(f.pods, readable) && f.diskResize == "" },
		Times: idleLooks,
	}},
	Caps: []pacing.Cap[lookFacts]{{
		Fact:  "a route awaits its verdict",
		Holds: func(f lookFacts) bool { return !f.routing.ready() },
		At:    routingPoll,
	}},
}

// look is when (and at which priority) to reconcile the fleet again
// without an event. A StatefulSet the StatefulSet controller has yet to
// observe is not polled: its status update wakes the fleet.
func (r *FleetReconciler) look(obs *observed) pacing.Look {
	return looks.Next(lookFacts{observed: obs, starting: r.memberStarting(obs)}, r.Config.StateInterval)
}

// nextLook is look's interval.
func (r *FleetReconciler) nextLook(obs *observed) time.Duration { return r.look(obs).After }

// readable is a member whose /state is read: its Pod runs and is not
// being deleted.
func readable(p corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
}

// runningUnhealthy reports a running member that /state does not report
// healthy: its health changes without an event, so the fleet looks again
// soon. A member that does not run yet (being scheduled, its claim bound,
// its image pulled) changes through Pod events, which wake the fleet by
// themselves; looking every 5 s meanwhile only re-applied the fleet's
// objects while a busy cluster scheduled its Pods.
func runningUnhealthy(obs *observed) bool {
	for i := range obs.pods {
		p := &obs.pods[i]
		if readable(*p) && !healthy(obs.reports[p.Name]) {
			return true
		}
	}
	return false
}

// memberStarting reports a member whose Pod turned Ready within
// startingWindow and that /state does not report healthy yet. Past the
// window the usual polls apply, so a member that stays unhealthy is not
// read four times a second.
func (r *FleetReconciler) memberStarting(obs *observed) bool {
	return len(r.startingMembers(obs)) > 0
}

// startingMembers names the members memberStarting looks for.
func (r *FleetReconciler) startingMembers(obs *observed) map[string]bool {
	now := r.Now()
	var starting map[string]bool
	for i := range obs.pods {
		p := &obs.pods[i]
		if p.DeletionTimestamp != nil || healthy(obs.reports[p.Name]) {
			continue
		}
		if c := readyCondition(p); c != nil && c.Status == corev1.ConditionTrue && now.Sub(c.LastTransitionTime.Time) < startingWindow {
			if starting == nil {
				starting = map[string]bool{}
			}
			starting[p.Name] = true
		}
	}
	return starting
}
