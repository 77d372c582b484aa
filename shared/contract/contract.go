// Package contract is the mesh-enrollment contract between the mesh operator
// and workload operators such as the fleet operator. They never import each
// other: they meet on Namespace labels, whose keys live in package labels and
// whose meaning lives here. docs/mesh-contract.md describes it for users.
//
//   - Enrollment request: core.navique.com/mesh=enabled (an admin, the
//     ServiceMesh's enrollNamespaces, or a workload operator whose workload
//     is in mode auto or enabled); =disabled, an admin's alone, wins over
//     every request. Who may write which value is Table (writers.go), and
//     ApplyLabels is the one way the operators write.
//   - Mesh state: core.navique.com/mesh-state=enrolled plus data plane, mTLS,
//     isolation and control-plane labels, written by the mesh operator only,
//     after it applied what they claim.
//   - Edges: allow-from.core.navique.com/<namespace>=true, declared by
//     workload operators for traffic that namespace isolation must admit.
//
// Labels with several writers (requests, edges) are written with server-side
// apply, one field manager per writer: a label stays while any writer still
// applies it and goes with the last one.
package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Request is what the enrollment label asks for.
type Request string

const (
	// NoRequest: the label is absent (or holds an unknown value).
	NoRequest Request = ""
	// RequestEnabled asks for enrollment.
	RequestEnabled Request = labels.MeshEnabled
	// RequestDisabled forbids enrollment whatever else asks.
	RequestDisabled Request = labels.MeshDisabled
)

// DataPlane is how an enrolled namespace's workloads are meshed.
type DataPlane string

// Data planes.
const (
	Ambient DataPlane = "ambient"
	Sidecar DataPlane = "sidecar"
)

// State is a namespace's mesh state as its labels tell it.
type State struct {
	Request Request
	// Enrolled is true only when the mesh operator says so and the data
	// plane it names is one this contract knows.
	Enrolled     bool
	DataPlane    DataPlane
	MTLS         string
	Isolation    string
	ControlPlane string
	// Edges are the source namespaces declared as allowed, sorted.
	Edges []string
	// AmbientLabelled: Istio's own istio.io/dataplane-mode=ambient is on
	// the namespace, whoever wrote it. istio-cni captures its Pods from
	// then on, whether or not the mesh operator's state labels say so yet.
	AmbientLabelled bool
	// Joining: the mesh operator announces an ambient enrollment it holds
	// until the namespace's NetworkPolicies admit capture (mesh-state=joining).
	Joining bool
	// IstioOptOut is an admin's Istio opt-out label on the namespace
	// ("istio-injection=disabled", "istio.io/dataplane-mode=none"; see
	// IstioOptOut): it keeps the namespace out as Request disabled does.
	IstioOptOut string
}

// OptedOut: an admin keeps the namespace out of the mesh
// (core.navique.com/mesh=disabled, or an Istio opt-out label).
func (s State) OptedOut() bool { return s.Request == RequestDisabled || s.IstioOptOut != "" }

// Problem is a label whose value this contract does not know; the state is
// read as not enrolled rather than guessed.
type Problem struct{ Key, Value string }

func (p Problem) Error() string {
	return fmt.Sprintf("namespace label %s=%q is not part of the mesh contract", p.Key, p.Value)
}

// Parse reads a namespace's labels. Unknown values are reported as problems
// and never make a namespace look enrolled.
func Parse(nsLabels map[string]string) (State, []Problem) {
	var s State
	var problems []Problem
	switch v, ok := nsLabels[labels.Mesh]; {
	case !ok:
	case v == labels.MeshEnabled || v == labels.MeshDisabled:
		s.Request = Request(v)
	default:
		problems = append(problems, Problem{labels.Mesh, v})
	}
	for k, v := range nsLabels {
		if ns, ok := strings.CutPrefix(k, labels.AllowFromPrefix); ok {
			if v == "true" && validation.IsDNS1123Label(ns) == nil {
				s.Edges = append(s.Edges, ns)
			} else {
				problems = append(problems, Problem{k, v})
			}
		}
	}
	sort.Strings(s.Edges)
	s.AmbientLabelled = nsLabels[labels.IstioDataPlaneMode] == string(Ambient)
	s.IstioOptOut = IstioOptOut(nsLabels)
	s.Joining = nsLabels[labels.MeshState] == labels.MeshStateJoining
	if nsLabels[labels.MeshState] != labels.MeshStateEnrolled {
		if v, ok := nsLabels[labels.MeshState]; ok && !s.Joining {
			problems = append(problems, Problem{labels.MeshState, v})
		}
		return s, problems
	}
	dp := DataPlane(nsLabels[labels.MeshDataPlane])
	if dp != Ambient && dp != Sidecar {
		return s, append(problems, Problem{labels.MeshDataPlane, string(dp)})
	}
	s.Enrolled, s.DataPlane = true, dp
	s.MTLS = nsLabels[labels.MeshMTLS]
	s.Isolation = nsLabels[labels.MeshIsolation]
	s.ControlPlane = nsLabels[labels.MeshControlPlane]
	return s, problems
}

// Admits reports whether the namespace admits traffic from another one
// under namespace isolation: it is the same namespace, or a declared edge.
func (s State) Admits(namespace, from string) bool {
	if namespace == from {
		return true
	}
	for _, e := range s.Edges {
		if e == from {
			return true
		}
	}
	return false
}

// EdgeKey is the label key declaring an edge from a source namespace.
func EdgeKey(from string) (string, error) {
	if errs := validation.IsDNS1123Label(from); len(errs) > 0 {
		return "", fmt.Errorf("edge source %q is not a namespace name: %s", from, strings.Join(errs, "; "))
	}
	return labels.AllowFromPrefix + from, nil
}

// Declaration is what one writer wants on a namespace: enrollment and edges.
type Declaration struct {
	Enroll bool
	Edges  []string
}

// Labels are the declaration's namespace labels.
func (d Declaration) Labels(self string) (map[string]string, error) {
	out := map[string]string{}
	if d.Enroll {
		out[labels.Mesh] = labels.MeshEnabled
	}
	for _, e := range d.Edges {
		if e == self {
			continue // a namespace always admits itself
		}
		k, err := EdgeKey(e)
		if err != nil {
			return nil, err
		}
		out[k] = "true"
	}
	return out, nil
}

// NamespaceApply is the server-side apply configuration of one writer's
// labels on a namespace. Applying an empty declaration with the same field
// manager withdraws exactly what that writer declared.
func NamespaceApply(namespace string, d Declaration) (*corev1ac.NamespaceApplyConfiguration, error) {
	l, err := d.Labels(namespace)
	if err != nil {
		return nil, err
	}
	ac := corev1ac.Namespace(namespace)
	if len(l) > 0 {
		ac.WithLabels(l)
	}
	return ac, nil
}

// FieldManager names one writer of namespace labels: operator plus the
// object on whose behalf it writes (e.g. a fleet), within the API's
// 128-character limit.
func FieldManager(operator, writer string) string {
	m := operator + "/" + writer
	if len(m) > 128 {
		// Truncating could make two writers one; a digest keeps them apart.
		sum := sha256.Sum256([]byte(writer))
		m = operator + "/" + hex.EncodeToString(sum[:16])
	}
	return m
}

// Values of the mTLS and isolation state labels.
const (
	MTLSStrict         = "strict"
	MTLSPermissive     = "permissive"
	IsolationOff       = "off"
	IsolationNamespace = "namespace"
	IsolationStrict    = "strict"
)

// Enrollment is what the mesh operator has applied to a namespace; its
// StateLabels are what the operator writes once that is in place.
type Enrollment struct {
	DataPlane    DataPlane
	MTLS         string
	Isolation    string
	ControlPlane string
}

// StateLabels are the mesh-state labels describing e. A value outside the
// contract is an error: the mesh operator must never write a state that a
// reader would have to guess at.
func (e Enrollment) StateLabels() (map[string]string, error) {
	if e.DataPlane != Ambient && e.DataPlane != Sidecar {
		return nil, fmt.Errorf("data plane %q is not part of the mesh contract", e.DataPlane)
	}
	if e.MTLS != MTLSStrict && e.MTLS != MTLSPermissive {
		return nil, fmt.Errorf("mTLS mode %q is not part of the mesh contract", e.MTLS)
	}
	if e.Isolation != IsolationOff && e.Isolation != IsolationNamespace && e.Isolation != IsolationStrict {
		return nil, fmt.Errorf("isolation %q is not part of the mesh contract", e.Isolation)
	}
	if errs := validation.IsDNS1123Label(e.ControlPlane); len(errs) > 0 {
		return nil, fmt.Errorf("control-plane namespace %q: %s", e.ControlPlane, strings.Join(errs, "; "))
	}
	return map[string]string{
		labels.MeshState:        labels.MeshStateEnrolled,
		labels.MeshDataPlane:    string(e.DataPlane),
		labels.MeshMTLS:         e.MTLS,
		labels.MeshIsolation:    e.Isolation,
		labels.MeshControlPlane: e.ControlPlane,
	}, nil
}

// StateKeys are the label keys StateLabels writes.
func StateKeys() []string {
	return []string{labels.MeshState, labels.MeshDataPlane, labels.MeshMTLS, labels.MeshIsolation, labels.MeshControlPlane}
}
