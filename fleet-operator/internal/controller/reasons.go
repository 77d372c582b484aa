package controller

// Condition reasons added for the edges of the fleet seed (issue 14). Each
// has a row in docs/troubleshooting.md.
const (
	// ReasonRouteRejected: the API server (its schema or an admission
	// webhook or policy) refused the route; RoutingReady quotes its answer.
	ReasonRouteRejected = "RouteRejected"
)

// ConditionReconciled is False, with ReasonStepFailed, when a step of the
// last reconcile failed; True once a reconcile ran every step.
const ConditionReconciled = "Reconciled"

const (
	// ReasonStepFailed: a reconcile step failed; the message names the step
	// and quotes the error. Member facts in status are the last known ones.
	ReasonStepFailed = "StepFailed"
	// ReasonAllStepsRan: the last reconcile ran every step.
	ReasonAllStepsRan = "AllStepsRan"
)
