package v1alpha1

// ConditionType names a condition in the ServiceMesh's status.conditions.
type ConditionType string

// ConditionReason is the CamelCase reason of a ServiceMesh condition. Every
// value has a row in docs/troubleshooting.md; a test in shared/conditions
// fails when one has not.
type ConditionReason string

// Condition types of a ServiceMesh.
const (
	// ConditionReady is the summary: True only when the mesh may be relied
	// on (licensed, control plane Ready, no precondition warning). Namespace
	// enrollment and STRICT mTLS wait for it.
	ConditionReady ConditionType = "Ready"
	// ConditionControlPlaneReady: the Istio control plane (Sail CRs' Ready
	// conditions, or istiod's Deployments) is ready.
	ConditionControlPlaneReady ConditionType = "ControlPlaneReady"
	// ConditionPreconditionNotMet is True (a warning) when the cluster cannot
	// run the requested data plane as it is configured (Cilium + ambient).
	ConditionPreconditionNotMet ConditionType = "PreconditionNotMet"
	// ConditionPreviewLocked is True while the license does not unlock the mesh.
	ConditionPreviewLocked ConditionType = "PreviewLocked"
	// ConditionRefused is True on a ServiceMesh not named cluster.
	ConditionRefused ConditionType = "Refused"
	// ConditionSailTeardown reports, while the ServiceMesh is deleted, what
	// became of the Sail Operator installation it held: uninstalled, kept
	// (other holders, or Sail resources the operator does not own), and
	// which recorded CRD names it refused to delete.
	ConditionSailTeardown ConditionType = "SailTeardown"
	// ConditionNamespaceTeardown reports, while the ServiceMesh is deleted,
	// what became of the namespaces the operator created (istio-system,
	// istio-cni, ztunnel, the Sail namespace): deleted, or kept because
	// something the operator did not put there is in them (named), or
	// because what is in them could not be read entirely.
	ConditionNamespaceTeardown ConditionType = "NamespaceTeardown"
	// ConditionReconciling and ConditionStalled follow kstatus, as the
	// CelldFleet's do.
	ConditionReconciling ConditionType = "Reconciling"
	ConditionStalled     ConditionType = "Stalled"
	// ConditionMTLSCutover is True once every enrolled namespace has passed
	// the PERMISSIVE→STRICT cutover and is STRICT; False lists those still
	// waiting and the Pod holding each back, or (HeldPermissive) those at
	// PERMISSIVE for another reason. Decided in every pass, also while the
	// control plane is not Ready.
	ConditionMTLSCutover ConditionType = "MTLSCutover"
	// ConditionMaintenanceWindow is True while spec.mtls.maintenanceUntil
	// holds enrolled namespaces at PERMISSIVE.
	ConditionMaintenanceWindow ConditionType = "MaintenanceWindow"
	// ConditionStrictIsolation exists only while spec.isolation is strict:
	// True when every enrolled namespace has its allow-nothing baseline in
	// force, False while some are at PERMISSIVE mTLS and the baseline is
	// withheld there (it would drop plaintext).
	ConditionStrictIsolation ConditionType = "StrictIsolation"
	// ConditionEnrollmentConflict is True while some namespace cannot be
	// enrolled because an object with the name of one of its policies
	// belongs to someone else; the message names each such object.
	ConditionEnrollmentConflict ConditionType = "EnrollmentConflict"
	// ConditionDataPlaneMigration is True while a change of spec.dataPlane
	// is being rolled through the enrolled namespaces; the message gives
	// each namespace's progress and what keeps the old data plane.
	ConditionDataPlaneMigration ConditionType = "DataPlaneMigration"
	// ConditionEnrollmentFailed is True while the last pass over the
	// namespaces failed a step (a read or a write the API server refused);
	// the message quotes the errors. The pass is retried within seconds and
	// never later than a timer it owes (a maintenance window's end).
	ConditionEnrollmentFailed ConditionType = "EnrollmentFailed"
	// ConditionAmbientNetworkPolicy exists only while spec.dataPlane is
	// ambient: True while the NetworkPolicies of some namespace asked for
	// would refuse what ambient capture needs (HBONE on TCP 15008 from
	// meshed peers, the kubelet's probes from 169.254.7.127), or could not
	// be read; the message names the namespaces and policies. Such a
	// namespace is not enrolled; one already enrolled stays enrolled.
	ConditionAmbientNetworkPolicy ConditionType = "AmbientNetworkPolicy"
	// ConditionNamespaceOptOut is True while some namespace asked for
	// (labelled for enrollment, or in spec.enrollNamespaces) carries an
	// admin's opt-out: core.navique.com/mesh=disabled, istio-injection=disabled
	// or istio.io/dataplane-mode=none. The operator never writes, replaces
	// or deletes those labels; such a namespace is not enrolled (one that
	// was leaves). Absent while there is none.
	ConditionNamespaceOptOut ConditionType = "NamespaceOptOut"
)

// Reasons of Refused, PreviewLocked and Ready on a mesh that changes nothing.
const (
	ReasonNotSingleton ConditionReason = "NotSingleton"
	ReasonRefused      ConditionReason = "Refused"
	// ReasonPreviewLocked: Ready=False while PreviewLocked is True.
	ReasonPreviewLocked ConditionReason = "PreviewLocked"
)

// Reasons of PreviewLocked: why a license does not unlock the mesh.
const (
	// ReasonLicenseValid: the license is signed, current and grants the mesh.
	ReasonLicenseValid ConditionReason = "LicenseValid"
	// ReasonLicenseMissing: no license Secret, or the Secret lacks the key.
	ReasonLicenseMissing ConditionReason = "LicenseMissing"
	// ReasonLicenseUnreadable (PreviewLocked=Unknown): the license Secret
	// could not be read (refused, timed out, a server error); the mesh is
	// held as it is until it can be read.
	ReasonLicenseUnreadable ConditionReason = "LicenseUnreadable"
	// ReasonLicenseMalformed: the data is not a license file this operator
	// reads (not JSON, too large, wrong or unknown format version, bad fields).
	ReasonLicenseMalformed ConditionReason = "LicenseMalformed"
	// ReasonLicenseBadSignature: the signature does not verify against any
	// key this build trusts (modified, or signed with another key).
	ReasonLicenseBadSignature ConditionReason = "LicenseBadSignature"
	// ReasonLicenseExpired: the license's notAfter has passed.
	ReasonLicenseExpired ConditionReason = "LicenseExpired"
	// ReasonLicenseNotYetValid: the license's notBefore is still ahead.
	ReasonLicenseNotYetValid ConditionReason = "LicenseNotYetValid"
	// ReasonLicenseFeatureMissing: the license grants neither service-mesh
	// nor preview.
	ReasonLicenseFeatureMissing ConditionReason = "LicenseFeatureMissing"
)

// Reasons of PreconditionNotMet.
const (
	ReasonPreconditionsMet ConditionReason = "PreconditionsMet"
	// ReasonCiliumAmbient: ambient on Cilium without the settings it needs.
	ReasonCiliumAmbient ConditionReason = "CiliumAmbient"
	// ReasonPreconditionNotMet: Ready=False (phase Blocked) while
	// PreconditionNotMet is True.
	ReasonPreconditionNotMet ConditionReason = "PreconditionNotMet"
)

// Reasons of Ready (and Stalled) when detection blocks or defers the mesh.
const (
	ReasonProviderNotDetected   ConditionReason = "ProviderNotDetected"
	ReasonMaistraDetected       ConditionReason = "MaistraDetected"
	ReasonProviderMismatch      ConditionReason = "ProviderMismatch"
	ReasonNoMeshFound           ConditionReason = "NoMeshFound"
	ReasonProviderCannotInstall ConditionReason = "ProviderCannotInstall"
	ReasonSailOperatorMissing   ConditionReason = "SailOperatorMissing"
	ReasonForeignSailResource   ConditionReason = "ForeignSailResource"
	ReasonIstioAPIMissing       ConditionReason = "IstioAPIMissing"
	// ReasonAmbiguousControlPlane: more than one namespace holds a
	// control plane the operator trusts (a Sail Istio, an istiod behind an
	// Istio sidecar-injector webhook) and spec.controlPlaneNamespace names
	// none of them; nothing is picked until it does.
	ReasonAmbiguousControlPlane ConditionReason = "AmbiguousControlPlane"
)

// Reasons of Ready (and Stalled) when a step failed.
const (
	ReasonDetectionFailed      ConditionReason = "DetectionFailed"
	ReasonReconcileError       ConditionReason = "ReconcileError"
	ReasonSailChartUnavailable ConditionReason = "SailChartUnavailable"
	ReasonSailInstallFailed    ConditionReason = "SailInstallFailed"
	// ReasonSailChartUntrusted: the Sail chart archive fetched is not the
	// one the operator pins for the version (its sha256 differs, or no
	// digest is pinned): nothing is installed or upgraded from it.
	ReasonSailChartUntrusted ConditionReason = "SailChartUntrusted"
	// ReasonSailReleaseUntrusted: the stored Sail release is not the one
	// the operator recorded (or, from an earlier operator version, not what
	// it renders), so it neither upgrades, rolls back nor uninstalls it
	// (each would delete what that record lists). Also a SailTeardown
	// reason, and the reason of the Warning event.
	ReasonSailReleaseUntrusted ConditionReason = "SailReleaseUntrusted"
)

// Reasons of ControlPlaneReady (and of Ready and Reconciling while it is
// False and nothing blocks).
const (
	// ReasonControlPlaneReady: Ready=True.
	ReasonControlPlaneReady      ConditionReason = "ControlPlaneReady"
	ReasonSailOperatorInstalling ConditionReason = "SailOperatorInstalling"
	ReasonSailResourcesReady     ConditionReason = "SailResourcesReady"
	ReasonIstiodAvailable        ConditionReason = "IstiodAvailable"
	ReasonIstiodUnavailable      ConditionReason = "IstiodUnavailable"
	ReasonExternalControlPlane   ConditionReason = "ExternalControlPlane"

	// What a Sail CR (Istio, IstioCNI, ZTunnel) says about its component:
	// missing, being deleted, its generation not yet processed by the Sail
	// Operator, Ready, or not Ready.
	ReasonIstioMissing        ConditionReason = "IstioMissing"
	ReasonIstioDeleting       ConditionReason = "IstioDeleting"
	ReasonIstioProgressing    ConditionReason = "IstioProgressing"
	ReasonIstioReady          ConditionReason = "IstioReady"
	ReasonIstioNotReady       ConditionReason = "IstioNotReady"
	ReasonIstioCNIMissing     ConditionReason = "IstioCNIMissing"
	ReasonIstioCNIDeleting    ConditionReason = "IstioCNIDeleting"
	ReasonIstioCNIProgressing ConditionReason = "IstioCNIProgressing"
	ReasonIstioCNIReady       ConditionReason = "IstioCNIReady"
	ReasonIstioCNINotReady    ConditionReason = "IstioCNINotReady"
	ReasonZTunnelMissing      ConditionReason = "ZTunnelMissing"
	ReasonZTunnelDeleting     ConditionReason = "ZTunnelDeleting"
	ReasonZTunnelProgressing  ConditionReason = "ZTunnelProgressing"
	ReasonZTunnelReady        ConditionReason = "ZTunnelReady"
	ReasonZTunnelNotReady     ConditionReason = "ZTunnelNotReady"
)

// Reasons of Reconciling and Stalled when the other reason does not apply.
const (
	ReasonNotReconciling ConditionReason = "NotReconciling"
	ReasonNotStalled     ConditionReason = "NotStalled"
)

// Reasons while the ServiceMesh is deleted (Ready, Reconciling, SailTeardown).
const (
	ReasonDeleting ConditionReason = "Deleting"
	// ReasonWaitingForSail: the Sail Operator has not yet removed the Sail
	// CRs the ServiceMesh owned.
	ReasonWaitingForSail ConditionReason = "WaitingForSail"
	// ReasonWaitingForCNIRelease: the teardown holds ZTunnel and IstioCNI
	// while istio-cni still redirects Pods of namespaces that left the mesh.
	ReasonWaitingForCNIRelease ConditionReason = "WaitingForCNIRelease"
	// ReasonWaitingForSidecarRelease: the teardown keeps the Istio
	// (istiod) while Pods of namespaces that left the mesh still run its
	// sidecar; also the reason of the Normal event that names them.
	ReasonWaitingForSidecarRelease ConditionReason = "WaitingForSidecarRelease"
	ReasonSailOperatorKept         ConditionReason = "SailOperatorKept"
	ReasonSailInUse                ConditionReason = "SailInUse"
	ReasonSailOperatorUninstalled  ConditionReason = "SailOperatorUninstalled"
	ReasonUntrustedCRDsIgnored     ConditionReason = "UntrustedCRDsIgnored"
	// ReasonSailCRDsKept: the Sail Operator was uninstalled, but CRDs its
	// install created were kept: objects of theirs exist that the operator
	// did not create, an Istio control plane it did not install runs, or
	// their objects could not be listed (each named); also the reason of
	// the Warning event.
	ReasonSailCRDsKept ConditionReason = "SailCRDsKept"
	// ReasonNamespacesKept (NamespaceTeardown=True): some namespaces the
	// operator created were left because they hold objects it did not put
	// there, or their contents could not be read entirely; also the reason
	// of the Warning event per namespace.
	ReasonNamespacesKept ConditionReason = "NamespacesKept"
	// ReasonNamespacesRemoved (NamespaceTeardown=True): every namespace the
	// operator created held nothing else and was deleted.
	ReasonNamespacesRemoved ConditionReason = "NamespacesRemoved"
	// ReasonSailUninstallDisabled: the holders record names the operator but
	// it runs with sail.install=false, so it leaves the installation alone.
	ReasonSailUninstallDisabled ConditionReason = "SailUninstallDisabled"
)

// Reasons of MTLSCutover.
const (
	ReasonAwaitingCutover ConditionReason = "AwaitingCutover"
	ReasonAwaitingEdge    ConditionReason = "AwaitingEdge"
	// ReasonHeldPermissive: enrolled namespaces are at PERMISSIVE for a
	// reason other than their workloads or edges (a maintenance window,
	// mtls.mode permissive, a data-plane migration, a control plane that
	// is not Ready, a paused policy); the message names each and why.
	ReasonHeldPermissive ConditionReason = "HeldPermissive"
	ReasonCutOver        ConditionReason = "CutOver"
	// ReasonForeignPeerAuthentication: in some enrolled namespace a
	// namespace-wide PeerAuthentication the operator does not own is older
	// than its mesh-mtls, so Istio applies that one's mode instead; also
	// the reason of the Warning event that names it.
	ReasonForeignPeerAuthentication ConditionReason = "ForeignPeerAuthentication"
)

// Reasons of DataPlaneMigration.
const (
	ReasonMigrating             ConditionReason = "Migrating"
	ReasonReleasingOldDataPlane ConditionReason = "ReleasingOldDataPlane"
	ReasonSettled               ConditionReason = "Settled"
)

// Reasons of EnrollmentConflict.
const (
	ReasonPolicyConflict ConditionReason = "PolicyConflict"
	ReasonNoConflict     ConditionReason = "NoConflict"
	// ReasonEnrollmentStepFailed / ReasonEnrollmentStepsSucceeded: EnrollmentFailed.
	ReasonEnrollmentStepFailed     ConditionReason = "EnrollmentStepFailed"
	ReasonEnrollmentStepsSucceeded ConditionReason = "EnrollmentStepsSucceeded"
)

// Reasons of StrictIsolation.
const (
	ReasonBaselineWithheld ConditionReason = "BaselineWithheld"
	ReasonBaselineInForce  ConditionReason = "BaselineInForce"
)

// Reasons of MaintenanceWindow.
const (
	ReasonWindowOpen  ConditionReason = "Open"
	ReasonWindowEnded ConditionReason = "Ended"
	ReasonNoWindow    ConditionReason = "NoWindow"
)

// Reasons of AmbientNetworkPolicy.
const (
	// ReasonNetworkPolicyBlocksAmbient: a namespace's NetworkPolicies
	// select Pods and admit neither HBONE from the peers they admit nor the
	// probe address; also the reason of the Warning event naming them.
	ReasonNetworkPolicyBlocksAmbient ConditionReason = "NetworkPolicyBlocksAmbient"
	// ReasonNetworkPolicyUnreadable (Unknown): a namespace's NetworkPolicies
	// could not be read, so it is held as it is.
	ReasonNetworkPolicyUnreadable ConditionReason = "NetworkPolicyUnreadable"
	// ReasonNetworkPoliciesAdmitAmbient: False, nothing stands in the way.
	ReasonNetworkPoliciesAdmitAmbient ConditionReason = "NetworkPoliciesAdmitAmbient"
)

// Reasons of NamespaceOptOut.
const (
	// ReasonNamespaceOptedOut: a namespace asked for is opted out by an
	// admin's label, which stands; also the reason of the Warning event
	// naming it.
	ReasonNamespaceOptedOut ConditionReason = "NamespaceOptedOut"
)
