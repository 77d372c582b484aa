package pacing

import (
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// Table is a controller's requeue table: when to look at an object again
// without an event, and at which work-queue priority, as rows of data.
// The first row whose fact holds decides the interval; then each cap
// whose fact holds shortens it (unless the row is Final). A look taken
// for members that move keeps the events' priority (Urgent); any other
// look is low priority, so that events go first (controller-runtime's
// priority queue otherwise gives a requeue the priority its reconcile was
// taken with, and a fleet once woken by an event would keep re-reading at
// the priority of events).
type Table[T any] struct {
	Rows []Row[T]
	// Caps bound the interval a row chose.
	Caps []Cap[T]
}

// Row is one fact and its look.
type Row[T any] struct {
	// Fact says in words what holds (shown in tests and docs).
	Fact  string
	Holds func(T) bool
	// After is a fixed interval; zero means Times base intervals.
	After time.Duration
	// Times: the interval in base intervals when After is zero (0 counts as 1).
	Times int
	// Urgent: the look keeps the events' priority.
	Urgent bool
	// Final: no cap applies.
	Final bool
}

// Cap bounds the interval while its fact holds.
type Cap[T any] struct {
	Fact  string
	Holds func(T) bool
	At    time.Duration
}

// Look is the table's answer.
type Look struct {
	After    time.Duration
	Priority *int
	// Fact is the row (and cap) that decided.
	Fact string
}

// Next is the look for in; base is the controller's interval (a fleet's
// /state interval), taken when no row holds.
func (t Table[T]) Next(in T, base time.Duration) Look {
	look := Look{After: base, Fact: "default"}
	urgent, final := false, false
	for _, r := range t.Rows {
		if !r.Holds(in) {
			continue
		}
		look.Fact, urgent, final = r.Fact, r.Urgent, r.Final
		look.After = r.After
		if r.After == 0 {
			look.After = base * time.Duration(max(r.Times, 1))
		}
		break
	}
	if !final {
		for _, c := range t.Caps {
			if look.After > c.At && c.Holds(in) {
				look.After, look.Fact, urgent = c.At, look.Fact+", capped: "+c.Fact, false
			}
		}
	}
	if urgent {
		look.Priority = ptr.To(0)
	} else {
		look.Priority = ptr.To(handler.LowPriority)
	}
	return look
}
