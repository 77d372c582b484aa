package pacing

import "k8s.io/apimachinery/pkg/api/equality"

// Verdict is what to do with a newly computed status.
type Verdict int

const (
	// Unchanged: the stored status is the new one; nothing to write.
	Unchanged Verdict = iota
	// Write: the new status is to be written now.
	Write
	// Hold: the controller expects what changed to change again within its
	// coalescing window; the look it asked for (its requeue table), or the
	// event it expects, writes the status then, together with whatever
	// else changed.
	Hold
)

// Settling is how much of a pass's new status the controller expects to
// be replaced within its coalescing window.
type Settling int

const (
	// Settled: nothing; any change is written at once.
	Settled Settling = iota
	// Details: the insignificant part (a member just turned Ready and is
	// about to report itself healthy). A change of the significant
	// projection is still written at once.
	Details
	// Everything: the whole status. The pass has just made the change that
	// moves the object next (it created the children that others act on
	// within moments: a fleet's member StatefulSet), so what it saw is
	// about to be replaced, and the events of that change wake the pass
	// that writes the status. The controller's requeue table looks again
	// within the window in any case, and that pass writes whatever it
	// finds. A pass that failed a step or is blocked must not say
	// Everything: a failure is written at once.
	Everything
)

// Status is a controller's one status writer: it declares which part of a
// status is significant (Significant), and answers, for a stored and a new
// status, whether to write. A change of the significant projection is
// written at once; a change of anything else is written at once too,
// unless the controller says that what it observes is settling: then it
// is held, and the next look writes it. So a status that would live a
// quarter of a second is not written, and a loss (a condition's status or
// reason, a member no longer ready) never waits. The one exception is a
// pass whose whole outcome is about to be replaced (Everything).
type Status[S any] struct {
	// Controller names the metric series.
	Controller string
}

// Verdict decides; significant projects a status onto what must never
// wait (it may depend on the pass: which members are settling).
func (w Status[S]) Verdict(stored, next S, significant func(S) any, settling Settling) Verdict {
	if equality.Semantic.DeepEqual(stored, next) {
		return Unchanged
	}
	switch settling {
	case Everything:
	case Details:
		if significant == nil || !equality.Semantic.DeepEqual(significant(stored), significant(next)) {
			return Write
		}
	default:
		return Write
	}
	coalescedMetric.WithLabelValues(w.Controller).Inc()
	return Hold
}
