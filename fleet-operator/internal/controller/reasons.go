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

const (
	// ReasonInjectedWithoutOptIn: members of a fleet that never opted in
	// run proxies injected by the namespace, which the fleet NetworkPolicy
	// keeps away from istiod.
	ReasonInjectedWithoutOptIn = "InjectedWithoutOptIn"
	// ReasonProxyStillInjected: a member on the opt-out template of a
	// leaving fleet still runs a proxy; the fleet stays Leaving until the
	// injector honours the opt-out.
	ReasonProxyStillInjected = "ProxyStillInjected"
)

// ReasonAmbientSharedServiceAccount: an ambient fleet with AllowAll whose
// ServiceAccount other Pods run as; those Pods are refused on 8080.
const ReasonAmbientSharedServiceAccount = "AmbientSharedServiceAccount"

// ReasonNamespaceOptedOut: an admin labelled the fleet's namespace
// core.navique.com/mesh=disabled; no writer overrides it, so the fleet
// stays outside the mesh.
const ReasonNamespaceOptedOut = "NamespaceOptedOut"
