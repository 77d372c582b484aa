package v1alpha1

// EventReason is the reason of an event the mesh operator records on the
// ServiceMesh (`kubectl describe servicemesh cluster`). Events that repeat a
// condition's reason (the SailTeardown reasons, a blocked or locked
// phase's reason) use that ConditionReason instead. Every value has a row
// in docs/troubleshooting.md; a test in shared/conditions fails when one
// has not.
type EventReason string

const (
	// EventDeferred (Warning): the ServiceMesh went to phase Deferred; the
	// message is the Ready condition's.
	EventDeferred EventReason = "Deferred"
	// EventControlPlaneReady: the control plane became Ready.
	EventControlPlaneReady EventReason = "ControlPlaneReady"
	// EventAdopted: an existing control plane was adopted, not installed.
	EventAdopted EventReason = "Adopted"
	// EventSailOperatorInstalled and EventSailOperatorUpgraded: the Sail
	// Operator's Helm release was installed or upgraded.
	EventSailOperatorInstalled EventReason = "SailOperatorInstalled"
	EventSailOperatorUpgraded  EventReason = "SailOperatorUpgraded"
	// EventSailOperatorRepaired: a Sail Operator release left failed or
	// half done (pending) was rolled back or installed again.
	EventSailOperatorRepaired EventReason = "SailOperatorRepaired"
	// EventSailReleaseAdopted: a Sail release an earlier operator version
	// stored as ConfigMaps in the Sail namespace was checked and moved into
	// the operator's own storage.
	EventSailReleaseAdopted EventReason = "SailReleaseAdopted"
	// EventNamespaceEnrolled and EventNamespaceReleased: a namespace joined
	// or left the enrollment.
	EventNamespaceEnrolled EventReason = "NamespaceEnrolled"
	EventNamespaceReleased EventReason = "NamespaceReleased"
	// EventEnrollmentConflict (Warning): someone else's object holds one of
	// the operator's policy names in a namespace (condition
	// EnrollmentConflict).
	EventEnrollmentConflict EventReason = "EnrollmentConflict"
	// EventEnrollmentFailed (Warning): an enrollment pass failed; the
	// message quotes the error.
	EventEnrollmentFailed EventReason = "EnrollmentFailed"
	// EventBaselineApplied and EventBaselineWithdrawn: isolation strict's
	// allow-nothing policy was applied to, or removed from, a namespace.
	EventBaselineApplied   EventReason = "BaselineApplied"
	EventBaselineWithdrawn EventReason = "BaselineWithdrawn"
	// EventCNIReleaseTimedOut (Warning): an ambient teardown stopped waiting
	// for istio-cni to release Pods and removed ZTunnel and IstioCNI.
	EventCNIReleaseTimedOut EventReason = "CNIReleaseTimedOut"
)
