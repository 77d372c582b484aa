// Package labels is the one place that spells the label and annotation keys
// the operators write or read. Both operators and their tests use these
// constants; no other package spells a key.
package labels

// Keys owned by the fleet operator (group celld.eric.dev).
const (
	// FleetGroup is the fleet operator's API group and label prefix.
	FleetGroup = "celld.eric.dev"

	// Fleet marks a member Pod with the name of its fleet. Users select
	// members with it in their own policies.
	Fleet = FleetGroup + "/fleet"
	// ClientOf marks a Pod as a client of the named fleet in the same
	// namespace; the fleet's NetworkPolicy admits application traffic from it.
	ClientOf = FleetGroup + "/client-of"
	// IstioControlPlane is the fleet annotation recording the control-plane
	// namespace of a fleet that was once meshed, so a later opt-out survives
	// reconciles and operator restarts.
	IstioControlPlane = FleetGroup + "/istio-control-plane"
)

// Kubernetes recommended labels, set on everything the operators create.
const (
	Name      = "app.kubernetes.io/name"
	Instance  = "app.kubernetes.io/instance"
	Component = "app.kubernetes.io/component"
	ManagedBy = "app.kubernetes.io/managed-by"
	PartOf    = "app.kubernetes.io/part-of"
)

// Keys owned by the mesh operator (group core.navique.com).
const (
	// MeshGroup is the mesh operator's API group and label prefix.
	MeshGroup = "core.navique.com"

	// Mesh is the namespace enrollment label: "enabled" asks for enrollment,
	// "disabled" forbids it whatever else asks.
	Mesh = MeshGroup + "/mesh"
	// ReconcilePaused on a managed object pauses the operator's reverts of it.
	ReconcilePaused = MeshGroup + "/reconcile-paused"
	// MeshStrictReady on the namespace-wide PeerAuthentication records when
	// the namespace's workloads first showed they could take STRICT mTLS
	// (the permissive-to-strict cutover); from then on STRICT is the
	// namespace's resting mode.
	MeshStrictReady = MeshGroup + "/strict-ready"
	// MeshStrictEdges on the namespace-wide PeerAuthentication lists
	// (comma-separated) the declared edge namespaces whose Pods were all
	// meshed when the namespace went STRICT. A newly declared edge holds
	// STRICT back until it is meshed too; an accepted one no longer does.
	MeshStrictEdges = MeshGroup + "/strict-edges"
	// MeshMigratingFrom on the namespace-wide PeerAuthentication names the
	// data plane a namespace is migrating away from (a change of the
	// ServiceMesh's dataPlane); it goes once the namespace is STRICT again.
	MeshMigratingFrom = MeshGroup + "/migrating-from"
)

// Values of the Mesh label.
const (
	MeshEnabled  = "enabled"
	MeshDisabled = "disabled"
)

// Mesh state labels: written on a Namespace by the mesh operator only, and
// only after what they claim has been applied, so workload operators can
// adapt to the namespace (see docs/mesh-contract.md).
const (
	// MeshState is "enrolled" once the namespace's mesh configuration is in place.
	MeshState = MeshGroup + "/mesh-state"
	// MeshDataPlane is "ambient" or "sidecar".
	MeshDataPlane = MeshGroup + "/mesh-dataplane"
	// MeshMTLS is "strict" or "permissive": the namespace-wide mode in force.
	MeshMTLS = MeshGroup + "/mesh-mtls"
	// MeshIsolation is "off", "namespace" or "strict".
	MeshIsolation = MeshGroup + "/mesh-isolation"
	// MeshControlPlane is the namespace of the control plane serving it.
	MeshControlPlane = MeshGroup + "/mesh-control-plane"
	// AllowFromPrefix starts one label key per declared cross-namespace
	// edge: allow-from.core.navique.com/<source namespace>=true.
	AllowFromPrefix = "allow-from." + MeshGroup + "/"
)

// MeshStateEnrolled is the value of MeshState for an enrolled namespace.
const MeshStateEnrolled = "enrolled"

// MeshStateJoining is the value of MeshState for a namespace the mesh
// operator will enroll in ambient once its NetworkPolicies admit capture:
// workload operators prepare their policies for capture on seeing it.
const MeshStateJoining = "joining"

// IstioDataPlaneMode is Istio's ambient label; "none" opts a Pod out.
const IstioDataPlaneMode = "istio.io/dataplane-mode"

// IstioAmbientRedirection is the Pod annotation istio-cni sets to "enabled"
// once ztunnel captures the Pod's traffic (ambient data plane).
const IstioAmbientRedirection = "ambient.istio.io/redirection"

// Well-known keys that Kubernetes itself or standard cluster add-ons set.
// The operators never write them; NetworkPolicy builders select on them, and
// they are spelled here so that no builder has to.
const (
	// NamespaceName is set by the API server on every Namespace to the
	// Namespace's own name and cannot be changed, so a namespaceSelector on it
	// names exactly one namespace (unlike a user-chosen namespace label).
	NamespaceName = "kubernetes.io/metadata.name"
	// K8sApp is the add-on label that cluster DNS keeps for compatibility:
	// CoreDNS on EKS and kubeadm clusters runs with k8s-app: kube-dns.
	K8sApp = "k8s-app"
)

// Keys the local test bed's celld stand-in reads; nothing in a real cluster sets them.
const (
	// StandinUnhealthy on a member Pod makes the stand-in report healthy=false on /state.
	StandinUnhealthy = "e2e." + FleetGroup + "/unhealthy"
)

// Istio's own keys, which the operators read and write (facts.md, Istio).
const (
	// IstioInject on a Pod asks for ("true") or refuses ("false") sidecar injection.
	IstioInject = "sidecar.istio.io/inject"
	// IstioNativeSidecar on a Pod asks for the proxy as a native sidecar
	// (an init container with restartPolicy Always, Istio 1.24+).
	IstioNativeSidecar = "sidecar.istio.io/nativeSidecar"
	// IstioExcludeOutboundIPRanges lists CIDRs the proxy must not capture.
	IstioExcludeOutboundIPRanges = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
	// IstioRevision selects an Istio revision for a namespace or Pod.
	IstioRevision = "istio.io/rev"
	// IstioInjection is the namespace label for default-revision injection.
	IstioInjection = "istio-injection"
	// IstiodApp is the key of the label that marks istiod Pods (value "istiod").
	IstiodApp = "app"
)

// Annotations the mesh operator keeps on its Sail Operator installation
// record (a ConfigMap), so a later run knows what it installed.
const (
	// SailRelease names the Helm release of the Sail Operator it installed.
	SailRelease = MeshGroup + "/sail-release"
	// SailCRDs lists the CRDs that install created (and so may remove).
	SailCRDs = MeshGroup + "/sail-crds"
	// SailHolderServiceMesh is the mesh operator's data key in that record;
	// other tools sharing the Sail Operator add keys of their own.
	SailHolderServiceMesh = "servicemesh." + MeshGroup
)

// Ingress annotations the fleet operator never writes (they hand the ingress
// controller configuration or an authentication endpoint, which the operator
// would set with its own rights; docs/security.md). The CRD's CEL rules on
// spec.routing.ingress.annotations refuse the same keys.
const (
	// IngressAnnotationSnippetSuffix ends every configuration-injection key
	// (ingress-nginx's configuration-snippet, server-snippet, auth-snippet, and
	// other controllers' alike).
	IngressAnnotationSnippetSuffix = "-snippet"
	NginxAuthURL                   = "nginx.ingress.kubernetes.io/auth-url"
	NginxAuthSignin                = "nginx.ingress.kubernetes.io/auth-signin"
	// NginxConfigurationSnippet is the snippet key a namespace editor may
	// still set on an Ingress with its own rights (docs/security.md): the
	// fleet operator neither writes nor removes it.
	NginxConfigurationSnippet = "nginx.ingress.kubernetes.io/configuration-snippet"
)

// PodSecurityEnforce is Pod Security admission's namespace label: the level
// (privileged, baseline, restricted) the API server enforces on the
// namespace's Pods. An admin's to set; the operators never write it.
const PodSecurityEnforce = "pod-security.kubernetes.io/enforce"
