package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CelldFleetSpec is the desired state of a fleet of celld members.
//
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(oldSelf.storage) || quantity(string(self.storage.size)).compareTo(quantity(string(oldSelf.storage.size))) >= 0",message="spec.storage.size can only grow: shrinking a member's disk would lose data"
// +kubebuilder:validation:XValidation:rule="has(self.storage) == has(oldSelf.storage)",message="spec.storage cannot be added to or removed from an existing fleet: members would lose or change their disks; create a new fleet instead"
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(oldSelf.storage) || (has(self.storage.storageClassName) == has(oldSelf.storage.storageClassName) && (!has(self.storage.storageClassName) || self.storage.storageClassName == oldSelf.storage.storageClassName))",message="spec.storage.storageClassName is immutable: existing disks cannot move to another storage class"
type CelldFleetSpec struct {
	// Replicas is the number of members.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Image is the celld runtime image every member runs.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:XValidation:rule="!self.contains(' ')",message="spec.image must not contain spaces"
	Image string `json:"image"`

	// ImagePullPolicy for the celld container.
	// +kubebuilder:default=IfNotPresent
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Resources of the celld container.
	// The quantities of the resources a container names most are checked
	// (those of every key would be over the API server's CEL cost budget:
	// a quantity's length is unbounded).
	// +kubebuilder:validation:XValidation:rule="['cpu', 'memory', 'ephemeral-storage'].all(r, (!has(self.limits) || !(r in self.limits) || !quantity(string(self.limits[r])).isLessThan(quantity('0'))) && (!has(self.requests) || !(r in self.requests) || !quantity(string(self.requests[r])).isLessThan(quantity('0'))))",message="spec.resources quantities must not be negative (the members' StatefulSet would be refused)"
	// +kubebuilder:validation:XValidation:rule="!has(self.limits) || !has(self.requests) || ['cpu', 'memory', 'ephemeral-storage'].all(r, !(r in self.limits) || !(r in self.requests) || !quantity(string(self.limits[r])).isLessThan(quantity(string(self.requests[r]))))",message="spec.resources.requests must not exceed spec.resources.limits for the same resource (the members' StatefulSet would be refused)"
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Env is extra environment for the celld container. Names starting with
	// CELLD_ are reserved for settings the operator hands to members.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(e, !e.name.startsWith('CELLD_'))",message="spec.env names starting with CELLD_ are reserved for the operator (peer addresses, object storage); set those through spec fields"
	// +listType=map
	// +listMapKey=name
	// +optional
	Env []corev1.EnvVar `json:"env,omitempty"`

	// ServiceAccountName the members run as. Empty means the operator creates
	// and uses a ServiceAccount named after the fleet. With EKS Pod Identity
	// the association is made for this ServiceAccount; credentials never come
	// from the spec.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="spec.serviceAccountName must be a DNS subdomain name (lowercase letters, digits, '-' and '.')"
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// PodTemplate carries extra labels and annotations for member Pods, and
	// their security contexts. Keys the operator manages itself are rejected.
	// +optional
	PodTemplate PodTemplateMetadata `json:"podTemplate,omitempty"`

	// Scheduling places members on nodes.
	// +optional
	Scheduling Scheduling `json:"scheduling,omitempty"`

	// Storage gives every member a PersistentVolumeClaim that survives
	// restarts, rolls and mesh changes. A fleet without storage keeps member
	// state on an emptyDir and loses it when a Pod is replaced.
	// +optional
	Storage *Storage `json:"storage,omitempty"`

	// ObjectStorage is where members write their snapshots.
	// +optional
	ObjectStorage *ObjectStorage `json:"objectStorage,omitempty"`

	// Maintenance controls runtime lifecycle work.
	// +optional
	Maintenance Maintenance `json:"maintenance,omitempty"`

	// Routing lets the operator manage the application route (Gateway API
	// HTTPRoute or Ingress) and a narrowly scoped ingress policy for it.
	// Routing changes never restart members and continue while maintenance
	// is paused.
	// +optional
	Routing *Routing `json:"routing,omitempty"`

	// Mesh puts the members into a service mesh. Adding or removing it on a
	// running fleet rolls the members one at a time, keeping their disks.
	// +optional
	Mesh *Mesh `json:"mesh,omitempty"`
}

// Routing is the fleet's application route: exactly one of gateway or ingress.
// +kubebuilder:validation:XValidation:rule="has(self.gateway) != has(self.ingress)",message="spec.routing needs exactly one of gateway or ingress; to switch modes replace the whole routing block (or remove the old mode explicitly in a merge patch)"
type Routing struct {
	// Hostnames the route serves; wildcards such as *.example.com are allowed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// Two labels at least (after an optional "*."), each at most 63
	// characters, the last not all digits: Ingress refuses IP addresses,
	// and a single label is not a name a Gateway or DNS can serve.
	// +kubebuilder:validation:XValidation:rule="self.all(h, h.matches('^([*][.])?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)+$') && !h.matches('[.][0-9]+$'))",message="spec.routing.hostnames must be DNS names such as app.example.com or *.example.com (lowercase, no port, no IP address, at least two labels of at most 63 characters)"
	// +listType=set
	Hostnames []string `json:"hostnames"`
	// Gateway routes through a Gateway API Gateway with an HTTPRoute.
	// +optional
	Gateway *GatewayRouting `json:"gateway,omitempty"`
	// Ingress routes through an Ingress controller.
	// +optional
	Ingress *IngressRouting `json:"ingress,omitempty"`
	// Source names the Pods that carry the routed traffic into the fleet
	// (the Gateway's or ingress controller's data plane). The FLEET-routing
	// NetworkPolicy admits TCP 8080 from exactly these.
	Source RoutingSource `json:"source"`
}

// GatewayRouting names the parent Gateway (and listener) of the HTTPRoute.
type GatewayRouting struct {
	// Name of the Gateway the fleet's HTTPRoute attaches to (its parentRef).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Namespace of the Gateway; empty means the fleet's namespace. A Gateway
	// in another namespace must admit the fleet namespace in its listener's
	// allowedRoutes.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.routing.gateway.namespace must be a namespace name (a DNS label: lowercase letters, digits and '-')"
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// SectionName selects one listener of the Gateway.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.routing.gateway.sectionName must be a listener name as the Gateway API allows it (lowercase letters, digits, '-' and '.')"
	// +optional
	SectionName string `json:"sectionName,omitempty"`
}

// IngressRouting configures an Ingress.
type IngressRouting struct {
	// ClassName is the IngressClass (spec.ingressClassName).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.routing.ingress.className must be a DNS subdomain name (lowercase letters, digits, '-' and '.'), as IngressClass names are"
	ClassName string `json:"className"`
	// TLSSecretName in the fleet namespace should cover every hostname;
	// empty means HTTP only.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="spec.routing.ingress.tlsSecretName must be a DNS subdomain name (lowercase letters, digits, '-' and '.'), as Secret names are"
	// +optional
	TLSSecretName string `json:"tlsSecretName,omitempty"`
	// Annotations for the Ingress controller (privileged configuration:
	// follow your admission policy). The operator writes only the keys its
	// administrator allows (chart value routing.allowedIngressAnnotations);
	// others are left out and reported in RoutingReady. Removing one here
	// removes it from the Ingress; annotations other controllers set are kept.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="spec.routing.ingress.annotations keys must be valid annotation keys: an optional DNS subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' and '.' that starts and ends with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="!('kubernetes.io/ingress.class' in self)",message="the legacy kubernetes.io/ingress.class annotation is rejected: use spec.routing.ingress.className"
	// The operator writes these with its own rights, so admission policies
	// keyed on the requesting user never see them: configuration injection
	// (any controller's *-snippet) and ingress-nginx external authentication,
	// which sends every request's headers to a URL the fleet author picks.
	// docs/security.md "Ingress annotations".
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.endsWith('-snippet'))",message="spec.routing.ingress.annotations ending in -snippet are refused: they inject controller configuration, which the operator would write with its own rights (docs/security.md)"
	// +kubebuilder:validation:XValidation:rule="!('nginx.ingress.kubernetes.io/auth-url' in self) && !('nginx.ingress.kubernetes.io/auth-signin' in self)",message="spec.routing.ingress.annotations nginx.ingress.kubernetes.io/auth-url and auth-signin are refused: they send requests to a URL of the fleet author's choosing, with the operator's rights (docs/security.md)"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RoutingSource selects the Pods that send routed traffic.
type RoutingSource struct {
	// Namespace of the data-plane Pods that carry routed traffic into the
	// fleet (the Gateway's or ingress controller's namespace).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.routing.source.namespace must be a namespace name (a DNS label: lowercase letters, digits and '-')"
	Namespace string `json:"namespace"`
	// PodLabels of the data-plane Pods (not necessarily the controller's).
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && k.matches('^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?([.][a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="spec.routing.source.podLabels keys must be valid label keys: an optional DNS subdomain prefix and '/', then a name of at most 63 letters, digits, '-', '_' and '.' that starts and ends with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].matches('^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$'))",message="spec.routing.source.podLabels values must be valid label values: at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	PodLabels map[string]LabelValue `json:"podLabels"`
}

// LabelValue is a label value (of a selector, a Pod template's labels, a
// node selector). Its bound is what keeps the CEL rules that check the
// values of a map of them (each map its own rule and message) within the
// API server's cost budget; a value breaking them would be refused by the
// object the operator builds from it (NetworkPolicy, StatefulSet).
// +kubebuilder:validation:MaxLength=63
type LabelValue string

// MeshMode says how a fleet relates to a mesh the namespace may be enrolled in.
// +kubebuilder:validation:Enum=auto;enabled;disabled
type MeshMode string

const (
	// MeshAuto requests the namespace's enrollment and joins when a Ready
	// mesh enrolls it; elsewhere (no mesh, or an admin's opt-out) nothing
	// changes.
	MeshAuto MeshMode = "auto"
	// MeshEnabled requests the namespace's enrollment as auto does, and
	// reports that it waits for it.
	MeshEnabled MeshMode = "enabled"
	// MeshDisabled never joins: member Pods opt out of injection and ambient capture.
	MeshDisabled MeshMode = "disabled"
)

// Mesh selects the service mesh integration.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'disabled' || !has(self.istio)",message="spec.mesh.mode disabled cannot be combined with spec.mesh.istio: remove one of them"
type Mesh struct {
	// Mode is auto (default: request the namespace's enrollment and join
	// when a Ready mesh enrolls it, no-op otherwise), enabled (the same,
	// reporting AwaitingEnrollment until enrolled) or disabled (never join).
	// An admin's core.navique.com/mesh=disabled on the namespace wins.
	// +kubebuilder:default=auto
	// +optional
	Mode MeshMode `json:"mode,omitempty"`
	// Istio integrates the members with an Istio sidecar mesh, for STRICT
	// mTLS and Istio authorization.
	// +optional
	Istio *IstioMesh `json:"istio,omitempty"`
}

// ApplicationAccess says who may call the application port inside the mesh.
// +kubebuilder:validation:Enum=AllowAll;Policies
type ApplicationAccess string

const (
	// AllowAll admits port 8080 from any caller, as outside the mesh.
	AllowAll ApplicationAccess = "AllowAll"
	// Policies leaves port 8080 to AuthorizationPolicies of the user's own:
	// Istio denies it until one allows the caller.
	Policies ApplicationAccess = "Policies"
)

// IstioMesh configures the Istio sidecar integration. Both fields are
// mutable and change only policies, never the members.
type IstioMesh struct {
	// ControlPlaneNamespace is where istiod runs; members may reach istiod
	// Pods there on TCP 15012.
	// +kubebuilder:default=istio-system
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.mesh.istio.controlPlaneNamespace must be a namespace name"
	// +optional
	ControlPlaneNamespace string `json:"controlPlaneNamespace,omitempty"`
	// ApplicationAccess is AllowAll (default) or Policies.
	// +kubebuilder:default=AllowAll
	// +optional
	ApplicationAccess ApplicationAccess `json:"applicationAccess,omitempty"`
}

// PodTemplateMetadata is what the user adds to the member Pod template:
// metadata and security contexts.
type PodTemplateMetadata struct {
	// Labels added to every member Pod. The operator's own prefixes
	// (celld.eric.dev/, app.kubernetes.io/) are refused: it selects members
	// by them. Changing them replaces every member, one at a time.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('celld.eric.dev/') && !k.startsWith('app.kubernetes.io/'))",message="spec.podTemplate.labels may not use the celld.eric.dev/ or app.kubernetes.io/ prefixes: the operator selects members by them"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!k.contains('/') || k.indexOf('/') <= 253))",message="spec.podTemplate.labels keys must be label keys: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of at most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit (the members' StatefulSet would be refused)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'))",message="spec.podTemplate.labels values must be label values: empty, or at most 63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit (the members' StatefulSet would be refused)"
	// +optional
	Labels map[string]LabelValue `json:"labels,omitempty"`
	// +kubebuilder:validation:MaxProperties=64
	// Annotations added to every member Pod (the celld.eric.dev/ prefix is
	// the operator's). Changing them replaces every member, one at a time.
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('celld.eric.dev/'))",message="spec.podTemplate.annotations may not use the celld.eric.dev/ prefix: the operator owns it"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!k.contains('/') || k.indexOf('/') <= 253))",message="spec.podTemplate.annotations keys must be an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of at most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit (the members' StatefulSet would be refused)"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// SecurityContext is the member Pods' securityContext. Unset, members
	// run as UID and GID 65532 with fsGroup 65532 (the celld image's user),
	// runAsNonRoot and the RuntimeDefault seccomp profile: what Pod Security
	// "restricted" asks. Set, it is used as written (so {} lets the platform
	// assign the user and fsGroup, as OpenShift's restricted-v2 does), and
	// only runAsNonRoot (true) and seccompProfile (RuntimeDefault) are
	// filled in where it leaves them unset. The CRD refuses only what the
	// Pod API refuses; whether the namespace's Pod Security level admits
	// the result is reported in the Provisioning condition.
	// +kubebuilder:validation:XValidation:rule="[has(self.runAsUser) ? self.runAsUser : 0, has(self.runAsGroup) ? self.runAsGroup : 0, has(self.fsGroup) ? self.fsGroup : 0].all(id, id >= 0 && id <= 2147483647)",message="spec.podTemplate.securityContext runAsUser, runAsGroup and fsGroup must be between 0 and 2147483647"
	// +kubebuilder:validation:XValidation:rule="!has(self.supplementalGroups) || size(self.supplementalGroups) == 0 || (self.supplementalGroups.min() >= 0 && self.supplementalGroups.max() <= 2147483647)",message="spec.podTemplate.securityContext.supplementalGroups must be between 0 and 2147483647"
	// +kubebuilder:validation:XValidation:rule="!has(self.fsGroupChangePolicy) || self.fsGroupChangePolicy in ['OnRootMismatch', 'Always']",message="spec.podTemplate.securityContext.fsGroupChangePolicy must be OnRootMismatch or Always"
	// +kubebuilder:validation:XValidation:rule="!has(self.supplementalGroupsPolicy) || self.supplementalGroupsPolicy in ['Merge', 'Strict']",message="spec.podTemplate.securityContext.supplementalGroupsPolicy must be Merge or Strict"
	// +kubebuilder:validation:XValidation:rule="!has(self.seLinuxChangePolicy) || self.seLinuxChangePolicy in ['MountOption', 'Recursive']",message="spec.podTemplate.securityContext.seLinuxChangePolicy must be MountOption or Recursive"
	// +kubebuilder:validation:XValidation:rule="!has(self.seccompProfile) || (self.seccompProfile.type in ['RuntimeDefault', 'Unconfined', 'Localhost'] && (self.seccompProfile.type == 'Localhost') == has(self.seccompProfile.localhostProfile))",message="spec.podTemplate.securityContext.seccompProfile.type must be RuntimeDefault, Unconfined or Localhost, and localhostProfile is required with Localhost and forbidden otherwise"
	// +kubebuilder:validation:XValidation:rule="!has(self.appArmorProfile) || (self.appArmorProfile.type in ['RuntimeDefault', 'Unconfined', 'Localhost'] && (self.appArmorProfile.type == 'Localhost') == has(self.appArmorProfile.localhostProfile))",message="spec.podTemplate.securityContext.appArmorProfile.type must be RuntimeDefault, Unconfined or Localhost, and localhostProfile is required with Localhost and forbidden otherwise"
	// +kubebuilder:validation:XValidation:rule="!has(self.windowsOptions) || !has(self.windowsOptions.hostProcess) || !self.windowsOptions.hostProcess",message="spec.podTemplate.securityContext.windowsOptions.hostProcess cannot be true: members are not host processes (the Pod API needs hostNetwork for it)"
	// +optional
	SecurityContext *corev1.PodSecurityContext `json:"securityContext,omitempty"`

	// ContainerSecurityContext is the celld container's securityContext.
	// Unset, it is allowPrivilegeEscalation false with every capability
	// dropped. Set, it is used as written, with allowPrivilegeEscalation
	// (false, unless privileged or adding CAP_SYS_ADMIN, which the Pod API
	// refuses together) and capabilities.drop (ALL) filled in where it
	// leaves them unset.
	// +kubebuilder:validation:XValidation:rule="[has(self.runAsUser) ? self.runAsUser : 0, has(self.runAsGroup) ? self.runAsGroup : 0].all(id, id >= 0 && id <= 2147483647)",message="spec.podTemplate.containerSecurityContext runAsUser and runAsGroup must be between 0 and 2147483647"
	// +kubebuilder:validation:XValidation:rule="!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation || !(has(self.privileged) && self.privileged)",message="spec.podTemplate.containerSecurityContext: privileged true cannot be combined with allowPrivilegeEscalation false"
	// +kubebuilder:validation:XValidation:rule="!has(self.allowPrivilegeEscalation) || self.allowPrivilegeEscalation || !has(self.capabilities) || !has(self.capabilities.add) || !self.capabilities.add.exists(c, c == 'CAP_SYS_ADMIN')",message="spec.podTemplate.containerSecurityContext: adding CAP_SYS_ADMIN cannot be combined with allowPrivilegeEscalation false"
	// +kubebuilder:validation:XValidation:rule="!has(self.procMount) || self.procMount == 'Default'",message="spec.podTemplate.containerSecurityContext.procMount must be Default: Unmasked needs a user namespace (hostUsers false), which members do not use"
	// +kubebuilder:validation:XValidation:rule="!has(self.seccompProfile) || (self.seccompProfile.type in ['RuntimeDefault', 'Unconfined', 'Localhost'] && (self.seccompProfile.type == 'Localhost') == has(self.seccompProfile.localhostProfile))",message="spec.podTemplate.containerSecurityContext.seccompProfile.type must be RuntimeDefault, Unconfined or Localhost, and localhostProfile is required with Localhost and forbidden otherwise"
	// +kubebuilder:validation:XValidation:rule="!has(self.appArmorProfile) || (self.appArmorProfile.type in ['RuntimeDefault', 'Unconfined', 'Localhost'] && (self.appArmorProfile.type == 'Localhost') == has(self.appArmorProfile.localhostProfile))",message="spec.podTemplate.containerSecurityContext.appArmorProfile.type must be RuntimeDefault, Unconfined or Localhost, and localhostProfile is required with Localhost and forbidden otherwise"
	// +kubebuilder:validation:XValidation:rule="!has(self.windowsOptions) || !has(self.windowsOptions.hostProcess) || !self.windowsOptions.hostProcess",message="spec.podTemplate.containerSecurityContext.windowsOptions.hostProcess cannot be true: members are not host processes (the Pod API needs hostNetwork for it)"
	// +optional
	ContainerSecurityContext *corev1.SecurityContext `json:"containerSecurityContext,omitempty"`
}

// Scheduling are the usual Pod placement knobs, passed through to members.
type Scheduling struct {
	// NodeSelector restricts members to nodes carrying all these labels
	// (the Pod's nodeSelector).
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!k.contains('/') || k.indexOf('/') <= 253))",message="spec.scheduling.nodeSelector keys must be label keys: an optional DNS subdomain prefix (at most 253 characters) and '/', then a name of at most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit (the members' StatefulSet would be refused)"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'))",message="spec.scheduling.nodeSelector values must be label values: empty, or at most 63 letters, digits, '-', '_' or '.' starting and ending with a letter or digit (the members' StatefulSet would be refused)"
	// +optional
	NodeSelector map[string]LabelValue `json:"nodeSelector,omitempty"`
	// The rules below are the Pod's own validation of a toleration, so that
	// a fleet the members' StatefulSet would refuse is refused at admission.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.key) || t.key == '' || (t.key.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!t.key.contains('/') || t.key.indexOf('/') <= 253)))",message="spec.scheduling.tolerations[].key must be a label key (an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.')"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.value) || t.value.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'))",message="spec.scheduling.tolerations[].value must be a label value (at most 63 letters, digits, '-', '_' or '.')"
	// +kubebuilder:validation:XValidation:rule="self.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))",message="spec.scheduling.tolerations[] without a key must have operator Exists (it then tolerates every taint)"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",message="spec.scheduling.tolerations[] with operator Exists must have no value"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="spec.scheduling.tolerations[].effect must be NoSchedule, PreferNoSchedule, NoExecute or empty (every effect)"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",message="spec.scheduling.tolerations[].tolerationSeconds needs effect NoExecute"
	// +optional
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// TopologySpreadConstraints spread members across zones or nodes (the
	// Pod's topologySpreadConstraints; select members by the label
	// app.kubernetes.io/instance: FLEET).
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// PriorityClassName of the member Pods; the PriorityClass must exist.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// TerminationGracePeriodSeconds gives celld time to hand its work to
	// peers on SIGTERM.
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// Toleration is a member Pod's toleration (corev1.Toleration), with the
// lengths the Pod's validation allows: they keep the CEL rules on
// spec.scheduling.tolerations within the API server's cost budget.
type Toleration struct {
	// Key is the taint key the toleration applies to; empty matches every
	// key (then operator must be Exists).
	// +kubebuilder:validation:MaxLength=317
	// +optional
	Key string `json:"key,omitempty"`
	// Operator is Exists or Equal (the default), or Lt or Gt for numeric
	// taint values where the cluster supports them.
	// +optional
	Operator corev1.TolerationOperator `json:"operator,omitempty"`
	// Value is the taint value the toleration matches (empty for Exists).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Value string `json:"value,omitempty"`
	// Effect is the taint effect to match; empty matches every effect.
	// +optional
	Effect corev1.TaintEffect `json:"effect,omitempty"`
	// TolerationSeconds bounds how long a NoExecute taint is tolerated.
	// +optional
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

// RetentionPolicy says what happens to member disks.
// +kubebuilder:validation:Enum=Retain;Delete
type RetentionPolicy string

const (
	// Retain keeps the PersistentVolumeClaims.
	Retain RetentionPolicy = "Retain"
	// Delete removes the PersistentVolumeClaims.
	Delete RetentionPolicy = "Delete"
)

// Storage is a persistent fleet's per-member disk.
type Storage struct {
	// Size of each member's disk. It can grow (where the storage class
	// allows expansion) but never shrink.
	// +kubebuilder:validation:XValidation:rule="isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('1Mi')) >= 0",message="spec.storage.size must be at least 1Mi"
	Size resource.Quantity `json:"size"`

	// StorageClassName for the claims; empty uses the cluster default.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// WhenScaledDown says what happens to the disks of members removed by
	// lowering replicas. Retain (default) keeps them, so scaling back up
	// gives the member its old disk.
	// +kubebuilder:default=Retain
	// +optional
	WhenScaledDown RetentionPolicy `json:"whenScaledDown,omitempty"`

	// WhenDeleted says what happens to the disks when the fleet is deleted.
	// Retain (default) leaves the claims behind, unowned, for recovery.
	// +kubebuilder:default=Retain
	// +optional
	WhenDeleted RetentionPolicy `json:"whenDeleted,omitempty"`
}

// ObjectStorage locates the S3 bucket for snapshots. Credentials are not
// configured here: members get them from EKS Pod Identity.
type ObjectStorage struct {
	// Bucket is the S3 bucket holding the fleet's snapshots (members get it
	// as CELLD_S3_BUCKET).
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$')",message="spec.objectStorage.bucket must be a valid S3 bucket name (lowercase letters, digits, '.' and '-')"
	Bucket string `json:"bucket"`
	// Region of the bucket, e.g. eu-west-1 (members get it as
	// CELLD_S3_REGION).
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z]{2}(-[a-z]+)+-[0-9]+$')",message="spec.objectStorage.region must look like an AWS region, e.g. eu-west-1"
	Region string `json:"region"`
	// Prefix under which this fleet's snapshots live.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="spec.objectStorage.prefix must not start with '/'"
	// +optional
	Prefix string `json:"prefix,omitempty"`
}

// Maintenance pauses runtime lifecycle work.
type Maintenance struct {
	// Paused stops member restarts and rolls. Services, NetworkPolicies,
	// mesh policies and routing are still reconciled.
	// +optional
	Paused bool `json:"paused,omitempty"`
}

// MemberStatus is what the operator last saw of one member.
type MemberStatus struct {
	// Name of the member Pod.
	Name string `json:"name"`
	// Ready is the Pod's Ready condition.
	Ready bool `json:"ready"`
	// Revision of the Pod template the member runs.
	// +optional
	Revision string `json:"revision,omitempty"`
	// PeerAddress is what the member advertises to its peers.
	// +optional
	PeerAddress string `json:"peerAddress,omitempty"`
	// PersistentVolumeClaim backing the member, for persistent fleets.
	// +optional
	PersistentVolumeClaim string `json:"persistentVolumeClaim,omitempty"`
	// Proxy is true when the member Pod runs an istio-proxy container.
	// +optional
	Proxy bool `json:"proxy,omitempty"`
	// State is the member's /state report, or why it could not be read.
	// +optional
	State *MemberState `json:"state,omitempty"`
}

// MemberState is the part of a member's /state response the operator publishes.
type MemberState struct {
	// Reachable is false when the last /state read failed.
	Reachable bool `json:"reachable"`
	// Error explains a failed read.
	// +optional
	Error string `json:"error,omitempty"`
	// Healthy is the runtime's own health verdict.
	// +optional
	Healthy bool `json:"healthy,omitempty"`
	// Phase is the runtime's application status, e.g. Serving or Recovering.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Version the runtime reports.
	// +optional
	Version string `json:"version,omitempty"`
	// CellsUsed is the capacity sample the runtime reports: cells in use.
	// +optional
	CellsUsed *int64 `json:"cellsUsed,omitempty"`
	// CellsTotal is the capacity sample the runtime reports: cells in all.
	// +optional
	CellsTotal *int64 `json:"cellsTotal,omitempty"`
	// Since is when the operator first saw this report (or error) unchanged.
	// A timestamp of every read would rewrite status on each poll.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// CelldFleetStatus is the observed state of a fleet.
type CelldFleetStatus struct {
	// ObservedGeneration is the spec generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Provisioning, InfrastructureBlocked, DisksResized, MeshReady, RoutingReady, Reconciled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Replicas is the number of member Pods that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of Ready members.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// UpdatedReplicas is the number of members on the target revision.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// CurrentRevision is the revision every member ran before the current roll.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`
	// TargetRevision is the revision the spec asks for.
	// +optional
	TargetRevision string `json:"targetRevision,omitempty"`
	// Members, in ordinal order.
	// +listType=map
	// +listMapKey=name
	// +optional
	Members []MemberStatus `json:"members,omitempty"`
	// Phase is a one-word summary for kubectl get.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Mesh is the fleet's place in the mesh: Joining, Meshed, Leaving or Left
	// (empty for a fleet that was never meshed).
	// +optional
	Mesh string `json:"mesh,omitempty"`
}

// CelldFleet runs a fleet of celld members with their disks, Services and
// NetworkPolicies.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas
// +kubebuilder:resource:shortName=cf;fleet,categories=celld
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Mesh",type=string,JSONPath=`.status.mesh`,priority=1
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.maintenance.paused`,priority=1
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label starting with a letter (lowercase letters, digits and '-'): it names the fleet's Services"
// +kubebuilder:validation:XValidation:rule="!self.metadata.name.endsWith('-peers') && !self.metadata.name.endsWith('-routing')",message="metadata.name must not end in -peers or -routing: fleet NAME owns NAME-peers (its peer Service) and NAME-routing (its route and routing policy), so such a fleet would collide with another fleet's objects"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 47",message="metadata.name must be at most 47 characters: the operator derives Service and Pod names such as NAME-peers and NAME-routing from it"
type CelldFleet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   CelldFleetSpec   `json:"spec"`
	Status CelldFleetStatus `json:"status,omitempty"`
}

// CelldFleetList is a list of CelldFleets.
//
// +kubebuilder:object:root=true
type CelldFleetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CelldFleet `json:"items"`
}
