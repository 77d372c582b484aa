package v1alpha1

// ConditionType names a condition in a CelldFleet's status.conditions.
type ConditionType string

// ConditionReason is the CamelCase reason of a CelldFleet condition. Every
// value has a row in docs/troubleshooting.md; a test in shared/conditions
// fails when one has not.
type ConditionReason string

// Condition types of a CelldFleet.
const (
	// ConditionReady: every member is present, Ready, healthy on /state and
	// on the target revision.
	ConditionReady ConditionType = "Ready"
	// ConditionProvisioning: True while members are created, rolled or
	// waited for.
	ConditionProvisioning ConditionType = "Provisioning"
	// ConditionInfrastructureBlocked: True when something outside the fleet
	// stops it (unconfirmed NetworkPolicy, a foreign object, a missing API).
	ConditionInfrastructureBlocked ConditionType = "InfrastructureBlocked"
	// ConditionDisksResized is False when member claims could not be grown
	// to spec.storage.size (typically a storage class without expansion).
	ConditionDisksResized ConditionType = "DisksResized"
	// ConditionMeshReady tells where a fleet that uses (or used) the Istio
	// mesh stands; absent for fleets that never opted in.
	ConditionMeshReady ConditionType = "MeshReady"
	// ConditionReconciled is False, with ReasonStepFailed, when a step of
	// the last reconcile failed; True once a reconcile ran every step.
	ConditionReconciled ConditionType = "Reconciled"
	// ConditionRoutingReady: where the fleet's route stands (spec.routing).
	ConditionRoutingReady ConditionType = "RoutingReady"
	// ConditionNamespaceDeclared: whether the fleet's namespace carries the
	// labels the fleet asks for (the mesh enrollment request, the edges
	// namespace isolation admits). They are a request to the mesh operator,
	// not a precondition of the members: a refused write is reported here
	// and the fleet carries on. Absent for a fleet that asks for nothing
	// (mode disabled) and has declared nothing.
	ConditionNamespaceDeclared ConditionType = "NamespaceDeclared"
	// ConditionReconciling and ConditionStalled are the kstatus pair the
	// ServiceMesh carries too, so Flux and Argo CD health checks read both
	// kinds alike: Reconciling=True while the fleet converges, Stalled=True
	// while it cannot without someone acting.
	ConditionReconciling ConditionType = "Reconciling"
	ConditionStalled     ConditionType = "Stalled"
)

// Reasons of InfrastructureBlocked (and of Provisioning and Ready while blocked).
const (
	ReasonNetworkPolicyNotConfirmed ConditionReason = "NetworkPolicyNotConfirmed"
	ReasonOwnershipConflict         ConditionReason = "OwnershipConflict"
	ReasonIstioAPIUnavailable       ConditionReason = "IstioAPIUnavailable"
	// ReasonMutualTLSDestinationRule: a DestinationRule forces ISTIO_MUTUAL
	// toward the fleet's Services while it is to roll into or out of the
	// mesh; the roll is held before the first member is replaced (also
	// MeshReady). The message names the rules.
	ReasonMutualTLSDestinationRule ConditionReason = "MutualTLSDestinationRule"
	ReasonNotBlocked               ConditionReason = "NotBlocked"
)

// Reasons of DisksResized.
const (
	ReasonResizeRejected ConditionReason = "ResizeRejected"
	ReasonSizeRequested  ConditionReason = "SizeRequested"
)

// Reasons of Provisioning and Ready.
const (
	// ReasonProxyMissing: a member on the meshed template runs without its
	// istio-proxy (also MeshReady while joining).
	ReasonProxyMissing ConditionReason = "ProxyMissing"
	// ReasonMaintenancePaused: spec.maintenance.paused holds member changes
	// (also MeshReady, when the held change is joining or leaving the mesh).
	ReasonMaintenancePaused ConditionReason = "MaintenancePaused"
	ReasonRolling           ConditionReason = "Rolling"
	ReasonRollPaused        ConditionReason = "RollPaused"
	ReasonApplyingTemplate  ConditionReason = "ApplyingTemplate"
	ReasonCreatingMembers   ConditionReason = "CreatingMembers"
	// ReasonMembersRefused: the API server refuses the member Pods the
	// StatefulSet controller creates (Pod Security admission, a quota, an
	// admission webhook or policy); the message quotes its FailedCreate.
	ReasonMembersRefused ConditionReason = "MembersRefused"
	// ReasonStatefulSetRefused: the API server refuses the fleet operator's
	// StatefulSet itself (an admission webhook or policy, RBAC, the schema);
	// the members keep the last accepted template. Provisioning, Stalled,
	// and Ready while members are missing; the message quotes the answer.
	ReasonStatefulSetRefused ConditionReason = "StatefulSetRefused"
	ReasonWaitingForMembers  ConditionReason = "WaitingForMembers"
	ReasonProvisioned        ConditionReason = "Provisioned"
	ReasonMembersReady       ConditionReason = "MembersReady"
	ReasonMembersNotReady    ConditionReason = "MembersNotReady"
)

// Reasons of Reconciled.
const (
	// ReasonStepFailed: a reconcile step failed; the message names the step
	// and quotes the error. Member facts in status are the last known ones.
	ReasonStepFailed ConditionReason = "StepFailed"
	// ReasonAllStepsRan: the last reconcile ran every step.
	ReasonAllStepsRan ConditionReason = "AllStepsRan"
)

// Reasons of NamespaceDeclared.
const (
	// ReasonNamespaceLabelsDeclared: the namespace carries the labels the
	// fleet asks for (or an admin's opt-out that the fleet never replaces).
	ReasonNamespaceLabelsDeclared ConditionReason = "NamespaceLabelsDeclared"
	// ReasonNamespaceLabelsRefused: the API server (RBAC, an admission
	// webhook or policy) refused the fleet's namespace label write; the
	// message names the labels and quotes its answer. The members run
	// regardless; the write is tried again at the fleet's poll (--state-interval), or at once when the namespace changes.
	ReasonNamespaceLabelsRefused ConditionReason = "NamespaceLabelsRefused"
)

// Reasons of Reconciling and Stalled when the other reason does not apply.
const (
	ReasonNotReconciling ConditionReason = "NotReconciling"
	ReasonNotStalled     ConditionReason = "NotStalled"
)

// Reasons of MeshReady.
const (
	// ReasonInjectedWithoutOptIn: members of a fleet that never opted in
	// run proxies injected by the namespace, which the fleet NetworkPolicy
	// keeps away from istiod.
	ReasonInjectedWithoutOptIn ConditionReason = "InjectedWithoutOptIn"
	// ReasonProxyStillInjected: a member on the opt-out template of a
	// leaving fleet still runs a proxy; the fleet stays Leaving until the
	// injector honours the opt-out.
	ReasonProxyStillInjected ConditionReason = "ProxyStillInjected"
	// ReasonAmbientSharedServiceAccount: an ambient fleet with AllowAll
	// whose ServiceAccount other Pods run as; those Pods are refused on 8080.
	ReasonAmbientSharedServiceAccount ConditionReason = "AmbientSharedServiceAccount"
	// ReasonNamespaceOptedOut: an admin labelled the fleet's namespace
	// core.navique.com/mesh=disabled; no writer overrides it, so the fleet
	// stays outside the mesh.
	ReasonNamespaceOptedOut  ConditionReason = "NamespaceOptedOut"
	ReasonAwaitingEnrollment ConditionReason = "AwaitingEnrollment"
	ReasonAmbient            ConditionReason = "Ambient"
	ReasonMeshed             ConditionReason = "Meshed"
	ReasonJoiningMesh        ConditionReason = "JoiningMesh"
	ReasonLeavingMesh        ConditionReason = "LeavingMesh"
	ReasonLeftMesh           ConditionReason = "LeftMesh"
)

// Reasons of RoutingReady.
const (
	ReasonAwaitingGateway       ConditionReason = "AwaitingGateway"
	ReasonRouteNotAccepted      ConditionReason = "RouteNotAccepted"
	ReasonRouteRefsNotResolved  ConditionReason = "RouteRefsNotResolved"
	ReasonRouteAccepted         ConditionReason = "RouteAccepted"
	ReasonAwaitingAddress       ConditionReason = "AwaitingAddress"
	ReasonAddressAssigned       ConditionReason = "AddressAssigned"
	ReasonRemovingOldRoute      ConditionReason = "RemovingOldRoute"
	ReasonGatewayAPIUnavailable ConditionReason = "GatewayAPIUnavailable"
	// ReasonRouteRejected: the API server (its schema or an admission
	// webhook or policy) refused the route; RoutingReady quotes its answer.
	ReasonRouteRejected ConditionReason = "RouteRejected"
	// ReasonIngressAnnotationRefused: spec.routing.ingress.annotations holds
	// keys the operator's allowed patterns (chart value
	// routing.allowedIngressAnnotations) do not match; the Ingress is
	// written without them, and the message names them.
	ReasonIngressAnnotationRefused ConditionReason = "IngressAnnotationRefused"
)
