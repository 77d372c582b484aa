// Package pacing decides, for both operators, when a reconcile runs and
// whether it writes: the read-your-writes gate (Gate), the status write
// verdict (StatusVerdict), the requeue table (Table), the event filters
// (UpdateFilter, CreateFilter) and the counters of every deferral, held
// status write and dropped event (on controller-runtime's metrics
// registry). It holds no domain knowledge: each operator declares its facts,
// projections and intervals; the rules and their reasons are in
// docs/pacing.md.
package pacing
