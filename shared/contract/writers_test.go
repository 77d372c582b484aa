package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// docRows reads the label table of docs/mesh-contract.md: label, value,
// written by.
func docRows(t *testing.T) [][3]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "mesh-contract.md"))
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), "| label | value | written by | meaning |\n| --- | --- | --- | --- |\n")
	require.True(t, ok, "docs/mesh-contract.md has the label table")
	var rows [][3]string
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		require.Len(t, cells, 4, "row %q", line)
		unquote := func(s string) string { return strings.Trim(strings.TrimSpace(s), "`") }
		rows = append(rows, [3]string{unquote(cells[0]), unquote(cells[1]), strings.TrimSpace(cells[2])})
	}
	return rows
}

// TestDocTableIsTheContract: the documented label table and contract.Table
// are the same rows, so a value the code may write is documented and a
// documented value is one the code knows.
func TestDocTableIsTheContract(t *testing.T) {
	var want [][3]string
	for _, r := range Table {
		ws := make([]string, len(r.Writers))
		for i, w := range r.Writers {
			ws[i] = string(w)
		}
		want = append(want, [3]string{r.Key, r.Value, strings.Join(ws, ", ")})
	}
	assert.Equal(t, want, docRows(t))
}

// TestBuildersWriteOnlyTableValues: every label the contract's builders
// produce is a value its writer may write.
func TestBuildersWriteOnlyTableValues(t *testing.T) {
	d, err := Declaration{Enroll: true, Edges: []string{"fleet-system", "edge"}}.Labels("shop")
	require.NoError(t, err)
	for k, v := range d {
		assert.NoError(t, Permit(WorkloadOperator, k, v))
	}
	for _, dp := range []DataPlane{Ambient, Sidecar} {
		for _, m := range []string{MTLSStrict, MTLSPermissive} {
			for _, iso := range []string{IsolationOff, IsolationNamespace, IsolationStrict} {
				l, err := Enrollment{dp, m, iso, "istio-system"}.StateLabels()
				require.NoError(t, err)
				for k, v := range l {
					assert.NoError(t, Permit(MeshOperator, k, v))
				}
			}
		}
	}
}

func TestPermit(t *testing.T) {
	assert.NoError(t, Permit(WorkloadOperator, labels.Mesh, labels.MeshEnabled))
	assert.NoError(t, Permit(MeshOperator, labels.Mesh, labels.MeshEnabled))
	assert.Error(t, Permit(WorkloadOperator, labels.Mesh, labels.MeshDisabled), "only an admin opts a namespace out")
	assert.Error(t, Permit(MeshOperator, labels.Mesh, labels.MeshDisabled))
	assert.Error(t, Permit(WorkloadOperator, labels.MeshState, labels.MeshStateEnrolled), "state is the mesh operator's")
	assert.Error(t, Permit(MeshOperator, labels.MeshIsolation, "total"), "not a value of the table")
	assert.NoError(t, Permit(MeshOperator, labels.IstioRevision, "canary-1-30"))
	assert.Error(t, Permit(MeshOperator, labels.MeshControlPlane, "Not_A_Namespace"))
	assert.Error(t, Permit(MeshOperator, labels.AllowFromPrefix+"edge", "true"), "edges are declared by workload operators")
	assert.Error(t, Permit(WorkloadOperator, labels.AllowFromPrefix+"edge", "false"))
	assert.Error(t, Permit(WorkloadOperator, "team", "a"), "not a label of the contract")
}

func TestWithhold(t *testing.T) {
	req := map[string]string{labels.Mesh: labels.MeshEnabled, labels.AllowFromPrefix + "fleet-system": "true"}
	tests := []struct {
		name     string
		current  map[string]string
		held     []string
		want     map[string]string
		withheld map[string]string
	}{
		{"nothing there", map[string]string{}, nil, req, map[string]string{}},
		{"an admin's enabled is shared", map[string]string{labels.Mesh: labels.MeshEnabled}, nil, req, map[string]string{}},
		{"disabled: nothing new, not even an edge", map[string]string{labels.Mesh: labels.MeshDisabled}, nil,
			map[string]string{}, map[string]string{labels.Mesh: labels.MeshDisabled, labels.AllowFromPrefix + "fleet-system": ""}},
		{"disabled: a held edge may stay while its writer withdraws", map[string]string{labels.Mesh: labels.MeshDisabled, labels.AllowFromPrefix + "fleet-system": "true"},
			[]string{labels.AllowFromPrefix + "fleet-system"},
			map[string]string{labels.AllowFromPrefix + "fleet-system": "true"}, map[string]string{labels.Mesh: labels.MeshDisabled}},
		{"an unknown value is the admin's to fix", map[string]string{labels.Mesh: "yes"}, nil,
			map[string]string{labels.AllowFromPrefix + "fleet-system": "true"}, map[string]string{labels.Mesh: "yes"}},
		{"istio-injection=disabled opts out as disabled does", map[string]string{labels.IstioInjection: "disabled"}, nil,
			map[string]string{}, map[string]string{labels.Mesh: "", labels.AllowFromPrefix + "fleet-system": ""}},
		{"istio.io/dataplane-mode=none opts out as disabled does", map[string]string{labels.IstioDataPlaneMode: "none", labels.Mesh: labels.MeshEnabled},
			[]string{labels.AllowFromPrefix + "fleet-system"},
			map[string]string{labels.AllowFromPrefix + "fleet-system": "true"}, map[string]string{labels.Mesh: labels.MeshEnabled}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, withheld := Withhold(tc.current, tc.held, req)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.withheld, withheld)
		})
	}
}

func managedEntry(manager string, op metav1.ManagedFieldsOperationType, raw string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(raw)}
}

// TestLabelOwnership: which labels a field manager holds through
// server-side apply, and which someone else holds (any other manager, or
// the same manager through an update), counted one way for both operators.
func TestLabelOwnership(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", ManagedFields: []metav1.ManagedFieldsEntry{
		managedEntry("mesh-operator", metav1.ManagedFieldsOperationApply, `{"f:metadata":{"f:labels":{"f:a":{},"f:b":{}}}}`),
		managedEntry("mesh-operator", metav1.ManagedFieldsOperationUpdate, `{"f:metadata":{"f:labels":{"f:c":{}}}}`),
		managedEntry("kubectl", metav1.ManagedFieldsOperationApply, `{"f:metadata":{"f:labels":{"f:b":{},"f:d":{}}}}`),
		managedEntry("mesh-operator", metav1.ManagedFieldsOperationApply, `not json`),
	}}}
	assert.Equal(t, []string{"a", "b"}, LabelsHeldBy(ns, "mesh-operator"))
	assert.Equal(t, map[string]bool{"a": true, "b": true}, LabelsAppliedBy(ns, "mesh-operator"))
	assert.Equal(t, map[string]bool{"b": true, "c": true, "d": true}, LabelsHeldByOthers(ns, "mesh-operator"))
	assert.Empty(t, LabelsAppliedBy(ns, "nobody"))
}

// TestWithholdIstioLabels (issue 41 item 5): a value of Istio's own labels
// the writer does not hold is never replaced; one it holds is its own to
// change; an opt-out value keeps out every key not already held.
func TestWithholdIstioLabels(t *testing.T) {
	for _, tc := range []struct {
		name        string
		current     map[string]string
		held        []string
		want, apply map[string]string
		withheld    map[string]string
	}{
		{"an admin's disabled stays", map[string]string{labels.IstioInjection: "disabled", labels.Mesh: labels.MeshEnabled}, nil,
			map[string]string{labels.IstioInjection: "enabled", labels.MeshState: "enrolled"}, map[string]string{},
			map[string]string{labels.IstioInjection: "disabled", labels.MeshState: ""}},
		{"an admin's none stays", map[string]string{labels.IstioDataPlaneMode: "none"}, nil,
			map[string]string{labels.IstioDataPlaneMode: "ambient"}, map[string]string{},
			map[string]string{labels.IstioDataPlaneMode: "none"}},
		{"someone else's revision is not replaced", map[string]string{labels.IstioRevision: "canary"}, nil,
			map[string]string{labels.IstioRevision: "stable"}, map[string]string{},
			map[string]string{labels.IstioRevision: "canary"}},
		{"the same value is shared", map[string]string{labels.IstioInjection: "enabled"}, nil,
			map[string]string{labels.IstioInjection: "enabled"}, map[string]string{labels.IstioInjection: "enabled"}, map[string]string{}},
		{"a held value is the writer's to change", map[string]string{labels.IstioRevision: "canary"}, []string{labels.IstioRevision},
			map[string]string{labels.IstioRevision: "stable"}, map[string]string{labels.IstioRevision: "stable"}, map[string]string{}},
		{"absent: written", map[string]string{}, nil,
			map[string]string{labels.IstioDataPlaneMode: "ambient"}, map[string]string{labels.IstioDataPlaneMode: "ambient"}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apply, withheld := Withhold(tc.current, tc.held, tc.want)
			assert.Equal(t, tc.apply, apply)
			assert.Equal(t, tc.withheld, withheld)
		})
	}
	assert.Equal(t, "istio-injection=disabled", IstioOptOut(map[string]string{labels.IstioInjection: "disabled"}))
	assert.Equal(t, "istio.io/dataplane-mode=none", IstioOptOut(map[string]string{labels.IstioDataPlaneMode: "none"}))
	assert.Empty(t, IstioOptOut(map[string]string{labels.IstioInjection: "enabled", labels.IstioDataPlaneMode: "ambient"}))
	st, _ := Parse(map[string]string{labels.IstioDataPlaneMode: "none"})
	assert.True(t, st.OptedOut())
}
