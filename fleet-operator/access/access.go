// Package access answers "who can reach this fleet's ports, and why" from the
// live objects of a cluster: the fleet's NetworkPolicies (and any other
// policy in the namespaces involved), the Istio PeerAuthentications and
// AuthorizationPolicies, and the namespace labels both operators write. It is
// the library behind `kubectl celld access`, and the end-to-end specs use it
// to produce their access tables.
//
// Compute is a pure function of a Snapshot, which Read takes from a cluster
// (read-only) and which tests record as YAML. NetworkPolicy verdicts come
// from cyclonus (through shared/netpol), Istio verdicts from shared/authzeval; this
// package only decides which callers to ask about and how a connection
// looks on the wire (HBONE in ambient).
package access

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/netpol"
	"github.com/ericdev/fleetmesh/shared/podmesh"
	"github.com/ericdev/fleetmesh/shared/policy"
)

// SchemaVersion names the JSON schema of Report (docs/access.md). Fields may
// be added within a version; none is removed or changes meaning. It is also
// the report's apiVersion, and Kind its kind, so kubectl's printers (-o
// json|yaml|jsonpath) take it like any other object.
const (
	SchemaVersion = "access.celld.eric.dev/v1"
	Kind          = "AccessReport"
)

// Snapshot is everything a report is computed from, read once.
type Snapshot struct {
	Fleet v1alpha1.CelldFleet `json:"fleet"`
	// Namespaces whose labels matter (the fleet's, the operator's, the
	// routing source's, the control plane's); others count as carrying
	// only the label the API server sets.
	Namespaces      []corev1.Namespace           `json:"namespaces,omitempty"`
	Pods            []corev1.Pod                 `json:"pods,omitempty"`
	NetworkPolicies []networkingv1.NetworkPolicy `json:"networkPolicies,omitempty"`
	// IstioAPI: the cluster serves security.istio.io (false on a fleet-only
	// cluster, where there is no Istio layer at all).
	IstioAPI              bool                        `json:"istioAPI"`
	PeerAuthentications   []unstructured.Unstructured `json:"peerAuthentications,omitempty"`
	AuthorizationPolicies []unstructured.Unstructured `json:"authorizationPolicies,omitempty"`
	// Unreadable lists what could not be read ("KIND in NAMESPACE: reason").
	Unreadable []string `json:"unreadable,omitempty"`
}

// Options are facts the objects may not tell.
type Options struct {
	// OperatorNamespace and OperatorPodLabels are used only when the fleet's
	// NetworkPolicy does not name the operator (it normally does).
	OperatorNamespace string
	OperatorPodLabels map[string]string
	// OperatorServiceAccount is used only when no fleet AuthorizationPolicy
	// names the operator's identity.
	OperatorServiceAccount string
	// TrustDomain of the mesh; default cluster.local.
	TrustDomain string
	// Callers are judged besides the live Pods and the class
	// representatives: Pods that need not exist (Name, Namespace, Labels,
	// ServiceAccount and Meshed are read; an empty Namespace is an address
	// outside the cluster, IP). The end-to-end specs ask about theirs.
	Callers []Caller
}

// The two operator representatives when no operator Pod is visible.
const (
	operatorWithSidecar = "(the fleet operator, with a sidecar)"
	operatorWithoutMesh = "(the fleet operator, without mesh identity)"
)

// Defaults as the fleet operator's chart installs it.
const (
	DefaultOperatorNamespace      = "fleet-system"
	DefaultOperatorServiceAccount = "fleet-operator"
	DefaultTrustDomain            = "cluster.local"
	defaultIstiodNamespace        = "istio-system"
)

// Caller classes.
const (
	ClassMember          = "member"
	ClassOperator        = "operator"
	ClassOperatorNS      = "operator-namespace"
	ClassClient          = "client"
	ClassPlaintextClient = "client-outside-mesh"
	ClassRoutingSource   = "routing-source"
	ClassRoutingNS       = "routing-namespace"
	ClassNamespace       = "namespace"
	ClassOtherMeshed     = "other-namespace-meshed"
	ClassOtherPlain      = "other-namespace-plaintext"
	ClassExternal        = "external"
	ClassProbe           = "kubelet-probe"
)

// Egress target classes.
const (
	TargetPeer             = "peer"
	TargetDNS              = "dns"
	TargetHTTPS            = "https"
	TargetPodIdentityAgent = "pod-identity-agent"
	TargetInstanceMetadata = "instance-metadata"
	TargetIstiod           = "istiod"
	TargetOther            = "other"
)

// Report is the answer. Its JSON form is the plugin's -o json output.
type Report struct {
	metav1.TypeMeta `json:",inline"`
	SchemaVersion   string   `json:"schemaVersion"`
	Fleet           FleetRef `json:"fleet"`
	Istio           Istio    `json:"istio"`
	// Unreadable: objects the reader was not allowed to read; verdicts
	// that depend on them are marked unknown.
	Unreadable []string      `json:"unreadable,omitempty"`
	Operator   Operator      `json:"operator"`
	Members    []Member      `json:"members"`
	Ingress    []Entry       `json:"ingress"`
	Egress     []EgressEntry `json:"egress"`
	Notes      []string      `json:"notes,omitempty"`
}

// FleetRef names the fleet.
type FleetRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Istio says whether the Istio layer exists on the cluster.
type Istio struct {
	API  bool   `json:"api"`
	Note string `json:"note"`
}

// Operator is how the report identified the fleet operator.
type Operator struct {
	Namespace      string            `json:"namespace"`
	PodLabels      map[string]string `json:"podLabels"`
	ServiceAccount string            `json:"serviceAccount"`
}

// Member is one destination: a member Pod (or, with none running, the
// Pod the fleet's selector would pick).
type Member struct {
	Name string `json:"name"`
	// Mesh is how the Pod is meshed: "sidecar", "ambient" or "none".
	Mesh string `json:"mesh"`
	Live bool   `json:"live"`
}

// Caller is the source of an inbound connection: a live Pod (Live) or a
// representative of its class that need not exist.
type Caller struct {
	Class          string            `json:"class"`
	Name           string            `json:"name"`
	Namespace      string            `json:"namespace,omitempty"`
	ServiceAccount string            `json:"serviceAccount,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	IP             string            `json:"ip,omitempty"`
	Meshed         bool              `json:"meshed"`
	Live           bool              `json:"live"`
}

// Entry is the verdict for one caller on one port of one member.
type Entry struct {
	Member string `json:"member"`
	Port   int    `json:"port"`
	// WirePort is the port the NetworkPolicy layer sees: 15008 when a
	// meshed caller reaches an ambient member through ztunnel's HBONE.
	WirePort int            `json:"wirePort"`
	Caller   Caller         `json:"caller"`
	Allowed  bool           `json:"allowed"`
	Unknown  bool           `json:"unknown,omitempty"`
	Network  NetworkVerdict `json:"network"`
	Istio    IstioVerdict   `json:"istio"`
}

// IstioVerdict is the Istio layer's answer.
type IstioVerdict struct {
	// Applies is false when the member is not in the mesh or the cluster
	// has no Istio API: then nothing of Istio's decides.
	Applies bool `json:"applies"`
	Allowed bool `json:"allowed"`
	Unknown bool `json:"unknown,omitempty"`
	// MTLS is the PeerAuthentication mode in force on the port and
	// MTLSSource the PeerAuthentication that set it ("" for Istio's default).
	MTLS       string `json:"mtls,omitempty"`
	MTLSSource string `json:"mtlsSource,omitempty"`
	// Policy (namespace/name) and Index name the AuthorizationPolicy rule
	// that decided; Index is -1 when none did.
	Policy string `json:"policy,omitempty"`
	Index  int    `json:"index"`
	Rule   string `json:"rule"`
}

// Target is where a member's outbound connection goes.
type Target struct {
	Class     string `json:"class"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	IP        string `json:"ip,omitempty"`
}

// EgressEntry is the NetworkPolicy verdict for one outbound connection of a
// member (Istio writes no outbound rules for the fleet, so the network
// layer decides alone).
type EgressEntry struct {
	Member   string         `json:"member"`
	Target   Target         `json:"target"`
	Port     int            `json:"port"`
	WirePort int            `json:"wirePort"`
	Protocol string         `json:"protocol"`
	Allowed  bool           `json:"allowed"`
	Unknown  bool           `json:"unknown,omitempty"`
	Network  NetworkVerdict `json:"network"`
}

// snapshotContext is what Compute derived from the snapshot before judging.
type snapshotContext struct {
	snap        *Snapshot
	nsLabels    map[string]map[string]string
	operator    Operator
	trustDomain string
	nets        *netpol.Policies
	istioOK     bool // Istio objects were read (or there is no API)
	// npUnknown: namespaces whose NetworkPolicies could not be read.
	npUnknown map[string]bool
	extra     []Caller
}

// Compute judges every caller class and every live caller on every fleet
// port of every member, and the members' egress.
func Compute(snap *Snapshot, opts Options) (*Report, error) {
	f := &snap.Fleet
	c := snapshotContext{snap: snap, nsLabels: map[string]map[string]string{}, trustDomain: cmp.Or(opts.TrustDomain, DefaultTrustDomain)}
	for _, ns := range snap.Namespaces {
		c.nsLabels[ns.Name] = ns.Labels
	}
	nets, err := netpol.New(snap.NetworkPolicies)
	if err != nil {
		return nil, err
	}
	c.nets = nets
	var opNotes []string
	c.operator, opNotes = operatorAndNotes(snap, opts, c.trustDomain)
	c.extra = opts.Callers
	c.istioOK = !snap.IstioAPI || !unreadableIstio(snap.Unreadable)
	c.npUnknown = map[string]bool{}
	for _, u := range snap.Unreadable {
		if rest, ok := strings.CutPrefix(u, "NetworkPolicy in "); ok {
			ns, _, _ := strings.Cut(rest, ":")
			c.npUnknown[ns] = true
		}
	}

	r := &Report{TypeMeta: metav1.TypeMeta{APIVersion: SchemaVersion, Kind: Kind}, SchemaVersion: SchemaVersion, Fleet: FleetRef{Namespace: f.Namespace, Name: f.Name},
		Unreadable: slices.Clone(snap.Unreadable), Operator: c.operator, Members: []Member{}, Ingress: []Entry{}, Egress: []EgressEntry{}}
	r.Istio.API = snap.IstioAPI
	if snap.IstioAPI {
		r.Istio.Note = "Istio security API present: PeerAuthentications and AuthorizationPolicies evaluated"
	} else {
		r.Istio.Note = "no Istio API on this cluster (fleet-only): NetworkPolicy alone decides"
	}
	r.Notes = append(r.Notes, opNotes...)
	r.Notes = append(r.Notes, "NetworkPolicy verdicts assume a CNI that enforces NetworkPolicy; with one that does not, only the Istio layer (if any) restricts traffic")

	dests := c.members()
	if len(dests) == 0 || !dests[0].live {
		r.Notes = append(r.Notes, "no member Pod is running: verdicts are for a Pod the fleet's selector would pick")
	}
	for _, d := range dests {
		r.Members = append(r.Members, Member{Name: d.pod.Name, Mesh: meshName(d.how), Live: d.live})
		callers := c.callers(d, dests)
		ports := []int{names.AppPort, names.PeerPort}
		if d.how == podmesh.Ambient {
			ports = append(ports, policy.HBONEPort)
		}
		for _, port := range ports {
			for _, cl := range callers {
				if cl.class == ClassProbe && port != names.PeerPort {
					continue // the kubelet probes only /state
				}
				e, err := c.judgeIngress(d, cl, port)
				if err != nil {
					return nil, err
				}
				r.Ingress = append(r.Ingress, e)
			}
		}
		eg, err := c.egress(d, dests)
		if err != nil {
			return nil, err
		}
		r.Egress = append(r.Egress, eg...)
	}
	return r, nil
}

func unreadableIstio(list []string) bool {
	for _, u := range list {
		if strings.HasPrefix(u, policy.KindPeerAuthentication) || strings.HasPrefix(u, policy.KindAuthorizationPolicy) {
			return true
		}
	}
	return false
}

func meshName(h podmesh.How) string {
	if h == podmesh.None {
		return "none"
	}
	return string(h)
}

// operatorOf identifies the operator from what the fleet's own objects say:
// the namespace and Pod labels its NetworkPolicy admits on the peer port,
// and the identity its AuthorizationPolicy admits there.
// Only objects the fleet controls count: anyone who may create objects in
// the namespace could make one with the fleet's name.
func operatorOf(snap *Snapshot, opts Options, trustDomain string) Operator {
	op, _ := operatorAndNotes(snap, opts, trustDomain)
	return op
}

// ownedByFleet: obj's controller is the fleet (by UID).
func ownedByFleet(obj metav1.Object, f *v1alpha1.CelldFleet) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == f.UID && ref.Kind == "CelldFleet" && ref.Name == f.Name
}

func operatorAndNotes(snap *Snapshot, opts Options, trustDomain string) (Operator, []string) {
	var notes []string
	op := Operator{Namespace: cmp.Or(opts.OperatorNamespace, DefaultOperatorNamespace), PodLabels: opts.OperatorPodLabels,
		ServiceAccount: cmp.Or(opts.OperatorServiceAccount, DefaultOperatorServiceAccount)}
	if op.PodLabels == nil {
		op.PodLabels = map[string]string{labels.Name: names.Operator}
	}
	f := &snap.Fleet
	for _, np := range snap.NetworkPolicies {
		if np.Namespace != f.Namespace || np.Name != names.NetworkPolicy(f.Name) {
			continue
		}
		if !ownedByFleet(&np, f) {
			notes = append(notes, fmt.Sprintf("NetworkPolicy %s/%s is not owned by the fleet: the operator's namespace and labels are not taken from it", np.Namespace, np.Name))
			continue
		}
		for _, rule := range np.Spec.Ingress {
			for _, peer := range rule.From {
				if peer.NamespaceSelector == nil || peer.PodSelector == nil {
					continue
				}
				if ns := peer.NamespaceSelector.MatchLabels[labels.NamespaceName]; ns != "" && ns != f.Namespace {
					op.Namespace, op.PodLabels = ns, maps.Clone(peer.PodSelector.MatchLabels)
				}
			}
		}
	}
	prefix := fmt.Sprintf("%s/ns/%s/sa/", trustDomain, op.Namespace)
	for _, ap := range snap.AuthorizationPolicies {
		if ap.GetNamespace() != f.Namespace || ap.GetName() != names.Mesh(f.Name) || !ownedByFleet(&ap, f) {
			continue
		}
		p := authzeval.FromUnstructured(&ap, nil)
		for _, rule := range p.Rules {
			for _, src := range rule.From {
				for _, pr := range src.Principals {
					if sa, ok := strings.CutPrefix(pr, prefix); ok && sa != "" {
						op.ServiceAccount = sa
					}
				}
			}
		}
	}
	return op, notes
}

// dest is a member Pod as a destination.
type dest struct {
	pod  corev1.Pod
	how  podmesh.How
	live bool
}

func (c *snapshotContext) labelsOf(ns string) map[string]string {
	if l, ok := c.nsLabels[ns]; ok && l != nil {
		return l
	}
	return map[string]string{labels.NamespaceName: ns}
}

// nsAmbient: the namespace is in an ambient data plane (Istio's own label,
// which the mesh operator sets on enrollment).
func (c *snapshotContext) nsAmbient(ns string) bool {
	return c.labelsOf(ns)[labels.IstioDataPlaneMode] == "ambient"
}

// nsMeshed: new Pods of the namespace would be meshed (ambient, or sidecar
// injection asked for by Istio's labels or the mesh operator's state).
func (c *snapshotContext) nsMeshed(ns string) bool {
	l := c.labelsOf(ns)
	return c.nsAmbient(ns) || l[labels.IstioInjection] == "enabled" || l[labels.IstioRevision] != "" ||
		l[labels.MeshState] == labels.MeshStateEnrolled
}

// how a live Pod is meshed: a proxy, or ambient redirection in an ambient
// namespace (podmesh decides, as both operators do).
func (c *snapshotContext) how(p *corev1.Pod) podmesh.How {
	dp := podmesh.DataPlaneSidecar
	if c.nsAmbient(p.Namespace) {
		dp = podmesh.DataPlaneAmbient
	}
	if !c.snap.IstioAPI || !podmesh.MeshedIn(dp, p) {
		return podmesh.None
	}
	return podmesh.Of(p)
}

func (c *snapshotContext) members() []dest {
	f := &c.snap.Fleet
	sel := k8slabels.SelectorFromSet(names.Selector(f.Name))
	var out []dest
	for _, p := range c.snap.Pods {
		if p.Namespace == f.Namespace && sel.Matches(k8slabels.Set(p.Labels)) && podmesh.Running(&p) {
			out = append(out, dest{pod: p, how: c.how(&p), live: true})
		}
	}
	slices.SortFunc(out, func(a, b dest) int { return strings.Compare(a.pod.Name, b.pod.Name) })
	if len(out) > 0 {
		return out
	}
	p := corev1.Pod{}
	p.Namespace, p.Name = f.Namespace, "("+f.Name+" member)"
	p.Labels = names.Selector(f.Name)
	p.Labels[labels.Fleet] = f.Name
	p.Spec.ServiceAccountName = members.ServiceAccountName(f)
	p.Status.PodIP = "198.51.100.100"
	how := podmesh.None
	if c.snap.IstioAPI && c.nsAmbient(f.Namespace) {
		how = podmesh.Ambient
	}
	return []dest{{pod: p, how: how}}
}

// caller is a Caller with what judging needs.
type caller struct {
	Caller
	class string
	how   podmesh.How
}

func (c *snapshotContext) endpoint(cl caller) Endpoint {
	if cl.Namespace == "" {
		return Endpoint{IP: cl.IP}
	}
	return Endpoint{Namespace: cl.Namespace, NamespaceLabels: c.labelsOf(cl.Namespace), Labels: cl.Labels, IP: cl.IP}
}

// classify puts a live Pod in the class the fleet's policies think of.
func (c *snapshotContext) classify(p *corev1.Pod) string {
	return c.classOf(p.Namespace, p.Labels, c.how(p) != podmesh.None)
}

func (c *snapshotContext) classOf(namespace string, podLabels map[string]string, meshed bool) string {
	f := &c.snap.Fleet
	l := k8slabels.Set(podLabels)
	switch {
	case namespace == f.Namespace && k8slabels.SelectorFromSet(names.Selector(f.Name)).Matches(l):
		return ClassMember
	case namespace == f.Namespace && podLabels[labels.ClientOf] == f.Name:
		if !meshed && c.snap.IstioAPI && c.nsMeshed(f.Namespace) {
			return ClassPlaintextClient
		}
		return ClassClient
	case namespace == f.Namespace:
		return ClassNamespace
	case namespace == c.operator.Namespace && k8slabels.SelectorFromSet(c.operator.PodLabels).Matches(l):
		return ClassOperator
	case namespace == c.operator.Namespace:
		return ClassOperatorNS
	case f.Spec.Routing != nil && namespace == f.Spec.Routing.Source.Namespace &&
		k8slabels.SelectorFromSet(routingLabels(f)).Matches(l):
		return ClassRoutingSource
	case f.Spec.Routing != nil && namespace == f.Spec.Routing.Source.Namespace:
		return ClassRoutingNS
	case namespace == "":
		return ClassExternal
	case meshed:
		return ClassOtherMeshed
	}
	return ClassOtherPlain
}

func routingLabels(f *v1alpha1.CelldFleet) map[string]string {
	out := map[string]string{}
	for k, v := range f.Spec.Routing.Source.PodLabels {
		out[k] = string(v)
	}
	return out
}

// callers are every live Pod the snapshot holds (but the destination), and
// one representative of each class: a caller that need not exist, so every
// class has a row even where no such Pod runs now. Representatives of other
// namespaces wear every label the fleet admits, to show that labels alone
// do not let them in.
func (c *snapshotContext) callers(d dest, dests []dest) []caller {
	f := &c.snap.Fleet
	var out []caller
	for i := range c.snap.Pods {
		p := &c.snap.Pods[i]
		if (p.Namespace == d.pod.Namespace && p.Name == d.pod.Name) || !podmesh.Running(p) {
			continue
		}
		how := c.how(p)
		out = append(out, caller{class: c.classify(p), how: how, Caller: Caller{Name: p.Namespace + "/" + p.Name, Namespace: p.Namespace,
			ServiceAccount: cmp.Or(p.Spec.ServiceAccountName, "default"), Labels: p.Labels, IP: p.Status.PodIP, Live: true}})
	}
	fleetHow := podmesh.None
	if c.snap.IstioAPI && c.nsMeshed(f.Namespace) {
		fleetHow = podmesh.Sidecar
		if c.nsAmbient(f.Namespace) {
			fleetHow = podmesh.Ambient
		}
	}
	nsHow := func(ns string) podmesh.How {
		if !c.snap.IstioAPI || !c.nsMeshed(ns) {
			return podmesh.None
		}
		if c.nsAmbient(ns) {
			return podmesh.Ambient
		}
		return podmesh.Sidecar
	}
	opHow, opLive := nsHow(c.operator.Namespace), false
	for _, p := range c.snap.Pods {
		if p.Namespace == c.operator.Namespace && c.classify(&p) == ClassOperator {
			opHow, opLive = c.how(&p), true // the live operator says how it runs
			break
		}
	}
	lookalike := map[string]string{labels.ClientOf: f.Name}
	maps.Copy(lookalike, c.operator.PodLabels)
	if f.Spec.Routing != nil {
		maps.Copy(lookalike, routingLabels(f))
	}
	memberLabels := maps.Clone(d.pod.Labels)
	reps := []caller{
		{class: ClassMember, how: d.how, Caller: Caller{Name: "(another member)", Namespace: f.Namespace, Labels: memberLabels, ServiceAccount: members.ServiceAccountName(f)}},
		{class: ClassOperatorNS, how: opHow, Caller: Caller{Name: "(another Pod of " + c.operator.Namespace + ")", Namespace: c.operator.Namespace, Labels: map[string]string{"app": "other"}, ServiceAccount: "default"}},
		{class: ClassClient, how: fleetHow, Caller: Caller{Name: "(a Pod labelled " + labels.ClientOf + "=" + f.Name + ")", Namespace: f.Namespace, Labels: map[string]string{labels.ClientOf: f.Name}, ServiceAccount: "default"}},
		{class: ClassNamespace, how: fleetHow, Caller: Caller{Name: "(another Pod of " + f.Namespace + ")", Namespace: f.Namespace, Labels: map[string]string{"app": "other"}, ServiceAccount: "default"}},
	}
	operator := Caller{Namespace: c.operator.Namespace, Labels: c.operator.PodLabels, ServiceAccount: c.operator.ServiceAccount}
	switch {
	case opLive || !c.snap.IstioAPI:
		operator.Name = "(the fleet operator)"
		reps = slices.Insert(reps, 1, caller{class: ClassOperator, how: opHow, Caller: operator})
	default:
		// No operator Pod is visible (another cluster's, a process, or
		// unreadable), so whether it has a mesh identity is unknown: both
		// answers are shown.
		meshed, plain := operator, operator
		meshed.Name, plain.Name = operatorWithSidecar, operatorWithoutMesh
		reps = slices.Insert(reps, 1, caller{class: ClassOperator, how: podmesh.Sidecar, Caller: meshed}, caller{class: ClassOperator, Caller: plain})
	}
	if fleetHow != podmesh.None {
		reps = append(reps, caller{class: ClassPlaintextClient, Caller: Caller{Name: "(a client opted out of the mesh)", Namespace: f.Namespace,
			Labels: map[string]string{labels.ClientOf: f.Name, labels.IstioDataPlaneMode: "none"}, ServiceAccount: "default"}})
	}
	if f.Spec.Routing != nil {
		src := f.Spec.Routing.Source
		reps = append(reps,
			caller{class: ClassRoutingSource, how: nsHow(src.Namespace), Caller: Caller{Name: "(the routing source in " + src.Namespace + ")", Namespace: src.Namespace, Labels: routingLabels(f), ServiceAccount: "default"}},
			caller{class: ClassRoutingNS, how: nsHow(src.Namespace), Caller: Caller{Name: "(another Pod of " + src.Namespace + ")", Namespace: src.Namespace, Labels: map[string]string{"app": "other"}, ServiceAccount: "default"}})
	}
	if c.snap.IstioAPI {
		reps = append(reps, caller{class: ClassOtherMeshed, how: podmesh.Sidecar, Caller: Caller{Name: "(a meshed Pod of another namespace)", Namespace: "another-namespace", Labels: lookalike, ServiceAccount: "default"}})
	}
	reps = append(reps,
		caller{class: ClassOtherPlain, Caller: Caller{Name: "(a Pod of another namespace, outside the mesh)", Namespace: "another-namespace", Labels: lookalike, ServiceAccount: "default"}},
		caller{class: ClassExternal, Caller: Caller{Name: "(an address outside the cluster)", IP: "203.0.113.10"}})
	if d.how == podmesh.Ambient {
		reps = append(reps, caller{class: ClassProbe, Caller: Caller{Name: "(kubelet probe via istio-cni)", IP: strings.TrimSuffix(policy.AmbientProbeSourceCIDR, "/32")}})
	}
	for i := range reps {
		if reps[i].IP == "" {
			reps[i].IP = fmt.Sprintf("198.51.100.%d", i+1)
		}
	}
	out = append(out, reps...)
	for _, x := range c.extra {
		how := podmesh.None
		if x.Meshed {
			how = podmesh.Sidecar
			if c.nsAmbient(x.Namespace) {
				how = podmesh.Ambient
			}
		}
		x.Labels = maps.Clone(x.Labels)
		out = append(out, caller{class: c.classOf(x.Namespace, x.Labels, x.Meshed), how: how, Caller: x})
	}
	for i := range out {
		if out[i].IP == "" && out[i].Namespace != "" {
			// A Pod without an address yet still has a verdict; the
			// documentation range keeps it from matching any ipBlock.
			out[i].IP = fmt.Sprintf("198.51.100.%d", 150+i%100)
		}
		out[i].Class = out[i].class
		out[i].Meshed = out[i].how != podmesh.None
	}
	return out
}

func (c *snapshotContext) judgeIngress(d dest, cl caller, port int) (Entry, error) {
	e := Entry{Member: d.pod.Name, Port: port, WirePort: port, Caller: cl.Caller}
	// ztunnel carries a meshed caller's connection to an ambient Pod in
	// HBONE: the CNI sees 15008, Istio judges the port inside.
	if cl.how != podmesh.None && d.how == podmesh.Ambient {
		e.WirePort = policy.HBONEPort
	}
	portName := map[int]string{names.AppPort: names.AppPortName, names.PeerPort: names.PeerPortName}[e.WirePort]
	dst := Endpoint{Namespace: d.pod.Namespace, NamespaceLabels: c.labelsOf(d.pod.Namespace), Labels: d.pod.Labels, IP: cmp.Or(d.pod.Status.PodIP, "198.51.100.100")}
	nv, err := c.nets.Judge(c.endpoint(cl), dst, e.WirePort, portName, corev1.ProtocolTCP)
	if err != nil {
		return e, err
	}
	nv.Unknown = c.npUnknown[d.pod.Namespace] || (cl.Namespace != "" && c.npUnknown[cl.Namespace])
	e.Network = nv
	e.Istio = c.judgeIstio(d, cl, port)
	e.Unknown = e.Istio.Unknown || nv.Unknown
	e.Allowed = nv.Allowed && e.Istio.Allowed && !e.Unknown
	return e, nil
}

func (c *snapshotContext) judgeIstio(d dest, cl caller, port int) IstioVerdict {
	switch {
	case !c.snap.IstioAPI:
		return IstioVerdict{Allowed: true, Index: -1, Rule: "no Istio API on this cluster"}
	case d.how == podmesh.None:
		return IstioVerdict{Allowed: true, Index: -1, Rule: "member not in the mesh: no Istio rule applies"}
	case cl.class == ClassProbe:
		// istio-cni rewrites the kubelet's probes to come from this
		// link-local address precisely so that ztunnel lets them through
		// without identity.
		return IstioVerdict{Applies: true, Allowed: true, Index: -1, Rule: "kubelet probes from " + cl.IP + " bypass ztunnel"}
	case !c.istioOK:
		return IstioVerdict{Applies: true, Unknown: true, Index: -1, Rule: "Istio policies could not be read"}
	}
	if port == policy.HBONEPort {
		if cl.how == podmesh.None {
			return IstioVerdict{Applies: true, Index: -1, Rule: "ztunnel accepts only mTLS (HBONE) on 15008"}
		}
		return IstioVerdict{Applies: true, Allowed: true, Index: -1, Rule: "HBONE tunnel accepted; the port inside is judged on its own row"}
	}
	ns := d.pod.Namespace
	var pas []unstructured.Unstructured
	for _, pa := range c.snap.PeerAuthentications {
		if pa.GetNamespace() == ns {
			pas = append(pas, pa)
		}
	}
	var aps []authzeval.Policy
	for _, ap := range c.snap.AuthorizationPolicies {
		if ap.GetNamespace() == ns {
			aps = append(aps, authzeval.FromUnstructured(&ap, d.pod.Labels))
		}
	}
	slices.SortFunc(aps, func(a, b authzeval.Policy) int { return strings.Compare(a.Name, b.Name) })
	mode := authzeval.MTLSInForce(pas, d.pod.Labels, port, d.how == podmesh.Ambient)
	req := authzeval.Request{MTLS: cl.how != podmesh.None, Port: port}
	if req.MTLS {
		req.Principal = policy.Principal(c.trustDomain, cl.Namespace, cl.ServiceAccount)
		req.Namespace = cl.Namespace
	}
	dec := authzeval.Evaluate(mode.Mode, aps, req)
	v := IstioVerdict{Applies: true, Allowed: dec.Allowed, MTLS: mode.Mode, MTLSSource: mode.Source, Policy: dec.Policy, Index: dec.Rule}
	modeText := mode.Mode + " (Istio default)"
	if mode.Source != "" {
		modeText = mode.Mode + " by PeerAuthentication " + mode.Source
		if mode.PortLevel {
			modeText += fmt.Sprintf(" port %d", port)
		}
	}
	switch {
	case dec.Policy != "":
		action := "ALLOW"
		if !dec.Allowed {
			action = "DENY"
		}
		v.Rule = fmt.Sprintf("%s; %s %s rules[%d]", modeText, action, dec.Policy, dec.Rule)
	default:
		v.Rule = modeText + "; " + dec.Why
	}
	return v
}

// egress judges the members' outbound connections: everything the fleet's
// policy opens, and what it must keep closed.
func (c *snapshotContext) egress(d dest, dests []dest) ([]EgressEntry, error) {
	f := &c.snap.Fleet
	istiodNS := cmp.Or(c.labelsOf(f.Namespace)[labels.MeshControlPlane], defaultIstiodNamespace)
	if f.Spec.Mesh != nil && f.Spec.Mesh.Istio != nil && f.Spec.Mesh.Istio.ControlPlaneNamespace != "" {
		istiodNS = f.Spec.Mesh.Istio.ControlPlaneNamespace
	}
	peer := Target{Class: TargetPeer, Name: "(another member)", Namespace: f.Namespace, IP: "198.51.100.101"}
	peerLabels, peerHow := d.pod.Labels, d.how
	for _, o := range dests {
		if o.pod.Name != d.pod.Name {
			peer = Target{Class: TargetPeer, Name: o.pod.Namespace + "/" + o.pod.Name, Namespace: o.pod.Namespace, IP: o.pod.Status.PodIP}
			peerLabels, peerHow = o.pod.Labels, o.how
			break
		}
	}
	type out struct {
		t        Target
		labels   map[string]string
		port     int
		protocol corev1.Protocol
		meshed   bool
	}
	targets := []out{
		{peer, peerLabels, names.PeerPort, corev1.ProtocolTCP, peerHow != podmesh.None},
		{Target{Class: TargetDNS, Name: "(cluster DNS)", Namespace: network.DNSNamespace, IP: "198.51.100.53"}, map[string]string{labels.K8sApp: network.DNSAppLabelValue}, network.DNSPort, corev1.ProtocolUDP, false},
		{Target{Class: TargetDNS, Name: "(cluster DNS)", Namespace: network.DNSNamespace, IP: "198.51.100.53"}, map[string]string{labels.K8sApp: network.DNSAppLabelValue}, network.DNSPort, corev1.ProtocolTCP, false},
		{Target{Class: TargetHTTPS, Name: "(S3, STS: any address)", IP: "203.0.113.10"}, nil, network.HTTPSPort, corev1.ProtocolTCP, false},
		{Target{Class: TargetPodIdentityAgent, Name: "(EKS Pod Identity Agent)", IP: strings.TrimSuffix(network.PodIdentityAgentCIDRv4, "/32")}, nil, network.PodIdentityAgentPort, corev1.ProtocolTCP, false},
		{Target{Class: TargetPodIdentityAgent, Name: "(EKS Pod Identity Agent, IPv6)", IP: strings.TrimSuffix(network.PodIdentityAgentCIDRv6, "/128")}, nil, network.PodIdentityAgentPort, corev1.ProtocolTCP, false},
		{Target{Class: TargetInstanceMetadata, Name: "(instance metadata service)", IP: "169.254.169.254"}, nil, 80, corev1.ProtocolTCP, false},
		{Target{Class: TargetIstiod, Name: "(istiod)", Namespace: istiodNS, IP: "198.51.100.12"}, map[string]string{labels.IstiodApp: network.IstiodAppLabelValue}, network.IstiodXDSPort, corev1.ProtocolTCP, false},
		{Target{Class: TargetOther, Name: "(an address outside the cluster)", IP: "203.0.113.10"}, nil, 80, corev1.ProtocolTCP, false},
		{Target{Class: TargetOther, Name: "(another Pod of " + f.Namespace + ")", Namespace: f.Namespace, IP: "198.51.100.102"}, map[string]string{"app": "other"}, names.AppPort, corev1.ProtocolTCP, false},
		{Target{Class: TargetOther, Name: "(a Pod of another namespace)", Namespace: "another-namespace", IP: "198.51.100.103"}, map[string]string{"app": "other"}, names.AppPort, corev1.ProtocolTCP, false},
	}
	src := Endpoint{Namespace: d.pod.Namespace, NamespaceLabels: c.labelsOf(d.pod.Namespace), Labels: d.pod.Labels, IP: cmp.Or(d.pod.Status.PodIP, "198.51.100.100")}
	var res []EgressEntry
	for _, t := range targets {
		e := EgressEntry{Member: d.pod.Name, Target: t.t, Port: t.port, WirePort: t.port, Protocol: string(t.protocol)}
		if t.meshed && d.how != podmesh.None && peerHow == podmesh.Ambient && t.t.Class == TargetPeer {
			e.WirePort = policy.HBONEPort
		}
		dst := Endpoint{IP: t.t.IP}
		if t.t.Namespace != "" {
			dst = Endpoint{Namespace: t.t.Namespace, NamespaceLabels: c.labelsOf(t.t.Namespace), Labels: t.labels, IP: t.t.IP}
		}
		portName := ""
		if t.t.Class == TargetPeer && e.WirePort == names.PeerPort {
			portName = names.PeerPortName
		}
		nv, err := c.nets.Judge(src, dst, e.WirePort, portName, t.protocol)
		if err != nil {
			return nil, err
		}
		nv.Unknown = c.npUnknown[d.pod.Namespace] || (t.t.Namespace != "" && c.npUnknown[t.t.Namespace])
		e.Network, e.Allowed, e.Unknown = nv, nv.Allowed && !nv.Unknown, nv.Unknown
		res = append(res, e)
	}
	return res, nil
}
