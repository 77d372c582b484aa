package contract

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ericdev/fleetmesh/shared/labels"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		labels   map[string]string
		want     State
		problems int
	}{
		{"plain namespace", map[string]string{"team": "a"}, State{}, 0},
		{"request only: not enrolled yet", map[string]string{labels.Mesh: "enabled"}, State{Request: RequestEnabled}, 0},
		{"opt-out", map[string]string{labels.Mesh: "disabled"}, State{Request: RequestDisabled}, 0},
		{"enrolled ambient", map[string]string{
			labels.Mesh: "enabled", labels.MeshState: "enrolled", labels.MeshDataPlane: "ambient",
			labels.MeshMTLS: "strict", labels.MeshIsolation: "namespace", labels.MeshControlPlane: "istio-system",
			labels.AllowFromPrefix + "edge": "true", labels.AllowFromPrefix + "fleet-system": "true",
		}, State{Request: RequestEnabled, Enrolled: true, DataPlane: Ambient, MTLS: "strict", Isolation: "namespace",
			ControlPlane: "istio-system", Edges: []string{"edge", "fleet-system"}}, 0},
		{"state without a known data plane is not enrolled", map[string]string{labels.MeshState: "enrolled", labels.MeshDataPlane: "waypoint"},
			State{}, 1},
		{"unknown request value", map[string]string{labels.Mesh: "yes"}, State{}, 1},
		{"unknown state value", map[string]string{labels.MeshState: "enrolling", labels.MeshDataPlane: "sidecar"}, State{}, 1},
		{"bad edge", map[string]string{labels.AllowFromPrefix + "edge": "yes"}, State{}, 1},
		{"Istio's ambient label alone: captured, not enrolled", map[string]string{labels.IstioDataPlaneMode: "ambient"},
			State{AmbientLabelled: true}, 0},
		{"announced for ambient: joining, not enrolled", map[string]string{labels.Mesh: "enabled", labels.MeshState: "joining"},
			State{Request: RequestEnabled, Joining: true}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := Parse(tc.labels)
			assert.Equal(t, tc.want, got)
			assert.Len(t, problems, tc.problems)
		})
	}
}

func TestDeclaration(t *testing.T) {
	l, err := Declaration{Enroll: true, Edges: []string{"fleet-system", "edge", "shop"}}.Labels("shop")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		labels.Mesh:                             "enabled",
		labels.AllowFromPrefix + "fleet-system": "true",
		labels.AllowFromPrefix + "edge":         "true",
	}, l, "no edge to the namespace itself")
	_, err = Declaration{Edges: []string{"Not_A_Namespace"}}.Labels("shop")
	assert.Error(t, err)

	ac, err := NamespaceApply("shop", Declaration{})
	require.NoError(t, err)
	assert.Empty(t, ac.Labels, "an empty declaration withdraws everything the writer had")
}

func TestAdmits(t *testing.T) {
	s := State{Edges: []string{"edge"}}
	assert.True(t, s.Admits("shop", "shop"))
	assert.True(t, s.Admits("shop", "edge"))
	assert.False(t, s.Admits("shop", "other"))
}

func TestFieldManager(t *testing.T) {
	assert.Equal(t, "fleet-operator/fleet/shop/orders", FieldManager("fleet-operator", "fleet/shop/orders"))
	long := FieldManager("fleet-operator", "fleet/"+strings.Repeat("n", 63)+"/"+strings.Repeat("f", 47))
	assert.LessOrEqual(t, len(long), 128)
	other := FieldManager("fleet-operator", "fleet/"+strings.Repeat("n", 63)+"/"+strings.Repeat("f", 46)+"g")
	assert.NotEqual(t, long, other, "long writers stay distinct")
}

// FuzzParse: any labels parse without panicking; enrolled only with the
// documented values; every edge is a valid namespace whose key round-trips.
func FuzzParse(f *testing.F) {
	f.Add(labels.MeshState, "enrolled", labels.MeshDataPlane, "ambient", labels.AllowFromPrefix+"edge", "true")
	f.Add(labels.Mesh, "enabled", labels.AllowFromPrefix+"", "true", "x", "y")
	f.Add(labels.AllowFromPrefix+"a/b", "true", labels.MeshDataPlane, "sidecar", labels.MeshState, "enrolled")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		s, _ := Parse(map[string]string{k1: v1, k2: v2, k3: v3})
		if s.Enrolled && s.DataPlane != Ambient && s.DataPlane != Sidecar {
			t.Fatalf("enrolled with data plane %q", s.DataPlane)
		}
		for _, e := range s.Edges {
			if len(validation.IsDNS1123Label(e)) > 0 {
				t.Fatalf("edge %q is not a namespace", e)
			}
			k, err := EdgeKey(e)
			if err != nil || len(validation.IsQualifiedName(k)) > 0 {
				t.Fatalf("edge %q gives key %q (%v)", e, k, err)
			}
		}
	})
}

// FuzzEdgeKey: a key is produced only for namespace names, and it is always
// a valid label key that Parse reads back.
func FuzzEdgeKey(f *testing.F) {
	f.Add("edge")
	f.Add("")
	f.Add(strings.Repeat("a", 64))
	f.Fuzz(func(t *testing.T, ns string) {
		k, err := EdgeKey(ns)
		if err != nil {
			return
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Fatalf("key %q: %v", k, errs)
		}
		s, problems := Parse(map[string]string{k: "true"})
		if len(problems) > 0 || len(s.Edges) != 1 || s.Edges[0] != ns {
			t.Fatalf("round trip of %q: %+v %v", ns, s, problems)
		}
	})
}

func TestStateLabelsRoundTrip(t *testing.T) {
	for _, e := range []Enrollment{
		{Ambient, MTLSStrict, IsolationNamespace, "istio-system"},
		{Sidecar, MTLSPermissive, IsolationOff, "istio-user"},
		{Ambient, MTLSPermissive, IsolationStrict, "istio-system"},
	} {
		l, err := e.StateLabels()
		if err != nil {
			t.Fatalf("%+v: %v", e, err)
		}
		if len(l) != len(StateKeys()) {
			t.Fatalf("%+v: %d labels, want %d", e, len(l), len(StateKeys()))
		}
		s, problems := Parse(l)
		if len(problems) > 0 || !s.Enrolled || s.DataPlane != e.DataPlane || s.MTLS != e.MTLS || s.Isolation != e.Isolation || s.ControlPlane != e.ControlPlane {
			t.Errorf("%+v: parsed back as %+v (%v)", e, s, problems)
		}
	}
	for _, bad := range []Enrollment{
		{"none", MTLSStrict, IsolationOff, "istio-system"},
		{Ambient, "STRICT", IsolationOff, "istio-system"},
		{Ambient, MTLSStrict, "total", "istio-system"},
		{Ambient, MTLSStrict, IsolationOff, ""},
	} {
		if _, err := bad.StateLabels(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
