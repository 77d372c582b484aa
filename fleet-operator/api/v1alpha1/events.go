package v1alpha1

// EventReason is the reason of an event the fleet operator records on a
// CelldFleet (`kubectl describe celldfleet NAME`). Events that repeat a
// condition's reason (OwnershipConflict) use that ConditionReason instead.
// Every value has a row in docs/troubleshooting.md; a test in
// shared/conditions fails when one has not.
type EventReason string

const (
	// EventMembersCreated and EventMembersUpdated: the operator created or
	// changed the members' StatefulSet.
	EventMembersCreated EventReason = "MembersCreated"
	EventMembersUpdated EventReason = "MembersUpdated"
	// EventMemberReplaced: the roll deleted a member on an old revision so
	// the StatefulSet controller recreates it on the new one (disk kept).
	EventMemberReplaced EventReason = "MemberReplaced"
	// EventDiskResizeRequested: a member's claim was asked to grow to
	// spec.storage.size.
	EventDiskResizeRequested EventReason = "DiskResizeRequested"
	// EventMeshPolicyDeleted: a fleet-owned Istio policy the fleet no longer
	// needs (it left the mesh, or the policy's reason went away) was deleted.
	EventMeshPolicyDeleted EventReason = "MeshPolicyDeleted"
)
