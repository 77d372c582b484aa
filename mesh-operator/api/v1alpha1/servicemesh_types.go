package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SingletonName is the only accepted name of a ServiceMesh; any other is Refused.
const SingletonName = "cluster"

// Mode says how much of the Istio lifecycle the operator owns.
// +kubebuilder:validation:Enum=managed;adopt;external
type Mode string

const (
	// ModeManaged installs Istio through the Sail Operator, or adopts a mesh
	// that is already there.
	ModeManaged Mode = "managed"
	// ModeAdopt configures an existing mesh and never manages its lifecycle.
	ModeAdopt Mode = "adopt"
	// ModeExternal never touches the control plane; only our configuration is emitted.
	ModeExternal Mode = "external"
)

// Provider names who provides the Istio control plane.
// +kubebuilder:validation:Enum=auto;sail;openshift;istio
type Provider string

// Provider values.
const (
	ProviderAuto      Provider = "auto"
	ProviderSail      Provider = "sail"
	ProviderOpenShift Provider = "openshift"
	ProviderIstio     Provider = "istio"
)

// DataPlane is how workloads are meshed.
// +kubebuilder:validation:Enum=ambient;sidecar
type DataPlane string

// DataPlane values.
const (
	DataPlaneAmbient DataPlane = "ambient"
	DataPlaneSidecar DataPlane = "sidecar"
)

// MTLSMode is the namespace-wide PeerAuthentication mode enrolled namespaces end at.
// +kubebuilder:validation:Enum=strict;permissive
type MTLSMode string

// MTLSMode values.
const (
	MTLSStrict     MTLSMode = "strict"
	MTLSPermissive MTLSMode = "permissive"
)

// Isolation is the authorization the operator adds on top of mTLS.
// +kubebuilder:validation:Enum=off;namespace;strict
type Isolation string

// Isolation values.
const (
	IsolationOff       Isolation = "off"
	IsolationNamespace Isolation = "namespace"
	IsolationStrict    Isolation = "strict"
)

// MTLS configures mutual TLS for enrolled namespaces.
type MTLS struct {
	// Mode is STRICT (default) or PERMISSIVE, the escape hatch.
	// +kubebuilder:default=strict
	// +optional
	Mode MTLSMode `json:"mode,omitempty"`
	// MaintenanceUntil holds enrolled namespaces at PERMISSIVE until this
	// time, then STRICT is restored on its own.
	// +optional
	MaintenanceUntil *metav1.Time `json:"maintenanceUntil,omitempty"`
}

// ServiceMeshSpec is the desired mesh.
//
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || !has(self.provider) || self.mode != 'external' || self.provider != 'sail'",message="spec.provider sail installs or manages Istio through the Sail Operator, which mode external never does; use mode managed or adopt, or provider auto/istio"
type ServiceMeshSpec struct {
	// +kubebuilder:default=managed
	// +optional
	Mode Mode `json:"mode,omitempty"`
	// +kubebuilder:default=auto
	// +optional
	Provider Provider `json:"provider,omitempty"`
	// +kubebuilder:default=ambient
	// +optional
	DataPlane DataPlane `json:"dataPlane,omitempty"`
	// Version of Istio to install in managed mode, as MAJOR.MINOR or MAJOR.MINOR.PATCH.
	// +kubebuilder:validation:XValidation:rule="self.matches('^v?[0-9]+\\\\.[0-9]+(\\\\.[0-9]+)?$')",message="spec.version must look like 1.30 or 1.30.2"
	// +optional
	Version string `json:"version,omitempty"`
	// +kubebuilder:default={mode: strict}
	// +optional
	MTLS MTLS `json:"mtls,omitempty"`
	// +kubebuilder:default=namespace
	// +optional
	Isolation Isolation `json:"isolation,omitempty"`
	// ControlPlaneNamespace is the namespace whose istiod the mesh may
	// adopt or observe (modes adopt and external, and managed before its
	// own Istio exists). An istiod Deployment counts as a control plane
	// only where a tenant cannot fake one: in this namespace, in the
	// namespace of a Sail Istio, or in a namespace an Istio
	// sidecar-injector MutatingWebhookConfiguration points at (both
	// cluster-scoped, an admin's to create). When several namespaces hold
	// such a control plane, this one is chosen if it is among them;
	// otherwise the mesh is Blocked with AmbiguousControlPlane. The
	// operator's own Istio (mode managed) runs in istio-system.
	// +kubebuilder:default=istio-system
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	ControlPlaneNamespace string `json:"controlPlaneNamespace,omitempty"`
	// EnrollNamespaces are enrolled in addition to every namespace labelled
	// for enrollment.
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.all(n, n.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",message="spec.enrollNamespaces must hold namespace names (DNS labels)"
	// +listType=set
	// +optional
	EnrollNamespaces []string `json:"enrollNamespaces,omitempty"`
}

// ServiceMeshStatus is the observed mesh.
type ServiceMeshStatus struct {
	// ObservedGeneration is the metadata.generation of the spec this status
	// was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, ControlPlaneReady, PreconditionNotMet, PreviewLocked,
	// Refused, Reconciling, Stalled, MTLSCutover, MaintenanceWindow, StrictIsolation.
	// See docs/servicemesh.md.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Phase is a one-word summary for kubectl get.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Provider the operator detected or was told to use: sail, openshift
	// (OpenShift Service Mesh 3), istio (plain istiod) or maistra (OpenShift
	// Service Mesh 2.x, deferred).
	// +optional
	Provider string `json:"provider,omitempty"`
	// EnrolledNamespaces the operator has configured (data-plane label,
	// PeerAuthentication, isolation policy and state labels in place).
	// +listType=set
	// +optional
	EnrolledNamespaces []string `json:"enrolledNamespaces,omitempty"`
	// PermissiveNamespaces are the enrolled namespaces currently at
	// PERMISSIVE mTLS: waiting for the STRICT cutover (their workloads do not
	// all run a proxy yet), held by a maintenance window, or by mtls.mode.
	// +listType=set
	// +optional
	PermissiveNamespaces []string `json:"permissiveNamespaces,omitempty"`
	// MaintenanceUntil is the end of the maintenance window in force
	// (spec.mtls.maintenanceUntil while it lies in the future); STRICT is
	// restored at that time without any other event.
	// +optional
	MaintenanceUntil *metav1.Time `json:"maintenanceUntil,omitempty"`
	// PausedObjects are managed objects carrying the
	// core.navique.com/reconcile-paused annotation, as Kind/namespace/name;
	// the operator does not revert them.
	// +listType=set
	// +optional
	PausedObjects []string `json:"pausedObjects,omitempty"`
	// Detected is what the last detection observed in the cluster.
	// +optional
	Detected *DetectedEnvironment `json:"detected,omitempty"`
	// ControlPlane is the Istio control plane the mesh uses. Namespace
	// enrollment reads it (revision, data plane) once Ready is True.
	// +optional
	ControlPlane *ControlPlaneStatus `json:"controlPlane,omitempty"`
	// SailOperator says where the Sail Operator comes from and, when this
	// operator installed it, which chart version and who else holds it.
	// +optional
	SailOperator *SailOperatorStatus `json:"sailOperator,omitempty"`
}

// Platform values of DetectedEnvironment.Platform.
const (
	PlatformKubernetes = "Kubernetes"
	PlatformOpenShift  = "OpenShift"
)

// DetectedEnvironment is what detection found. Every field comes from API
// discovery or a targeted read; nothing is inferred from names users choose.
type DetectedEnvironment struct {
	// Platform is Kubernetes or OpenShift.
	// +optional
	Platform string `json:"platform,omitempty"`
	// SailAPI: the sailoperator.io API is served (the Sail Operator or
	// OpenShift Service Mesh 3 is installed).
	// +optional
	SailAPI bool `json:"sailAPI,omitempty"`
	// IstioAPI: the security.istio.io API (PeerAuthentication,
	// AuthorizationPolicy) is served.
	// +optional
	IstioAPI bool `json:"istioAPI,omitempty"`
	// Maistra: OpenShift Service Mesh 2.x (servicemeshcontrolplanes.maistra.io) is installed.
	// +optional
	Maistra bool `json:"maistra,omitempty"`
	// Cilium: the cilium DaemonSet in kube-system or the cilium.io CRDs exist.
	// +optional
	Cilium bool `json:"cilium,omitempty"`
	// Istiods lists the istiod Deployments (label app=istiod) found, as
	// namespace/name@revision.
	// +listType=atomic
	// +optional
	Istiods []string `json:"istiods,omitempty"`
	// IgnoredIstiods are the istiod Deployments found in namespaces that
	// no admin-only object names as a control plane's (not
	// spec.controlPlaneNamespace, no Sail Istio, no Istio sidecar-injector
	// webhook points there): anyone who may create a Deployment there
	// could have made them, so they are never chosen.
	// +listType=atomic
	// +optional
	IgnoredIstiods []string `json:"ignoredIstiods,omitempty"`
}

// Management says how much of the control plane's lifecycle the operator owns.
type Management string

// Management values.
const (
	// ManagementManaged: the operator created the control plane (Sail CRs) and removes it on delete.
	ManagementManaged Management = "Managed"
	// ManagementAdopted: the control plane existed; the operator uses it and never changes it.
	ManagementAdopted Management = "Adopted"
	// ManagementExternal: mode external; the control plane is not touched (and may not be visible).
	ManagementExternal Management = "External"
)

// ControlPlaneStatus describes the control plane in use.
type ControlPlaneStatus struct {
	// Management is Managed, Adopted or External.
	// +optional
	Management Management `json:"management,omitempty"`
	// Namespace istiod runs in.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Revision to select the control plane with (istio.io/rev); "default"
	// means the istio-injection=enabled label works.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Version of Istio as the provider reports it (Sail spec.version or the istiod image tag).
	// +optional
	Version string `json:"version,omitempty"`
	// DataPlane the control plane is set up for: ambient or sidecar.
	// +optional
	DataPlane DataPlane `json:"dataPlane,omitempty"`
	// Resources the operator reads readiness from, as Kind/name
	// (Istio/default, IstioCNI/default, ZTunnel/default, Deployment/ns/name).
	// +listType=atomic
	// +optional
	Resources []string `json:"resources,omitempty"`
}

// SailSource says where the Sail Operator comes from.
type SailSource string

// SailSource values.
const (
	// SailInstalled: installed from the Helm chart by a holder listed in the
	// holders record (this operator or another tool using the same record).
	SailInstalled SailSource = "Installed"
	// SailPreinstalled: present without a holders record (OLM, OpenShift
	// Service Mesh 3, a user's Helm release); never uninstalled by the operator.
	SailPreinstalled SailSource = "Preinstalled"
	// SailAbsent: not installed.
	SailAbsent SailSource = "Absent"
)

// SailOperatorStatus describes the Sail Operator installation.
type SailOperatorStatus struct {
	// Source is Installed, Preinstalled or Absent.
	// +optional
	Source SailSource `json:"source,omitempty"`
	// Namespace of the Helm release.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// ChartVersion of the installed release.
	// +optional
	ChartVersion string `json:"chartVersion,omitempty"`
	// Holders are the keys of the holders record: everyone who needs the
	// installation. It is uninstalled when the last one leaves.
	// +listType=atomic
	// +optional
	Holders []string `json:"holders,omitempty"`
}

// ServiceMesh is the cluster's single mesh: mTLS and tenant isolation with Istio.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=smesh,categories=navique
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Data plane",type=string,JSONPath=`.spec.dataPlane`
// +kubebuilder:printcolumn:name="mTLS",type=string,JSONPath=`.spec.mtls.mode`
// +kubebuilder:printcolumn:name="Isolation",type=string,JSONPath=`.spec.isolation`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.status.provider`,priority=1
// +kubebuilder:printcolumn:name="Management",type=string,JSONPath=`.status.controlPlane.management`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.controlPlane.version`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceMesh struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec   ServiceMeshSpec   `json:"spec,omitempty"`
	Status ServiceMeshStatus `json:"status,omitempty"`
}

// ServiceMeshList is a list of ServiceMeshes.
//
// +kubebuilder:object:root=true
type ServiceMeshList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceMesh `json:"items"`
}
