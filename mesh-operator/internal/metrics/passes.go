package metrics

import "github.com/prometheus/client_golang/prometheus"

// FailedPassesTotal is the name of FailedPasses.
const FailedPassesTotal = "mesh_operator_failed_passes_total"

// FailedPasses counts ServiceMesh reconciles that failed a step. The mesh
// operator reports such a pass in status and retries it on its own timers
// instead of returning the error to controller-runtime, so
// controller_runtime_reconcile_errors_total does not count it.
var FailedPasses = prometheus.NewCounter(prometheus.CounterOpts{
	Name: FailedPassesTotal,
	Help: "ServiceMesh reconciles that failed a step (the conditions say which); retried within 30 s.",
})
