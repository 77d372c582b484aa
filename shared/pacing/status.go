package pacing

import "k8s.io/apimachinery/pkg/api/equality"

// Verdict is what to do with a newly computed status.
type Verdict int

const (
	// Unchanged: the stored status is the new one; nothing to write.
	Unchanged Verdict = iota
	// Write: the new status is to be written now.
	Write
	// Hold: only insignificant fields changed while the controller expects
	// them to change again within its coalescing window; the look it asked
	// for (its requeue table) writes them then, together with whatever
	// else changed.
	Hold
)

// Status is a controller's one status writer: it declares which part of a
// status is significant (Significant), and answers, for a stored and a new
// status, whether to write. A change of the significant projection is
// written at once; a change of anything else is written at once too,
// unless the controller says that what it observes is settling (a
// member just turned Ready and is about to report itself healthy): then
// it is held, and the next look writes it. So a status that would live a
// quarter of a second is not written, and a loss (a condition's status or
// reason, a member no longer ready) never waits.
type Status[S any] struct {
	// Controller names the metric series.
	Controller string
}

// Verdict decides; significant projects a status onto what must never
// wait (it may depend on the pass: which members are settling).
func (w Status[S]) Verdict(stored, next S, significant func(S) any, settling bool) Verdict {
	if equality.Semantic.DeepEqual(stored, next) {
		return Unchanged
	}
	if !settling || significant == nil || !equality.Semantic.DeepEqual(significant(stored), significant(next)) {
		return Write
	}
	coalescedMetric.WithLabelValues(w.Controller).Inc()
	return Hold
}
