package pacing

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The counters are on controller-runtime's registry, served on each
// operator's /metrics next to controller-runtime's own.
var (
	deferredMetric = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetmesh_pacing_deferred_reconciles_total",
		Help: "Reconciles put off for a moment because the cache had yet to show the controller's own last write (read-your-writes gate).",
	}, []string{"controller"})
	coalescedMetric = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetmesh_pacing_coalesced_status_writes_total",
		Help: "Status writes held back because only insignificant fields changed while a change was expected within the coalescing window.",
	}, []string{"controller"})
	droppedMetric = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetmesh_pacing_dropped_events_total",
		Help: "Watch events dropped by an event filter because nothing the reconciler reads changed.",
	}, []string{"controller", "filter"})
)

// Collectors are the package's metrics (for documentation tests).
var Collectors = []prometheus.Collector{deferredMetric, coalescedMetric, droppedMetric}

func init() {
	metrics.Registry.MustRegister(Collectors...)
}

// Deferred, Coalesced and Dropped are the counters' series (tests read them).
func Deferred(controller string) prometheus.Counter {
	return deferredMetric.WithLabelValues(controller)
}

// Coalesced is the series of held status writes of a controller.
func Coalesced(controller string) prometheus.Counter {
	return coalescedMetric.WithLabelValues(controller)
}

// Dropped is the series of events one filter of a controller dropped.
func Dropped(controller, filter string) prometheus.Counter {
	return droppedMetric.WithLabelValues(controller, filter)
}
