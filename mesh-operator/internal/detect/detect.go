// Package detect decides, from observed facts only, which Istio the
// ServiceMesh uses and what the operator may do about it. It makes no API
// calls: the reconciler gathers Facts (API discovery plus a few targeted
// reads) and Decide is a pure, table-tested function of them.
package detect

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// API groups and resources detection looks for. CRDs are matched by group
// and resource, never by kind alone: Calico's operator also has a kind Istio.
const (
	GroupSail          = "sailoperator.io"
	GroupIstioSecurity = "security.istio.io"
	GroupMaistra       = "maistra.io"
	GroupCilium        = "cilium.io"
	GroupRoute         = "route.openshift.io"
	GroupConfigOS      = "config.openshift.io"

	ResourceSMCP          = "servicemeshcontrolplanes"
	ResourceCiliumNetPols = "ciliumnetworkpolicies"
	ResourceClusterVer    = "clusterversions"
	ResourceIstios        = "istios"
)

// Cilium settings ambient needs (kube-system/cilium-config keys for the
// Helm values socketLB.hostNamespaceOnly=true and cni.exclusive=false).
const (
	CiliumSockLBHostNSOnly = "bpf-lb-sock-hostns-only"
	CiliumCNIExclusive     = "cni-exclusive"
)

// Istiod is an istiod Deployment (label app=istiod).
type Istiod struct {
	Namespace, Name string
	// Revision is its istio.io/rev label ("" and "default" both mean the default revision).
	Revision string
	// Version is the discovery container's image tag, if it has one.
	Version string
	// Available: the Deployment's Available condition is True for its
	// current generation and at least one replica is available.
	Available bool
}

// ID names the Deployment in status and messages.
func (i Istiod) ID() string {
	rev := i.Revision
	if rev == "" {
		rev = "default"
	}
	return fmt.Sprintf("%s/%s@%s", i.Namespace, i.Name, rev)
}

// SailIstio is a live sailoperator.io Istio.
type SailIstio struct {
	Name      string
	Namespace string // spec.namespace: where its istiod runs
	Version   string
	// Ours: controlled by this ServiceMesh (owner reference with our UID).
	Ours bool
	// Revision is status.activeRevisionName (falls back to the name).
	Revision string
}

// Facts is everything detection looks at.
type Facts struct {
	// Resources maps each served API group to the resources it serves (any version).
	Resources map[string][]string
	// Istiods are the app=istiod Deployments in all namespaces. Any
	// namespace editor can create one: only those in a trusted namespace
	// (TrustedNamespaces) are ever taken for a control plane.
	Istiods []Istiod
	// InjectorNamespaces are the namespaces whose service an Istio
	// sidecar-injector webhook (a MutatingWebhookConfiguration webhook
	// named *sidecar-injector.istio.io) calls, sorted: the configuration
	// is cluster-scoped, so only a cluster admin put it there.
	InjectorNamespaces []string
	// Istios are the sailoperator.io Istio CRs (empty without the Sail API).
	Istios []SailIstio
	// MaistraControlPlanes are the ServiceMeshControlPlanes
	// (maistra.io) that exist, as namespace/name; empty without the API.
	MaistraControlPlanes []string
	// CiliumDaemonSet: kube-system/cilium exists.
	CiliumDaemonSet bool
	// CiliumConfig is kube-system/cilium-config's data; nil when absent or unreadable.
	CiliumConfig map[string]string
	// SailRecord is the Sail holders record in the namespace the operator
	// installs Sail into, read while the operator may install Sail and the
	// Sail API is served; nil when there is none (or it was not read).
	SailRecord *SailRecord
}

// SailRecord is what detection needs of a Sail holders record.
type SailRecord struct {
	// Release is the Helm release the record names.
	Release string
	// Holders are its holders' keys.
	Holders []string
}

func (f Facts) serves(group string, resource string) bool {
	res, ok := f.Resources[group]
	if !ok {
		return false
	}
	return resource == "" || slices.Contains(res, resource)
}

// OpenShift: the route.openshift.io group or config.openshift.io ClusterVersion.
func (f Facts) OpenShift() bool {
	return f.serves(GroupRoute, "") || f.serves(GroupConfigOS, ResourceClusterVer)
}

// SailAPI: the Sail Operator (or OpenShift Service Mesh 3) serves its Istio kind.
func (f Facts) SailAPI() bool { return f.serves(GroupSail, ResourceIstios) }

// IstioAPI: Istio's security API (PeerAuthentication, AuthorizationPolicy) is served.
func (f Facts) IstioAPI() bool { return f.serves(GroupIstioSecurity, "") }

// Maistra: the OpenShift Service Mesh 2.x API is served (possibly only
// CRDs left behind by an uninstall).
func (f Facts) Maistra() bool { return f.serves(GroupMaistra, ResourceSMCP) }

// MaistraRunning: an OpenShift Service Mesh 2.x control plane exists.
func (f Facts) MaistraRunning() bool { return f.Maistra() && len(f.MaistraControlPlanes) > 0 }

// Cilium: its DaemonSet or its CRDs.
func (f Facts) Cilium() bool {
	return f.CiliumDaemonSet || f.serves(GroupCilium, ResourceCiliumNetPols)
}

// Environment is the status summary of the facts.
func (f Facts) Environment() v1alpha1.DetectedEnvironment {
	env := v1alpha1.DetectedEnvironment{
		Platform: v1alpha1.PlatformKubernetes,
		SailAPI:  f.SailAPI(), IstioAPI: f.IstioAPI(), Maistra: f.Maistra(), Cilium: f.Cilium(),
	}
	if f.OpenShift() {
		env.Platform = v1alpha1.PlatformOpenShift
	}
	for _, i := range f.Istiods {
		env.Istiods = append(env.Istiods, i.ID())
	}
	slices.Sort(env.Istiods)
	return env
}

// DefaultControlPlaneNamespace is spec.controlPlaneNamespace when unset.
const DefaultControlPlaneNamespace = "istio-system"

// ControlPlaneNamespace is the namespace the spec names for the control plane.
func ControlPlaneNamespace(spec v1alpha1.ServiceMeshSpec) string {
	if spec.ControlPlaneNamespace == "" {
		return DefaultControlPlaneNamespace
	}
	return spec.ControlPlaneNamespace
}

// TrustedNamespaces are the namespaces where an istiod Deployment counts as
// a control plane, each with why: only objects a tenant cannot create say
// so. The namespace the spec names (an admin's ServiceMesh), the namespace
// of any Sail Istio (cluster-scoped), and the namespaces an Istio
// sidecar-injector webhook calls (cluster-scoped). A Deployment's labels
// are never enough: whoever may edit a namespace can label a Deployment
// app=istiod.
func TrustedNamespaces(spec v1alpha1.ServiceMeshSpec, f Facts) map[string]string {
	out := map[string]string{}
	for _, ns := range f.InjectorNamespaces {
		out[ns] = "an Istio sidecar-injector webhook calls it"
	}
	for _, i := range f.Istios {
		out[i.Namespace] = "Sail Istio " + i.Name + " runs its istiod there"
	}
	out[ControlPlaneNamespace(spec)] = "spec.controlPlaneNamespace names it"
	return out
}

// TrustedIstiods splits the istiods found into those in a trusted namespace
// and those ignored (never chosen, listed in status).
func TrustedIstiods(spec v1alpha1.ServiceMeshSpec, f Facts) (trusted, ignored []Istiod) {
	ns := TrustedNamespaces(spec, f)
	for _, d := range f.Istiods {
		if _, ok := ns[d.Namespace]; ok {
			trusted = append(trusted, d)
		} else {
			ignored = append(ignored, d)
		}
	}
	return trusted, ignored
}

// choose narrows the trusted control planes (someone else's Sail Istios,
// istiods) to one namespace. The provider says which kind counts: istio
// counts istiods (a Sail Istio only where none runs), sail and openshift
// count Sail Istios, auto both. One namespace: it. Several: the one the
// spec names, if it is among them; otherwise none is picked and the
// namespaces are returned for AmbiguousControlPlane.
func choose(spec v1alpha1.ServiceMeshSpec, foreign []SailIstio, istiods []Istiod) ([]SailIstio, []Istiod, []string) {
	countIstios, countIstiods := true, true
	switch spec.Provider {
	case v1alpha1.ProviderIstio:
		countIstios = len(istiods) == 0
	case v1alpha1.ProviderSail, v1alpha1.ProviderOpenShift:
		countIstiods = false
	}
	seen := map[string]bool{}
	if countIstios {
		for _, i := range foreign {
			seen[i.Namespace] = true
		}
	}
	if countIstiods {
		for _, d := range istiods {
			seen[d.Namespace] = true
		}
	}
	if len(seen) <= 1 {
		return foreign, istiods, nil
	}
	want := ControlPlaneNamespace(spec)
	if !seen[want] {
		return nil, nil, slices.Sorted(maps.Keys(seen))
	}
	var f []SailIstio
	for _, i := range foreign {
		if i.Namespace == want {
			f = append(f, i)
		}
	}
	var d []Istiod
	for _, i := range istiods {
		if i.Namespace == want {
			d = append(d, i)
		}
	}
	return f, d, nil
}

func ambiguous(p Plan, spec v1alpha1.ServiceMeshSpec, namespaces []string) Plan {
	return blocked(p, v1alpha1.ReasonAmbiguousControlPlane, fmt.Sprintf("More than one namespace runs an Istio control plane the operator trusts (%s), "+
		"and spec.controlPlaneNamespace (%s) is none of them: the operator does not pick one. "+
		"Set spec.controlPlaneNamespace to the namespace of the control plane this mesh uses.", strings.Join(namespaces, ", "), ControlPlaneNamespace(spec)))
}

// Action is what the reconciler does with the control plane.
type Action string

const (
	// ActionInstallSail: install the Sail Operator from its chart, then build the control plane.
	ActionInstallSail Action = "InstallSail"
	// ActionApply: apply the owned Sail CRs (Istio, IstioCNI, ZTunnel).
	ActionApply Action = "Apply"
	// ActionObserve: change nothing; read readiness (adopt, external).
	ActionObserve Action = "Observe"
	// ActionHold: change nothing; a user decision is needed (Blocked, Deferred).
	ActionHold Action = "Hold"
)

// Plan is Decide's answer.
type Plan struct {
	Action     Action
	Management v1alpha1.Management
	// Provider for status: sail, openshift, istio, maistra or "" (none found).
	Provider string
	// Adopted is the existing control plane in use (adopt, auto-adopt,
	// external). In mode adopt it may be the operator's own Istio
	// (AdoptedIstio.Ours, Management Managed): observed, not changed.
	AdoptedIstio  *SailIstio
	AdoptedIstiod []Istiod
	// Deferred: OpenShift Service Mesh 2.x; the operator stands aside.
	Deferred bool
	// Blocked says why nothing can happen until the user acts (Reason is CamelCase).
	BlockedReason  v1alpha1.ConditionReason
	BlockedMessage string
	// Precondition is a warning that holds the control plane back: the
	// condition PreconditionNotMet. Empty when every precondition holds.
	PreconditionReason  v1alpha1.ConditionReason
	PreconditionMessage string
	// MaintainSail: with ActionApply, the Sail Operator is the release the
	// operator installed and alone holds; it is kept at the wanted chart
	// and values, and repaired, before the control plane is applied. A
	// Sail the operator did not install (none or another release in the
	// record, preinstalled, OpenShift) or shares is never touched.
	MaintainSail bool
}

// Options are operator-wide settings Decide needs.
type Options struct {
	// SailInstallEnabled: the operator may install the Sail Operator (--sail-install).
	SailInstallEnabled bool
	// SailRelease is the Helm release name the operator installs Sail as.
	SailRelease string
}

// Decide picks the provider and the action for spec, from facts only.
func Decide(spec v1alpha1.ServiceMeshSpec, f Facts, opt Options) Plan {
	p := Plan{}
	openshift := f.OpenShift()
	ours, foreign := splitIstios(f.Istios)
	// Only istiods in a namespace no tenant can make a control plane's.
	trusted, _ := TrustedIstiods(spec, f)
	istiods := foreignIstiods(trusted, ours)

	p.PreconditionReason, p.PreconditionMessage = preconditions(spec, f)

	// Provider names the user chose must match the cluster.
	if spec.Provider == v1alpha1.ProviderOpenShift && !openshift {
		return blocked(p, v1alpha1.ReasonProviderNotDetected, "spec.provider is openshift but this is not OpenShift (neither the route.openshift.io API nor a config.openshift.io ClusterVersion is served); use provider auto.")
	}

	if spec.Mode == v1alpha1.ModeExternal {
		// Never touch the control plane; readiness is observed where visible.
		cf, ci, amb := choose(spec, foreign, istiods)
		if amb != nil {
			return ambiguous(p, spec, amb)
		}
		p.Action, p.Management = ActionObserve, v1alpha1.ManagementExternal
		p.AdoptedIstio = firstReady(cf, ours)
		p.AdoptedIstiod = ci
		p.Provider = providerOf(p, f, openshift)
		return p
	}

	// OpenShift Service Mesh 2 stands in the way only while one of its
	// control planes exists and no Sail Istio does: OLM leaves the maistra.io
	// CRDs behind after an uninstall, and an OSSM 3 Istio next to a
	// running OSSM 2 is the mesh to adopt.
	if f.MaistraRunning() && len(f.Istios) == 0 {
		p.Deferred = true
		p.Provider = "maistra"
		return blocked(p, v1alpha1.ReasonMaistraDetected, fmt.Sprintf("OpenShift Service Mesh 2.x (Maistra) runs a control plane (ServiceMeshControlPlane %s). "+
			"The operator neither manages OSSM 2 nor installs a second control plane next to it. "+
			"Either adopt an existing mesh: upgrade to OpenShift Service Mesh 3 / Sail (operator package servicemeshoperator3) and the operator adopts its Istio, "+
			"or set spec.mode: external to keep Maistra and have the operator emit only its configuration.", strings.Join(f.MaistraControlPlanes, ", ")))
	}

	// The existing mesh, if any, that the ServiceMesh would adopt.
	existing := len(foreign) > 0 || len(istiods) > 0
	switch spec.Provider {
	case v1alpha1.ProviderSail, v1alpha1.ProviderOpenShift:
		// Only a Sail Istio counts as that provider's mesh.
		if len(foreign) == 0 && len(istiods) > 0 && len(ours) == 0 {
			return blocked(p, v1alpha1.ReasonProviderMismatch, fmt.Sprintf("spec.provider is %s, but istiod runs without a Sail Istio (%s); "+
				"set provider auto or istio to adopt it, rather than installing a second control plane next to it.", spec.Provider, ids(istiods)))
		}
		existing = len(foreign) > 0
	case v1alpha1.ProviderIstio:
		existing = len(istiods) > 0 || len(foreign) > 0
	}

	if spec.Mode == v1alpha1.ModeAdopt && !existing && len(ours) > 0 {
		// Switched from managed to adopt with only the Istio this
		// ServiceMesh created: that is the mesh in use. Adopt's promise
		// holds (it is observed, never changed), but it stays ours: its
		// owner reference remains and deleting the ServiceMesh still
		// removes it, hence Managed rather than Adopted.
		p.Action, p.Management = ActionObserve, v1alpha1.ManagementManaged
		p.AdoptedIstio = firstReady(ours)
		p.Provider = providerOf(p, f, openshift)
		return p
	}
	if spec.Mode == v1alpha1.ModeAdopt || (len(ours) == 0 && existing) {
		if !existing {
			return blocked(p, v1alpha1.ReasonNoMeshFound, "spec.mode is adopt but no Istio control plane was found (no sailoperator.io Istio, and no istiod Deployment labelled app=istiod in spec.controlPlaneNamespace "+
				"or in a namespace an Istio sidecar-injector webhook calls; status.detected.ignoredIstiods lists those found elsewhere). "+
				"Install Istio (or OpenShift Service Mesh 3) first, or use mode managed to have the operator install it.")
		}
		cf, ci, amb := choose(spec, foreign, istiods)
		if amb != nil {
			return ambiguous(p, spec, amb)
		}
		p.Action, p.Management = ActionObserve, v1alpha1.ManagementAdopted
		if spec.Provider != v1alpha1.ProviderIstio || len(ci) == 0 {
			p.AdoptedIstio = firstReady(cf, nil)
		}
		if p.AdoptedIstio == nil {
			p.AdoptedIstiod = ci
		}
		p.Provider = providerOf(p, f, openshift)
		return p
	}

	// Managed: we own (or will own) the Sail CRs.
	p.Management = v1alpha1.ManagementManaged
	p.Provider = "sail"
	if openshift {
		p.Provider = "openshift"
	}
	if spec.Provider == v1alpha1.ProviderIstio {
		return blocked(p, v1alpha1.ReasonProviderCannotInstall, "spec.provider is istio, which the operator only adopts (an existing istiod) and never installs; none was found. "+
			"Use provider auto or sail to have the operator install Istio through the Sail Operator.")
	}
	if p.PreconditionReason != "" && len(ours) == 0 {
		// Do not start an install the precondition says will not work.
		p.Action = ActionHold
		return p
	}
	switch {
	case f.SailAPI():
		p.Action = ActionApply
	case openshift:
		return blocked(p, v1alpha1.ReasonSailOperatorMissing, "On OpenShift the operator does not install the Sail Operator itself: install OpenShift Service Mesh 3 "+
			"(OLM package servicemeshoperator3 in openshift-operators); the operator then creates the control plane.")
	case !opt.SailInstallEnabled:
		return blocked(p, v1alpha1.ReasonSailOperatorMissing, "The Sail Operator (sailoperator.io API) is not installed and this operator runs with --sail-install=false: "+
			"install the Sail Operator (Helm chart sail-operator), or enable sail.install in the mesh-operator chart.")
	default:
		p.Action = ActionInstallSail
	}
	if p.PreconditionReason != "" {
		// Keep what we own as it is; apply no change until the precondition holds.
		p.Action = ActionHold
	}
	p.MaintainSail = p.Action == ActionApply && opt.SailInstallEnabled && soleSailHolder(f.SailRecord, opt.SailRelease)
	return p
}

// soleSailHolder: rec names release and the operator is its only holder,
// which it is of an installation it created or that nobody else joined.
func soleSailHolder(rec *SailRecord, release string) bool {
	return rec != nil && release != "" && rec.Release == release &&
		len(rec.Holders) == 1 && rec.Holders[0] == labels.SailHolderServiceMesh
}

// preconditions reports the Cilium + ambient sharp edge: ambient's traffic
// redirection conflicts with Cilium's socket load balancing and its
// exclusive CNI config unless both are configured for it. A cluster whose
// cilium-config shows both settings passes.
func preconditions(spec v1alpha1.ServiceMeshSpec, f Facts) (v1alpha1.ConditionReason, string) {
	if spec.DataPlane != v1alpha1.DataPlaneAmbient || !f.Cilium() {
		return "", ""
	}
	var missing []string
	if f.CiliumConfig[CiliumSockLBHostNSOnly] != "true" {
		missing = append(missing, CiliumSockLBHostNSOnly+": \"true\" (socketLB.hostNamespaceOnly=true)")
	}
	if f.CiliumConfig[CiliumCNIExclusive] != "false" {
		missing = append(missing, CiliumCNIExclusive+": \"false\" (cni.exclusive=false)")
	}
	if len(missing) == 0 {
		return "", ""
	}
	return v1alpha1.ReasonCiliumAmbient, "Cilium is installed and spec.dataPlane is ambient: ambient mode on Cilium needs " + strings.Join(missing, " and ") +
		" in kube-system/cilium-config, which is not set. Recommended: set spec.dataPlane: sidecar. The control plane is held back (nothing is installed or changed) until one of the two is done; workloads keep running without mTLS."
}

func blocked(p Plan, reason v1alpha1.ConditionReason, msg string) Plan {
	p.Action, p.BlockedReason, p.BlockedMessage = ActionHold, reason, msg
	return p
}

func splitIstios(all []SailIstio) (ours, foreign []SailIstio) {
	for _, i := range all {
		if i.Ours {
			ours = append(ours, i)
		} else {
			foreign = append(foreign, i)
		}
	}
	return ours, foreign
}

// foreignIstiods drops the istiods our own Istio runs: they must not make the
// operator adopt the control plane it installed.
func foreignIstiods(all []Istiod, ours []SailIstio) []Istiod {
	var out []Istiod
	for _, d := range all {
		if slices.ContainsFunc(ours, func(i SailIstio) bool { return i.Namespace == d.Namespace }) {
			continue
		}
		out = append(out, d)
	}
	return out
}

// firstReady picks the Istio to adopt: the one named default if present
// (the one istio-injection=enabled selects), else the first by name.
func firstReady(lists ...[]SailIstio) *SailIstio {
	for _, l := range lists {
		if len(l) == 0 {
			continue
		}
		l = slices.Clone(l)
		slices.SortFunc(l, func(a, b SailIstio) int {
			if a.Name == "default" {
				return -1
			}
			if b.Name == "default" {
				return 1
			}
			return strings.Compare(a.Name, b.Name)
		})
		return &l[0]
	}
	return nil
}

func providerOf(p Plan, f Facts, openshift bool) string {
	switch {
	case p.AdoptedIstio != nil && openshift:
		return "openshift"
	case p.AdoptedIstio != nil:
		return "sail"
	case len(p.AdoptedIstiod) > 0 && f.MaistraRunning():
		return "maistra"
	case len(p.AdoptedIstiod) > 0:
		return "istio"
	}
	return ""
}

func ids(ds []Istiod) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.ID())
	}
	return strings.Join(s, ", ")
}
