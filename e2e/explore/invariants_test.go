package explore

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestHonestAtRest: the mesh-mtls label and the namespace-wide
// PeerAuthentication must agree at rest, in both directions, unless
// Istio's API is not served.
func TestHonestAtRest(t *testing.T) {
	w := world{app: "x1-app", edge: "x1-edge", other: "x1-other"}
	ns := func(mtls string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetName(w.app)
		if mtls != "" {
			u.SetLabels(map[string]string{labels.MeshMTLS: mtls})
		}
		return u
	}
	pa := func(mode string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": mode}}}}
		u.SetNamespace(w.app)
		u.SetName("mesh-mtls")
		return u
	}
	for _, tc := range []struct {
		name   string
		label  string
		pa     *unstructured.Unstructured
		absent bool
		wrong  bool
	}{
		{"strict and STRICT", "strict", pa("STRICT"), false, false},
		{"permissive and PERMISSIVE", "permissive", pa("PERMISSIVE"), false, false},
		{"not enrolled", "", nil, false, false},
		{"says strict, policy PERMISSIVE", "strict", pa("PERMISSIVE"), false, true},
		{"says strict, no policy", "strict", nil, false, true},
		{"says permissive, policy STRICT", "permissive", pa("STRICT"), false, true},
		{"says strict while Istio's API is gone", "strict", nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &snapshot{objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{
				gvrNamespaces: {"/" + w.app: ns(tc.label)}, gvrPAs: {}},
				absent: map[schema.GroupVersionResource]bool{gvrPAs: tc.absent}}
			if tc.pa != nil {
				s.objs[gvrPAs][w.app+"/mesh-mtls"] = tc.pa
			}
			got := newJudgement(w).honestAtRest(s)
			if (len(got) > 0) != tc.wrong {
				t.Fatalf("honestAtRest = %q, want a violation: %t", got, tc.wrong)
			}
		})
	}
}
