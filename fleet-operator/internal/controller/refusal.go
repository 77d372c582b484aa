package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The StatefulSet controller's own reason for a Pod (or claim) it could
// not create; its event's message quotes the API server's answer.
const failedCreateReason = "FailedCreate"

// refusalFreshness bounds how old a FailedCreate may be and still describe
// now: the StatefulSet controller retries a failing create at least every
// ~17 minutes (its work queue's longest backoff, 1,000 s) and the event is
// updated each time, so one not seen for longer is about a refusal that
// ended.
const refusalFreshness = 20 * time.Minute

// combinedEventPrefix is what the event recorder puts before a message it
// aggregates with similar ones; it is dropped so the quoted message (and
// the status) does not change when the recorder starts aggregating.
const combinedEventPrefix = "(combined from similar events): "

// memberRefusal is why members the StatefulSet should run do not exist:
// the API server's answer to the StatefulSet controller (message), or why
// that could not be read (unknown).
type memberRefusal struct {
	message string
	unknown error
}

// +kubebuilder:rbac:groups="",resources=events,verbs=list

// observeRefusal looks for the reason members are missing, only when some
// are: the StatefulSet controller reports a Pod the API server refused in
// a FailedCreate event on the StatefulSet, and nowhere else (its status
// has no condition for it). Read past the cache: events are many and
// short-lived, and the fleet never watches them.
func (r *FleetReconciler) observeRefusal(ctx context.Context, sts *appsv1.StatefulSet, pods []corev1.Pod) *memberRefusal {
	missing := missingMembers(sts, pods)
	if len(missing) == 0 {
		return nil
	}
	list := &corev1.EventList{}
	if err := r.freshReader().List(ctx, list, client.InNamespace(sts.Namespace),
		client.MatchingFields{"involvedObject.uid": string(sts.UID), "reason": failedCreateReason}); err != nil {
		return &memberRefusal{unknown: err}
	}
	return refusalOf(missing, list.Items, r.Now())
}

// missingMembers are the Pods the StatefulSet should run and that do not
// exist.
func missingMembers(sts *appsv1.StatefulSet, pods []corev1.Pod) []string {
	if sts == nil || sts.UID == "" {
		return nil
	}
	exist := map[string]bool{}
	for i := range pods {
		exist[pods[i].Name] = true
	}
	var missing []string
	for i := range ptr.Deref(sts.Spec.Replicas, 0) {
		if name := fmt.Sprintf("%s-%d", sts.Name, i); !exist[name] {
			missing = append(missing, name)
		}
	}
	return missing
}

// refusalOf is the newest FailedCreate, seen within refusalFreshness, that
// names a missing member; nil when there is none.
func refusalOf(missing []string, events []corev1.Event, now time.Time) *memberRefusal {
	var newest *corev1.Event
	var newestAt time.Time
	for i := range events {
		e := &events[i]
		at := lastSeen(e)
		if e.Reason != failedCreateReason || now.Sub(at) > refusalFreshness || !namesAny(e.Message, missing) {
			continue
		}
		if newest == nil || at.After(newestAt) {
			newest, newestAt = e, at
		}
	}
	if newest == nil {
		return nil
	}
	return &memberRefusal{message: strings.TrimPrefix(newest.Message, combinedEventPrefix)}
}

// namesAny: the StatefulSet controller's message names the Pod it failed
// to create as "Pod NAME-i in StatefulSet NAME".
func namesAny(message string, pods []string) bool {
	for _, p := range pods {
		if strings.Contains(message, "Pod "+p+" ") {
			return true
		}
	}
	return false
}

// lastSeen is when an event last happened, whichever of the fields its
// recorder keeps.
func lastSeen(e *corev1.Event) time.Time {
	at := e.LastTimestamp.Time
	if e.EventTime.After(at) {
		at = e.EventTime.Time
	}
	if e.Series != nil && e.Series.LastObservedTime.After(at) {
		at = e.Series.LastObservedTime.Time
	}
	if at.IsZero() {
		at = e.FirstTimestamp.Time
	}
	return at
}

// refusalMessage is the Provisioning message of a fleet whose members the
// API server refuses.
func refusalMessage(exist, want int32, refusal *memberRefusal) string {
	msg := fmt.Sprintf("%d of %d member(s) exist: the API server refuses the StatefulSet controller's member Pods: %s.", exist, want,
		strings.TrimSuffix(refusal.message, "."))
	if strings.Contains(refusal.message, "violates PodSecurity") {
		msg += " The namespace enforces a Pod Security level the member template does not meet: the operator's defaults meet " +
			"\"restricted\"; fix spec.podTemplate.securityContext or containerSecurityContext, or the namespace's " +
			"pod-security.kubernetes.io/enforce label."
	}
	return msg
}
