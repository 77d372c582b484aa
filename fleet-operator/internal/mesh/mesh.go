// Package mesh holds the fleet's Istio sidecar integration as pure functions:
// where a fleet stands on its way into or out of the mesh (computed from the
// proxies its Pods really run, so an operator restart resumes correctly),
// what that means for the member template, and the AuthorizationPolicy and
// PeerAuthentication that go with it.
package mesh

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// ProxyContainer is the name Istio gives the injected proxy.
const ProxyContainer = podmesh.ProxyContainer

// PodIdentityAgentRanges are kept out of the proxy: the EKS Pod Identity
// Agent is plain HTTP on the node and must be reached directly.
var PodIdentityAgentRanges = []string{"169.254.170.23/32", "fd00:ec2::23/128"}

// Phase is where a fleet stands with respect to the mesh.
type Phase string

const (
	// NotMeshed: the fleet never opted in; nothing is changed.
	NotMeshed Phase = ""
	// Joining: the spec asks for the mesh and some member has no proxy yet.
	Joining Phase = "Joining"
	// Meshed: every member Pod, terminating ones included, runs a proxy.
	Meshed Phase = "Meshed"
	// Leaving: the spec left the mesh and some member Pod still has a proxy.
	Leaving Phase = "Leaving"
	// Left: the fleet was meshed once and no member Pod has a proxy any more.
	Left Phase = "Left"
	// Ambient: the namespace is enrolled in an ambient mesh, or a member is
	// still captured by ztunnel after it left; ztunnel captures and releases
	// the members without any change to them, one Pod at a time.
	Ambient Phase = "Ambient"
)

// Pod is what the mesh logic needs of a member Pod.
type Pod struct {
	Name        string
	Revision    string
	Proxy       bool
	Terminating bool
	// Captured: istio-cni redirects the Pod to ztunnel (and it has no proxy).
	Captured bool
	// ControlPlanes are the namespaces of the istiod its proxy talks to
	// (podmesh.ProxyControlPlanes); ControlPlaneUnknown: it runs a proxy
	// that does not say.
	ControlPlanes       []string
	ControlPlaneUnknown bool
}

// Observation is everything a mesh decision depends on.
type Observation struct {
	// Desired is spec.mesh.istio set.
	Desired bool
	// WasMeshed is the fleet's istio-control-plane annotation being present.
	WasMeshed bool
	// Ambient is the namespace enrolled in an ambient mesh (and the fleet
	// not opted out).
	Ambient bool
	// Requested: the fleet asks for the mesh through its namespace (modes
	// auto and enabled, no spec.mesh.istio), the namespace is not opted out,
	// and a mesh enrollment is in effect there (Intent.StandsBy).
	Requested bool
	// Strict: the namespace's mesh-mtls state label says STRICT is in force.
	Strict bool
	// MayBeCaptured: a member without a proxy may be captured by ztunnel
	// before this operator hears of it (Intent.MayBeCaptured).
	MayBeCaptured bool
	// TargetRevision is the StatefulSet's update revision ("" if unknown).
	TargetRevision string
	// Replicas is how many members the fleet wants (0: not known).
	Replicas int
	Pods     []Pod
}

// State is the decision.
type State struct {
	Phase Phase
	// Relaxed: PeerAuthentication FLEET-mesh holds 8081 PERMISSIVE and the
	// peer-port rule admits unmeshed members too (sidecar: any source the
	// NetworkPolicy admits; ambient: plaintext, which the NetworkPolicy
	// limits to peers and the operator), because meshed and unmeshed
	// members talk to each other.
	Relaxed bool
	// Policies: the fleet's AuthorizationPolicy exists.
	Policies bool
	// IstiodEgress: members may reach istiod. Kept while any Pod, even a
	// terminating one, still has a proxy: old sidecars need istiod through
	// the whole roll and the final SIGTERM hand-off.
	IstiodEgress bool
	// MissingProxy lists members on the target revision whose Pod should
	// have been injected but has no proxy.
	MissingProxy []string
	// UnwantedProxy lists members running a proxy the fleet did not ask
	// for: injected by the namespace into a fleet that never opted in, or
	// into a replacement on the opt-out template of a leaving fleet.
	UnwantedProxy []string
	// Standby: the fleet asks for the mesh and is not in it yet. Its ambient
	// policy stands by, relaxed, wherever Istio's API is served, so that
	// members ztunnel captures before this operator hears of the enrollment
	// are already covered (without it, a captured member admits any mesh
	// identity the NetworkPolicy lets through HBONE, clients on 8081
	// included). A policy that selects no captured Pod enforces nothing.
	Standby bool
	// Captured: some member is captured by ztunnel, or is about to be (a
	// fleet leaving sidecars for an ambient namespace). Its policy is then
	// the ambient one whatever the fleet wants next (a sidecar join,
	// leaving), and HBONE stays open, until ztunnel has released every
	// member.
	Captured bool
}

// MembersInMesh: some member is still in the mesh (a Pod, terminating ones
// included, runs a proxy or is captured by ztunnel), so the fleet's
// policies still stand for it. Read from Decide's answer, which reads the
// Pods.
func (s State) MembersInMesh() bool { return s.Policies || s.IstiodEgress || s.Captured }

// DeclaresEdges: the fleet keeps the namespace edges it declares (the
// operator's namespace for /state reads, its routing source) on its
// namespace. A fleet that asks for the mesh declares them with its
// request, before any enrollment; a disabled one keeps them until its last
// member has left the mesh, as its policies are kept: while something else
// keeps the namespace enrolled, isolation would otherwise refuse the
// operator's /state reads and the routed traffic of members still
// captured, and the roll out of the mesh would wait for their health
// forever.
func DeclaresEdges(in Intent, st State) bool { return !in.Disabled || st.MembersInMesh() }

// Decide computes the state from what the cluster shows now.
func Decide(o Observation) State {
	withProxy, withoutProxy, captured, uncaptured, running := 0, 0, 0, 0, 0
	var missing, unwanted []string
	for _, p := range o.Pods {
		if !p.Terminating {
			running++
		}
		switch {
		case p.Terminating || p.Proxy:
		case p.Captured:
			captured++
		default:
			uncaptured++
		}
		if p.Proxy {
			withProxy++
			// A proxy the fleet did not ask for: injected by the namespace
			// into a fleet that never opted in, or into a replacement on the
			// opt-out template (the injector ignored the opt-out).
			neverAsked := !o.Desired && !o.WasMeshed && !o.Ambient
			optedOut := !o.Desired && o.WasMeshed && o.TargetRevision != "" && p.Revision == o.TargetRevision
			if !p.Terminating && (neverAsked || optedOut) {
				unwanted = append(unwanted, p.Name)
			}
		} else {
			withoutProxy++
			if o.Desired && !p.Terminating && o.TargetRevision != "" && p.Revision == o.TargetRevision {
				missing = append(missing, p.Name)
			}
		}
	}
	sort.Strings(missing)
	sort.Strings(unwanted)
	switch {
	case o.Desired && withoutProxy == 0:
		return State{Phase: Meshed, Policies: true, IstiodEgress: true}
	case o.Desired:
		// Members still without their sidecar are istio-cni's to capture
		// should the namespace the fleet asks to enroll turn out ambient.
		return State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true, MissingProxy: missing,
			Captured: captured > 0 || (o.MayBeCaptured && withoutProxy > 0)}
	case o.WasMeshed && withProxy > 0:
		// Leaving sidecars for an ambient namespace: istio-cni captures each
		// replacement as it starts, before this operator sees it, and a
		// captured member's port is hidden in HBONE, so only the ambient
		// policy keeps 8080 and 8081 apart. It goes on before the first
		// member is replaced (this step runs before the template changes).
		return State{Phase: Leaving, Relaxed: true, Policies: true, IstiodEgress: true, UnwantedProxy: unwanted, Captured: captured > 0 || o.Ambient}
	case o.Ambient || (captured > 0 && !o.Desired):
		// istio-cni captures (and, once the namespace leaves, releases) the
		// members one Pod at a time, and the first capture may come before
		// this operator hears of the enrollment: captured members must take
		// their peers' plaintext on 8081 until every member is captured, and
		// again from the moment the namespace leaves, before the first
		// release. The policies stay while any member is captured.
		//
		// The migration to another data plane and the teardown set the
		// namespace PERMISSIVE before they remove its ambient label, and the
		// release follows that label at once: relaxing at PERMISSIVE is what
		// lets the fleet be relaxed before the first release. (At PERMISSIVE
		// plaintext is accepted anyway; the NetworkPolicy still limits 8081
		// to peers and the operator.)
		//
		// A member the fleet wants but nobody sees running (its old Pod gone,
		// its replacement not created yet or not in the cache yet) is a
		// member still to be captured: counting only the Pods in sight would
		// tighten 8081 just before a replacement starts, uncaptured, next to
		// peers that then refuse its plaintext.
		awaited := running < o.Replicas
		return State{Phase: Ambient, Policies: true, Relaxed: uncaptured > 0 || awaited || !o.Ambient || !o.Strict, Captured: captured > 0}
	case o.WasMeshed:
		return State{Phase: Left, Standby: o.Requested, Relaxed: o.Requested}
	default:
		return State{Phase: NotMeshed, UnwantedProxy: unwanted, Standby: o.Requested, Relaxed: o.Requested}
	}
}

// IstiodNamespaces are the control planes the fleet's istiod egress opens
// (none unless st.IstiodEgress): current, the one the fleet uses now ("" for
// none), and every one a member's proxy, terminating ones included, was
// injected for. Moving the control plane (spec.mesh.istio or the
// namespace's mesh-control-plane label) restarts no member, so a proxy
// keeps its istiod for configuration and certificate renewal until its Pod
// is replaced. While some proxy does not say where it points, every
// control plane open now (open, read from the live NetworkPolicy) stays
// open: one is closed only once every proxy is known to point elsewhere.
func IstiodNamespaces(st State, current string, open []string, pods []Pod) []string {
	if !st.IstiodEgress {
		return nil
	}
	var out []string
	if current != "" {
		out = append(out, current)
	}
	for _, p := range pods {
		if !p.Proxy {
			continue
		}
		if p.ControlPlaneUnknown {
			out = append(out, open...)
			continue
		}
		out = append(out, p.ControlPlanes...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TemplateMode says how the member template treats injection.
type TemplateMode int

const (
	// Untouched: a fleet that never opted in keeps its template and the
	// namespace's injection behaviour.
	Untouched TemplateMode = iota
	// Inject: request a native sidecar.
	Inject
	// OptOut: a fleet that left explicitly disables injection, even in
	// namespaces with automatic or revision injection.
	OptOut
	// Disabled: spec.mesh.mode disabled; no injection and no ambient capture.
	Disabled
)

// Mode is the template mode of a fleet.
func Mode(in Intent, wasMeshed bool) TemplateMode {
	switch {
	case in.Sidecar:
		return Inject
	case in.Disabled:
		return Disabled
	case wasMeshed:
		return OptOut
	default:
		return Untouched
	}
}

// ApplyToTemplate adds the mesh labels and annotations to a member template.
func ApplyToTemplate(t *corev1.PodTemplateSpec, fleet string, mode TemplateMode) {
	switch mode {
	case Inject:
		setLabel(t, labels.IstioInject, "true")
		setAnnotation(t, labels.IstioNativeSidecar, "true")
		setAnnotation(t, labels.IstioExcludeOutboundIPRanges, strings.Join(PodIdentityAgentRanges, ","))
	case OptOut:
		setLabel(t, labels.IstioInject, "false")
	case Disabled:
		setLabel(t, labels.IstioInject, "false")
		setLabel(t, labels.IstioDataPlaneMode, "none")
	}
}

func setLabel(t *corev1.PodTemplateSpec, k, v string) {
	if t.Labels == nil {
		t.Labels = map[string]string{}
	}
	t.Labels[k] = v
}

func setAnnotation(t *corev1.PodTemplateSpec, k, v string) {
	if t.Annotations == nil {
		t.Annotations = map[string]string{}
	}
	t.Annotations[k] = v
}

// DefaultControlPlaneNamespace is istiod's namespace when nobody says otherwise.
const DefaultControlPlaneNamespace = "istio-system"

// Intent is what a fleet wants from the mesh, given its spec and its
// namespace's mesh state (the contract with the mesh operator).
type Intent struct {
	// Sidecar: members run an Istio sidecar (spec.mesh.istio, or a
	// sidecar-enrolled namespace in auto/enabled mode).
	Sidecar bool
	// Ambient: the namespace is enrolled in ambient mode and the fleet did
	// not opt out or ask for sidecars.
	Ambient bool
	// Disabled: spec.mesh.mode disabled; members opt out explicitly.
	Disabled bool
	// OptedOut: an admin labelled the namespace core.navique.com/mesh=disabled,
	// or with Istio's own opt-out (istio-injection=disabled,
	// istio.io/dataplane-mode=none: contract.IstioOptOut); it is never
	// enrolled, whatever the fleet asks.
	OptedOut bool
	// Strict: the namespace is enrolled with STRICT mTLS in force.
	Strict bool
	// SidecarNamespace: the namespace is enrolled in a sidecar mesh.
	SidecarNamespace bool
	// EnrollmentInEffect: the namespace is enrolled (the mesh operator's
	// state labels), announced for ambient (mesh-state=joining: capture
	// waits for the fleet's policy to admit it), or carries Istio's ambient
	// capture label, whoever wrote it. Read from the namespace as it is, never from the fleet's status:
	// without it nothing can capture or inject the members on the mesh's
	// behalf, and a fleet that asks for the mesh has nothing to stand by for.
	EnrollmentInEffect bool
	// ControlPlane is istiod's namespace for a sidecar fleet.
	ControlPlane string
	// Access is who may call 8080 inside the mesh.
	Access v1alpha1.ApplicationAccess
}

// IntentFor combines the spec with the namespace's mesh state.
func IntentFor(f *v1alpha1.CelldFleet, ns contract.State) Intent {
	in := Intent{Access: v1alpha1.AllowAll, ControlPlane: DefaultControlPlaneNamespace}
	mode := v1alpha1.MeshAuto
	if f.Spec.Mesh != nil && f.Spec.Mesh.Mode != "" {
		mode = f.Spec.Mesh.Mode
	}
	if ns.ControlPlane != "" {
		in.ControlPlane = ns.ControlPlane
	}
	in.OptedOut = ns.OptedOut()
	in.Strict = ns.Enrolled && ns.MTLS == contract.MTLSStrict
	in.SidecarNamespace = ns.Enrolled && ns.DataPlane == contract.Sidecar
	in.EnrollmentInEffect = ns.Enrolled || ns.AmbientLabelled || ns.Joining
	switch {
	case mode == v1alpha1.MeshDisabled:
		in.Disabled = true
	case f.Spec.Mesh != nil && f.Spec.Mesh.Istio != nil:
		in.Sidecar = true
		if cp := f.Spec.Mesh.Istio.ControlPlaneNamespace; cp != "" {
			in.ControlPlane = cp
		}
		if f.Spec.Mesh.Istio.ApplicationAccess == v1alpha1.Policies {
			in.Access = v1alpha1.Policies
		}
	case ns.Enrolled && ns.DataPlane == contract.Sidecar:
		in.Sidecar = true
	case ns.Enrolled && ns.DataPlane == contract.Ambient:
		in.Ambient = true
	}
	return in
}

// AsksForMesh: the fleet asks to join through its namespace (modes auto and
// enabled without spec.mesh.istio) in a namespace an admin did not opt out.
func (in Intent) AsksForMesh() bool { return !in.Disabled && !in.Sidecar && !in.OptedOut }

// StandsBy: the fleet asks for the mesh and an enrollment is in effect in
// its namespace, so ztunnel may capture members before this operator hears
// of it: its HBONE port and its relaxed ambient policy are ready
// beforehand. Without an enrollment in effect a fleet in mode auto is what
// the mesh seed says it is then, a no-op: no Istio object (a
// PeerAuthentication of ours would weaken a user's own STRICT mesh on 8081)
// and no HBONE or probe port. Members that are captured anyway keep their
// policy and HBONE from Decide (State.Captured), whatever the namespace says.
func (in Intent) StandsBy() bool { return in.AsksForMesh() && in.EnrollmentInEffect }

// MayBeCaptured: every fleet but a disabled one asks for its namespace's
// enrollment, a sidecar fleet too (see the controller's declaration), and
// until the namespace is enrolled with sidecars nobody knows which data
// plane it gets: where an enrollment is in effect, members without a proxy
// may be captured by ztunnel before this operator can react (found by the
// transition explorer, seed 401).
func (in Intent) MayBeCaptured() bool {
	return !in.Disabled && !in.OptedOut && !in.SidecarNamespace && in.EnrollmentInEffect
}

// ControlPlaneNamespace is the istiod namespace for a fleet: the intent's
// for a sidecar fleet, or the one recorded when it was meshed (leaving).
func ControlPlaneNamespace(f *v1alpha1.CelldFleet, in Intent) string {
	if in.Sidecar {
		return in.ControlPlane
	}
	return f.Annotations[labels.IstioControlPlane]
}

// WasMeshed reports whether the fleet carries the opt-in record.
func WasMeshed(f *v1alpha1.CelldFleet) bool {
	_, ok := f.Annotations[labels.IstioControlPlane]
	return ok
}

// MissingProxyMessage points the user at what usually breaks injection.
func MissingProxyMessage(fleet *v1alpha1.CelldFleet, pods []string) string {
	return fmt.Sprintf("Member(s) %s run the meshed template but have no %s container. Check that the Istio sidecar injector "+
		"(istiod) is running and its webhook reaches Pods in namespace %s, and the namespace labels: istio-injection=enabled, "+
		"or istio.io/rev=<revision> for a revision install (the Pod label alone selects the default revision). "+
		"The peer port stays PERMISSIVE until every member has a proxy.",
		strings.Join(pods, ", "), ProxyContainer, fleet.Namespace)
}

// InjectedWithoutOptInMessage explains proxies the namespace injected into
// a fleet that never opted in, and what to do.
func InjectedWithoutOptInMessage(fleet *v1alpha1.CelldFleet, pods []string) string {
	return fmt.Sprintf("Member(s) %s run an %s injected by namespace %s (istio-injection or istio.io/rev), but the fleet never opted in "+
		"to the mesh: its NetworkPolicy has no egress to istiod (TCP 15012), so these proxies cannot get their configuration or "+
		"certificates. Set spec.mesh.istio to join the mesh (the operator then opens istiod egress and manages the policies), or "+
		"set spec.mesh.mode: disabled so members opt out of injection.",
		strings.Join(pods, ", "), ProxyContainer, fleet.Namespace)
}

// ProxyStillInjectedMessage explains a leaving fleet whose replacements are
// injected despite the opt-out, and what to do.
func ProxyStillInjectedMessage(pods []string) string {
	return fmt.Sprintf("Member(s) %s run the opt-out template (sidecar.istio.io/inject: \"false\") but still have an %s: an "+
		"injector ignores the opt-out (a custom or revision injector webhook, or a mutating policy that forces injection). The fleet "+
		"stays Leaving, with port 8081 PERMISSIVE and istiod reachable, until no member runs a proxy. Make the injector honour the "+
		"sidecar.istio.io/inject label, then delete the member Pod(s) named here.",
		strings.Join(pods, ", "), ProxyContainer)
}

// PolicyName is the name of both Istio objects of a fleet.
func PolicyName(fleet string) string { return names.Mesh(fleet) }
