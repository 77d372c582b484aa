// Package explore generates random sequences of user and environment
// actions against both operators on the local test bed and judges every
// state the API server goes through against the seeds' promises (see
// invariants.go). A failing sequence is shrunk to a minimal one and written
// as a replayable file; checked-in files under testdata/regressions run in
// `make test`.
package explore

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
)

// Action is one step of a sequence: a kind from the alphabet and its
// arguments. Sequences are data, so they can be printed, shrunk, written
// down and replayed.
type Action struct {
	Kind string `json:"kind"`
	// Fleet names the fleet a fleet action targets.
	Fleet string `json:"fleet,omitempty"`
	// Arg is the kind's parameter (a replica count, a mode, on/off...).
	Arg string `json:"arg,omitempty"`
}

func (a Action) String() string {
	s := a.Kind
	if a.Fleet != "" {
		s += " " + a.Fleet
	}
	if a.Arg != "" {
		s += " " + a.Arg
	}
	return s
}

// The alphabet. Fleet actions name one of fleetNames.
const (
	FleetCreate     = "fleet.create"     // Arg: "persistent" or ""
	FleetScale      = "fleet.scale"      // Arg: replicas
	FleetImage      = "fleet.image"      // a new image version
	FleetPause      = "fleet.pause"      // Arg: on/off
	FleetIstio      = "fleet.istio"      // Arg: on/off/policies (spec.mesh.istio; policies: applicationAccess Policies)
	FleetMode       = "fleet.mode"       // Arg: auto/enabled/disabled
	FleetRouting    = "fleet.routing"    // Arg: on/gateway/off (Ingress, or an HTTPRoute on the edge namespace's Gateway)
	FleetControlNS  = "fleet.cpns"       // Arg: istio-system/istio-canary (spec.mesh.istio.controlPlaneNamespace; sets spec.mesh.istio)
	FleetDelete     = "fleet.delete"     //
	MeshCreate      = "mesh.create"      // Arg: ambient/sidecar
	MeshDelete      = "mesh.delete"      //
	MeshMTLS        = "mesh.mtls"        // Arg: strict/permissive
	MeshDataPlane   = "mesh.dataplane"   // Arg: ambient/sidecar
	MeshIsolation   = "mesh.isolation"   // Arg: off/namespace/strict
	MeshMaintenance = "mesh.maintenance" // Arg: short (expires 20 s later, by itself)/long/clear
	MeshEnroll      = "mesh.enroll"      // Arg: app/edge/none (spec.enrollNamespaces)
	NamespaceLabel  = "ns.label"         // Arg: enabled/disabled/none (the admin's core.navique.com/mesh)
	OperatorRestart = "operator.restart" // Arg: fleet/mesh (SIGKILL, then start)
	Injector        = "env.injector"     // Arg: on/off (the test sidecar injector)
	HandEdit        = "env.handedit"     // deletes the fleet's NetworkPolicy by hand
	ClientLabel     = "env.client"       // Arg: label/unlabel (the fleet's client Pod's celld.eric.dev/client-of)
	Gateway         = "env.gateway"      // Arg: accept/reject (the played Gateway controller's answer to routes)
	License         = "env.license"      // Arg: delete/restore/expiring (valid 20 s more)/renew (deleted, created again 2 s later)
	LicenseRead     = "env.licenseread"  // Arg: deny/allow (the mesh operator's RBAC to get its license Secret)
	CRDs            = "env.crds"         // Arg: istio-off/istio-on/gateway-off/gateway-on (remove or restore the CRDs)
	// Tenants act as the user explore-tenant, who may edit the world's
	// other namespace only (tenantUser); admins as cluster-admin under the
	// field manager explore-admin.
	TenantIstiod   = "tenant.istiod"   // Arg: on/off (a Deployment dressed as istiod in the tenant's namespace)
	TenantPeerAuth = "tenant.peerauth" // Arg: permissive/disable/off (the tenant's namespace-wide PeerAuthentication)
	AdminOptOut    = "admin.optout"    // Arg: injection/dataplane/clear (Istio's own opt-out labels on the fleets' namespace)
	TenantRelease  = "tenant.release"  // Arg: forge/off (a forged Helm release record of the Sail Operator, tenantRelease)
	// API faults (faults.go): the bed's fault proxy between each operator
	// and the API server.
	Fault     = "env.fault"     // Arg: a fault of faults (for its span) or clear
	APIServer = "env.apiserver" // Arg: restart (kube-apiserver stops and starts again, same port and etcd)
	// Policy engines, tenants and admins of issue 43 (policyengines.go).
	PolicyNSLabels      = "policy.nslabels"      // Arg: on/off (a ValidatingAdmissionPolicy refusing the operators' namespace label changes)
	PolicySTS           = "policy.sts"           // Arg: on/off (a ValidatingAdmissionPolicy refusing StatefulSets without policyLabel)
	PolicyPSS           = "policy.pss"           // Arg: restricted/off (the admin's pod-security.kubernetes.io/enforce on the fleets' namespace)
	TenantNetpol        = "tenant.netpol"        // Arg: on/off (the tenant's own NetworkPolicy blocking HBONE in its namespace)
	TenantSnippet       = "tenant.snippet"       // Arg: on/off (the fleet namespace's editor's configuration-snippet on the fleet's Ingress)
	AdminServiceAccount = "admin.serviceaccount" // Arg: custom/default (spec.serviceAccountName: the admin's ServiceAccount, or none)
)

var fleetNames = []string{"a", "b"}

// weighted alphabet: kinds with the argument choices each can take.
var alphabet = []struct {
	kind   string
	fleet  bool
	args   []string
	weight int
}{
	{FleetCreate, true, []string{"", "persistent"}, 2},
	{FleetScale, true, []string{"1", "2", "3"}, 2},
	{FleetImage, true, nil, 3},
	{FleetPause, true, []string{"on", "off"}, 1},
	{FleetIstio, true, []string{"on", "off", "policies"}, 2},
	{FleetMode, true, []string{"auto", "enabled", "disabled"}, 2},
	{FleetRouting, true, []string{"on", "gateway", "off"}, 2},
	{FleetControlNS, true, []string{"istio-system", "istio-canary"}, 1},
	{FleetDelete, true, nil, 1},
	{MeshCreate, false, []string{"ambient", "sidecar"}, 2},
	{MeshDelete, false, nil, 1},
	{MeshMTLS, false, []string{"strict", "permissive"}, 1},
	{MeshDataPlane, false, []string{"ambient", "sidecar"}, 1},
	{MeshIsolation, false, []string{"off", "namespace", "strict"}, 1},
	{MeshMaintenance, false, []string{"short", "long", "clear"}, 1},
	{MeshEnroll, false, []string{"app", "edge", "none"}, 1},
	{NamespaceLabel, false, []string{"enabled", "disabled", "none"}, 2},
	{OperatorRestart, false, []string{"fleet", "mesh"}, 1},
	{Injector, false, []string{"on", "off"}, 1},
	{HandEdit, true, nil, 1},
	{ClientLabel, true, []string{"label", "unlabel"}, 1},
	{Gateway, false, []string{"accept", "reject"}, 1},
	{License, false, []string{"delete", "restore", "expiring", "renew"}, 1},
	{LicenseRead, false, []string{"deny", "allow"}, 1},
	{CRDs, false, []string{"istio-off", "istio-on", "gateway-off", "gateway-on"}, 1},
	{TenantIstiod, false, []string{"on", "off"}, 1},
	{TenantPeerAuth, false, []string{"permissive", "disable", "off"}, 1},
	{AdminOptOut, false, []string{"injection", "dataplane", "clear"}, 1},
	{TenantRelease, false, []string{"forge", "off"}, 1},
	{Fault, false, faultArgs(), 2},
	{APIServer, false, []string{"restart"}, 1},
	{PolicyNSLabels, false, []string{"on", "off"}, 1},
	{PolicySTS, false, []string{"on", "off"}, 1},
	{PolicyPSS, false, []string{"restricted", "off"}, 1},
	{TenantNetpol, false, []string{"on", "off"}, 1},
	{TenantSnippet, true, []string{"on", "off"}, 1},
	{AdminServiceAccount, true, []string{"custom", "default"}, 1},
}

// Generate is the sequence of n actions for seed: the same seed always
// gives the same sequence. It follows a small model of what exists: an
// action on a fleet that does not exist yet (or on a missing ServiceMesh)
// becomes its creation, so sequences spend their steps on live objects.
func Generate(seed uint64, n int) []Action {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, a := range alphabet {
		total += a.weight
	}
	fleets, mesh := map[string]bool{}, false
	out := make([]Action, 0, n)
	for len(out) < n {
		pick := r.IntN(total)
		for _, a := range alphabet {
			if pick >= a.weight {
				pick -= a.weight
				continue
			}
			act := Action{Kind: a.kind}
			if a.fleet {
				act.Fleet = fleetNames[r.IntN(len(fleetNames))]
			}
			if len(a.args) > 0 {
				act.Arg = a.args[r.IntN(len(a.args))]
			}
			switch {
			case a.fleet && !fleets[act.Fleet] && act.Kind != FleetCreate:
				act.Kind, act.Arg = FleetCreate, alphabet[0].args[r.IntN(2)]
			case strings.HasPrefix(act.Kind, "mesh.") && !mesh && act.Kind != MeshCreate:
				act.Kind, act.Arg = MeshCreate, []string{"ambient", "sidecar"}[r.IntN(2)]
			case act.Kind == FleetCreate && fleets[act.Fleet]:
				act.Kind, act.Arg = FleetImage, ""
			case act.Kind == MeshCreate && mesh:
				act.Kind = MeshDataPlane
			}
			switch act.Kind {
			case FleetCreate:
				fleets[act.Fleet] = true
			case FleetDelete:
				fleets[act.Fleet] = false
			case MeshCreate:
				mesh = true
			case MeshDelete:
				mesh = false
			}
			out = append(out, act)
			break
		}
	}
	return out
}

// Shrink returns a shorter sequence that still fails: it drops one action
// at a time, keeping every removal after which fails still reports a
// failure, until no single removal does. fails runs the sequence for real,
// so each call is one run on the bed.
func Shrink(seq []Action, fails func([]Action) bool) []Action {
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(seq); i++ {
			try := append(append([]Action{}, seq[:i]...), seq[i+1:]...)
			if fails(try) {
				seq, changed = try, true
				i--
			}
		}
	}
	return seq
}

// Sequence is a replayable file: what ran, and what it broke when found.
type Sequence struct {
	Seed    uint64   `json:"seed,omitempty"`
	Actions []Action `json:"actions"`
	// Found is the invariant violation the sequence was shrunk for.
	Found string `json:"found,omitempty"`
}

// Write stores the sequence as indented JSON.
func (s Sequence) Write(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadSequence reads a file written by Write.
func ReadSequence(path string) (Sequence, error) {
	var s Sequence
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	for _, a := range s.Actions {
		if !known(a.Kind) {
			return s, fmt.Errorf("%s: unknown action %q", path, a.Kind)
		}
	}
	return s, nil
}

func known(kind string) bool {
	for _, a := range alphabet {
		if a.kind == kind {
			return true
		}
	}
	return false
}

// Describe prints a sequence one action per line.
func Describe(seq []Action) string {
	lines := make([]string, len(seq))
	for i, a := range seq {
		lines[i] = fmt.Sprintf("%2d. %s", i+1, a)
	}
	return strings.Join(lines, "\n")
}
