package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestRefusalOf: only a recent FailedCreate about a member that is missing
// now explains missing members; the newest one is quoted, without the
// recorder's aggregation prefix.
func TestRefusalOf(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(reason, msg string, ago time.Duration) corev1.Event {
		return corev1.Event{Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(now.Add(-ago))}
	}
	const psa = `create Pod shop-2 in StatefulSet shop failed error: pods "shop-2" is forbidden: violates PodSecurity "restricted:latest": runAsUser=0`
	const quota = `create Pod shop-2 in StatefulSet shop failed error: pods "shop-2" is forbidden: exceeded quota: pods`
	for name, c := range map[string]struct {
		missing []string
		events  []corev1.Event
		want    string // "" for no refusal
	}{
		"none":                          {missing: []string{"shop-2"}},
		"a refusal of a missing member": {missing: []string{"shop-2"}, events: []corev1.Event{ev("FailedCreate", psa, time.Minute)}, want: psa},
		"the newest wins": {missing: []string{"shop-2"}, events: []corev1.Event{
			ev("FailedCreate", quota, 2*time.Minute), ev("FailedCreate", psa, time.Second), ev("FailedCreate", quota, time.Hour),
		}, want: psa},
		"aggregated by the recorder":                {missing: []string{"shop-2"}, events: []corev1.Event{ev("FailedCreate", combinedEventPrefix+psa, time.Minute)}, want: psa},
		"about a member that exists now":            {missing: []string{"shop-1"}, events: []corev1.Event{ev("FailedCreate", psa, time.Minute)}},
		"not a prefix of another member":            {missing: []string{"shop-2"}, events: []corev1.Event{ev("FailedCreate", "create Pod shop-21 in StatefulSet shop failed error: x", time.Minute)}},
		"older than the controller's longest retry": {missing: []string{"shop-2"}, events: []corev1.Event{ev("FailedCreate", psa, refusalFreshness+time.Minute)}},
		"another reason":                            {missing: []string{"shop-2"}, events: []corev1.Event{ev("SuccessfulCreate", "create Pod shop-2 in StatefulSet shop successful", time.Second)}},
		"seen last in a series": {missing: []string{"shop-2"}, events: []corev1.Event{{
			Reason: "FailedCreate", Message: psa, EventTime: metav1.NewMicroTime(now.Add(-time.Hour)),
			Series: &corev1.EventSeries{LastObservedTime: metav1.NewMicroTime(now.Add(-time.Minute))},
		}}, want: psa},
	} {
		t.Run(name, func(t *testing.T) {
			got := refusalOf(c.missing, c.events, now)
			if c.want == "" {
				assert.Nil(t, got)
				return
			}
			if assert.NotNil(t, got) {
				assert.Equal(t, c.want, got.message)
			}
		})
	}
}

func TestMissingMembers(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "shop", UID: "u"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)}}
	pods := []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "shop-1"}}}
	assert.Equal(t, []string{"shop-0", "shop-2"}, missingMembers(sts, pods))
	assert.Nil(t, missingMembers(nil, pods))
}
