package explore

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
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

// TestDescribeShowsWhatTheJudgeSaw: a trace line names each Pod with the
// facts the judge decides on (proxy, captured, terminating, not running),
// the Istio policies and the namespace's mesh labels.
func TestDescribeShowsWhatTheJudgeSaw(t *testing.T) {
	pod := func(name, uid string, proxy, captured, terminating, running bool) *unstructured.Unstructured {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "x1-app", Name: name, UID: types.UID(uid)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "celld"}}}}
		if proxy {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: podmesh.ProxyContainer})
		}
		if captured {
			p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"}
		}
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1e9, 0)}
		}
		if running {
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.250.0.9"}
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: obj}
	}
	pa := &unstructured.Unstructured{}
	pa.SetNamespace("x1-app")
	pa.SetName("a-mesh")
	ns := &unstructured.Unstructured{}
	ns.SetName("x1-app")
	ns.SetLabels(map[string]string{labels.IstioDataPlaneMode: "ambient", labels.MeshMTLS: "strict"})
	s := &snapshot{rv: 42, step: 4, last: "DELETED peerauthentications x1-app/b-mesh (found by a relist)",
		objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{
			gvrPods: {"x1-app/a-0": pod("a-0", "uid-0aaa", false, true, false, true), "x1-app/a-1": pod("a-1", "uid-1bbb", true, false, true, true),
				"x1-app/a-2": pod("a-2", "uid-2ccc", false, false, false, false), "x2-app/z-0": pod("z-0", "uid-9zzz", true, true, true, false)},
			gvrPAs:        {"x1-app/a-mesh": pa},
			gvrNamespaces: {"/x1-app": ns},
		}}
	s.objs[gvrPods]["x2-app/z-0"].SetNamespace("x2-app")
	got := s.describe("x1-app")
	want := `rv 42 step 4 DELETED peerauthentications x1-app/b-mesh (found by a relist) | pods [a-0[0aaa]C a-1[1bbb]PT a-2[2ccc]~] | PA [a-mesh] AP [] | ns istio.io/dataplane-mode="ambient" core.navique.com/mesh-mtls="strict" | ztunnel false`
	if got != want {
		t.Fatalf("describe =\n%s\nwant\n%s", got, want)
	}
}
