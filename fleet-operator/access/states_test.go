package access

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/shared/golden"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// Recorded cluster states. Each is composed here from the operators' own
// builders, as the controllers would have applied them: the fleet's
// NetworkPolicies and mesh policies from fleet-operator/internal, the mesh
// operator's namespace policies and state labels from its golden files
// (mesh-operator/internal/enroll/testdata, pinned there by its builder
// tests for namespace team-a with edges fleet-system and ingress, which is
// why the fleet lives in team-a). Pods are what the StatefulSet, the
// injector and istio-cni would have made. TestRecordedStates writes them to
// testdata/states (go test -update) and fails when a builder changes, so the
// report goldens always judge what the operators write today.

const (
	fleetNS   = "team-a"
	edgeNS    = "ingress"
	foreignNS = "shop"
	opNS      = "fleet-system"
)

var opLabels = map[string]string{labels.Name: names.Operator, labels.Instance: names.Operator}

func fleet(routed bool) *v1alpha1.CelldFleet {
	f := &v1alpha1.CelldFleet{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "CelldFleet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "vault", UID: "0000-fleet"},
	}
	if routed {
		f.Spec.Routing = &v1alpha1.Routing{
			Hostnames: []string{"vault.example.com"},
			Ingress:   &v1alpha1.IngressRouting{ClassName: "nginx"},
			Source:    v1alpha1.RoutingSource{Namespace: edgeNS, PodLabels: map[string]v1alpha1.LabelValue{"app": "edge-proxy"}},
		}
	}
	return f
}

func namespace(name string, l map[string]string) corev1.Namespace {
	all := map[string]string{labels.NamespaceName: name}
	for k, v := range l {
		all[k] = v
	}
	return corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}}
}

type podOpt func(*corev1.Pod)

func sidecar(p *corev1.Pod) {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: mesh.ProxyContainer, Image: "istio/proxyv2"})
}
func redirected(p *corev1.Pod) {
	p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"}
}
func mkPod(ns, name, sa, ip string, l map[string]string, opts ...podOpt) corev1.Pod {
	p := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "main", Image: "app"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	for k, v := range l {
		p.Labels[k] = v
	}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func member(f *v1alpha1.CelldFleet, i int, opts ...podOpt) corev1.Pod {
	l := names.Selector(f.Name)
	l[labels.Fleet] = f.Name
	return mkPod(f.Namespace, names.Member(f.Name, i), names.ServiceAccount(f.Name), fmt.Sprintf("192.0.2.%d", 10+i), l, opts...)
}

// meshGolden reads one of the mesh operator's golden policy sets: the
// namespace labels it writes and its PeerAuthentication and
// AuthorizationPolicies for namespace team-a.
func meshGolden(t *testing.T, name string) (map[string]string, []unstructured.Unstructured, []unstructured.Unstructured) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "mesh-operator", "internal", "enroll", "testdata", name+".golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var nsLabels map[string]string
	var pas, aps []unstructured.Unstructured
	for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
		if i == 0 {
			var first struct {
				NamespaceLabels map[string]string `json:"namespaceLabels"`
			}
			if err := yaml.Unmarshal(doc, &first); err != nil {
				t.Fatal(err)
			}
			nsLabels = first.NamespaceLabels
			continue
		}
		u := unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() {
		case "PeerAuthentication":
			pas = append(pas, u)
		case "AuthorizationPolicy":
			aps = append(aps, u)
		}
	}
	return nsLabels, pas, aps
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func u(o *unstructured.Unstructured) unstructured.Unstructured { return *o }

// callers that exist in every state; meshed says how the namespaces'
// workloads run.
func otherPods(fleetPodOpts, opPodOpts, edgePodOpts, foreignOpts []podOpt) []corev1.Pod {
	lookalike := map[string]string{"app": "edge-proxy", labels.ClientOf: "vault", labels.Name: names.Operator, labels.Instance: names.Operator}
	return []corev1.Pod{
		mkPod(fleetNS, "web-1", "web", "192.0.2.21", map[string]string{"app": "web", labels.ClientOf: "vault"}, fleetPodOpts...),
		mkPod(fleetNS, "batch-2", "default", "192.0.2.22", map[string]string{"app": "batch"}, fleetPodOpts...),
		mkPod(opNS, "fleet-operator-5d8c9", "fleet-operator", "192.0.2.30", opLabels, opPodOpts...),
		mkPod(opNS, "prometheus-0", "prometheus", "192.0.2.31", map[string]string{"app": "prometheus"}, opPodOpts...),
		mkPod(edgeNS, "edge-proxy-7c9", "edge-proxy", "192.0.2.40", map[string]string{"app": "edge-proxy"}, edgePodOpts...),
		mkPod(edgeNS, "batch-1", "default", "192.0.2.41", map[string]string{"app": "batch"}, edgePodOpts...),
		mkPod(foreignNS, "shop-1", "fleet-operator", "192.0.2.50", lookalike, foreignOpts...),
	}
}

func composeStates(t *testing.T) map[string]*Snapshot {
	netParams := network.Params{OperatorNamespace: opNS, OperatorPodLabels: opLabels}
	meshParams := mesh.Params{OperatorNamespace: opNS, OperatorServiceAccount: "fleet-operator", TrustDomain: "cluster.local"}
	states := map[string]*Snapshot{}
	plainNamespaces := []corev1.Namespace{namespace(fleetNS, nil), namespace(opNS, nil), namespace(edgeNS, nil), namespace(foreignNS, nil)}

	// fleet-only: no Istio API at all, no routing.
	{
		f := fleet(false)
		s := &Snapshot{Fleet: *f, Namespaces: plainNamespaces,
			NetworkPolicies: []networkingv1.NetworkPolicy{*must(network.NetworkPolicy(f, netParams))}}
		s.Pods = append([]corev1.Pod{member(f, 0), member(f, 1), member(f, 2)}, otherPods(nil, nil, nil, nil)...)
		states["fleet-only"] = s
	}
	// no-mesh: Istio is installed, nothing here is meshed.
	{
		s := *states["fleet-only"]
		s.IstioAPI = true
		states["no-mesh"] = &s
	}
	// routing: no mesh, the fleet routed from the edge namespace.
	{
		f := fleet(true)
		s := &Snapshot{Fleet: *f, Namespaces: plainNamespaces, IstioAPI: true,
			NetworkPolicies: []networkingv1.NetworkPolicy{*must(network.NetworkPolicy(f, netParams)), *routing.NetworkPolicy(f, false)}}
		s.Pods = append([]corev1.Pod{member(f, 0), member(f, 1), member(f, 2)}, otherPods(nil, nil, nil, nil)...)
		states["routing"] = s
	}
	// sidecar-meshed: spec.mesh.istio, every member has its proxy
	// (mesh.Decide: Meshed); clients and the operator have sidecars too.
	{
		f := fleet(false)
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{ControlPlaneNamespace: "istio-system"}}
		st := mesh.Decide(mesh.Observation{Desired: true, TargetRevision: "b", Pods: []mesh.Pod{{Name: "vault-0", Revision: "b", Proxy: true}, {Name: "vault-1", Revision: "b", Proxy: true}, {Name: "vault-2", Revision: "b", Proxy: true}}})
		if st.Phase != mesh.Meshed {
			t.Fatalf("sidecar-meshed: mesh.Decide says %s", st.Phase)
		}
		s := sidecarState(f, st, netParams, meshParams, []corev1.Pod{member(f, 0, sidecar), member(f, 1, sidecar), member(f, 2, sidecar)})
		states["sidecar-meshed"] = s
	}
	// sidecar-mixed-roll: joining, one member rolled with its proxy, two
	// still without (mesh.Decide: Joining, relaxed peer port).
	{
		f := fleet(false)
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{ControlPlaneNamespace: "istio-system"}}
		st := mesh.Decide(mesh.Observation{Desired: true, TargetRevision: "b", Pods: []mesh.Pod{{Name: "vault-0", Revision: "a"}, {Name: "vault-1", Revision: "a"}, {Name: "vault-2", Revision: "b", Proxy: true}}})
		if st.Phase != mesh.Joining || !st.Relaxed {
			t.Fatalf("sidecar-mixed-roll: mesh.Decide says %+v", st)
		}
		states["sidecar-mixed-roll"] = sidecarState(f, st, netParams, meshParams, []corev1.Pod{member(f, 0), member(f, 1), member(f, 2, sidecar)})
	}
	// ambient-namespace-isolation: the mesh operator enrolled team-a
	// (ambient, isolation namespace, STRICT, edges fleet-system and
	// ingress); the fleet adapted (HBONE, its ambient policy) and is routed
	// from ingress.
	states["ambient-namespace-isolation"] = ambientState(t, "policies-ambient-namespace-strict", netParams, meshParams)
	// The same before the STRICT cutover (PERMISSIVE): plaintext callers
	// the NetworkPolicy admits get through.
	states["ambient-namespace-permissive"] = ambientState(t, "policies-ambient-namespace-permissive", netParams, meshParams)
	// strict: isolation strict (allow-nothing baseline) on the same
	// namespace. Its report equals the namespace isolation's: the fleet's own
	// ALLOW already decides every request to the members, so the baseline
	// changes nothing for them (which is the point of the baseline).
	states["ambient-strict-isolation"] = ambientState(t, "policies-ambient-strict-strict", netParams, meshParams)
	return states
}

func sidecarState(f *v1alpha1.CelldFleet, st mesh.State, np network.Params, mp mesh.Params, members []corev1.Pod) *Snapshot {
	if st.IstiodEgress {
		np.IstiodNamespaces = []string{"istio-system"}
	}
	s := &Snapshot{Fleet: *f, IstioAPI: true,
		Namespaces:      []corev1.Namespace{namespace(fleetNS, nil), namespace(opNS, nil), namespace(edgeNS, nil), namespace(foreignNS, nil)},
		NetworkPolicies: []networkingv1.NetworkPolicy{*must(network.NetworkPolicy(f, np))},
	}
	if st.Policies {
		s.AuthorizationPolicies = []unstructured.Unstructured{u(mesh.AuthorizationPolicy(f, mp, v1alpha1.AllowAll, st.Relaxed, mesh.Wiring{}, nil))}
		s.PeerAuthentications = []unstructured.Unstructured{u(mesh.PeerAuthentication(f))}
	}
	s.Pods = append(members, otherPods([]podOpt{sidecar}, []podOpt{sidecar}, nil, []podOpt{sidecar})...)
	return s
}

func ambientState(t *testing.T, golden string, np network.Params, mp mesh.Params) *Snapshot {
	f := fleet(true)
	f.Spec.Mesh = &v1alpha1.Mesh{Mode: v1alpha1.MeshEnabled}
	nsLabels, pas, aps := meshGolden(t, golden)
	nsLabels[labels.Mesh] = labels.MeshEnabled
	nsLabels[labels.AllowFromPrefix+opNS] = "true"
	nsLabels[labels.AllowFromPrefix+edgeNS] = "true"
	np.HBONE = true
	s := &Snapshot{Fleet: *f, IstioAPI: true,
		Namespaces: []corev1.Namespace{namespace(fleetNS, nsLabels), namespace(opNS, nil), namespace(edgeNS, map[string]string{labels.IstioDataPlaneMode: "ambient"}),
			namespace(foreignNS, map[string]string{labels.IstioDataPlaneMode: "ambient"})},
		NetworkPolicies:       []networkingv1.NetworkPolicy{*must(network.NetworkPolicy(f, np)), *routing.NetworkPolicy(f, true)},
		PeerAuthentications:   pas,
		AuthorizationPolicies: append(aps, u(mesh.AmbientAuthorizationPolicy(f, mp, v1alpha1.AllowAll, mesh.Wiring{}, nil))),
	}
	s.Pods = []corev1.Pod{member(f, 0, redirected), member(f, 1, redirected), member(f, 2, redirected)}
	s.Pods = append(s.Pods, otherPods([]podOpt{redirected}, []podOpt{sidecar}, []podOpt{redirected}, []podOpt{redirected})...)
	// A labelled client that opted out of ambient speaks plaintext.
	s.Pods = append(s.Pods, mkPod(fleetNS, "legacy-1", "legacy", "192.0.2.23",
		map[string]string{labels.ClientOf: "vault", labels.IstioDataPlaneMode: "none"}))
	return s
}

func TestRecordedStates(t *testing.T) {
	for name, s := range composeStates(t) {
		t.Run(name, func(t *testing.T) { golden.AssertYAML(t, "states/"+name, s) })
	}
}

// loadState reads a recorded state as the plugin's --snapshot would.
func loadState(t *testing.T, name string) *Snapshot {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "states", name+".golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
