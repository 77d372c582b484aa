package explore

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
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

// TestReleasedWhileHeld: from one state to the next while the license
// cannot be known, an enrolled STRICT namespace keeps its labels, its
// PeerAuthentication and isolation policy, and STRICT, unless the spec
// asks otherwise. The torn-down pair is what the mesh operator did before
// issue 40 when a read of its license Secret failed.
func TestReleasedWhileHeld(t *testing.T) {
	w := world{app: "x1-app", edge: "x1-edge", other: "x1-other"}
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	enrolled := map[string]string{labels.Mesh: labels.MeshEnabled, labels.MeshState: labels.MeshStateEnrolled, labels.MeshMTLS: "strict",
		labels.MeshDataPlane: "ambient", labels.IstioDataPlaneMode: "ambient"}
	state := func(nsLabels map[string]string, paMode string, isolation bool, spec func(*meshv1.ServiceMesh)) *snapshot {
		ns := &unstructured.Unstructured{}
		ns.SetName(w.app)
		ns.SetLabels(nsLabels)
		s := &snapshot{at: at, objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{
			gvrNamespaces: {"/" + w.app: ns}, gvrPAs: {}, gvrAPs: {}, gvrMeshes: {}}, absent: map[schema.GroupVersionResource]bool{}}
		if paMode != "" {
			pa := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": paMode}}}}
			pa.SetNamespace(w.app)
			pa.SetName(meshMTLSPolicy)
			s.objs[gvrPAs][w.app+"/"+meshMTLSPolicy] = pa
		}
		if isolation {
			ap := &unstructured.Unstructured{}
			ap.SetNamespace(w.app)
			ap.SetName(meshIsolationPolicy)
			s.objs[gvrAPs][w.app+"/"+meshIsolationPolicy] = ap
		}
		if spec != nil {
			m := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: meshv1.SingletonName}, Spec: meshv1.ServiceMeshSpec{
				DataPlane: meshv1.DataPlaneAmbient, Isolation: meshv1.IsolationNamespace, MTLS: meshv1.MTLS{Mode: meshv1.MTLSStrict}}}
			spec(m)
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m)
			if err != nil {
				t.Fatal(err)
			}
			s.objs[gvrMeshes]["/"+meshv1.SingletonName] = &unstructured.Unstructured{Object: obj}
		}
		return s
	}
	as := func(*meshv1.ServiceMesh) {}
	with := func(l map[string]string, kv ...string) map[string]string {
		out := maps.Clone(l)
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = kv[i+1]
			}
		}
		return out
	}
	before := state(enrolled, "STRICT", true, as)
	edgeLabel := labels.AllowFromPrefix + w.edge
	// withEdgePod adds a running Pod to the edge namespace, captured by
	// ztunnel (meshed) or not.
	withEdgePod := func(s *snapshot, meshed bool) *snapshot {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.edge, Name: "client", Annotations: map[string]string{}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.9", ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}
		if meshed {
			p.Annotations[labels.IstioAmbientRedirection] = "enabled"
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
		if err != nil {
			t.Fatal(err)
		}
		s.objs[gvrPods] = map[string]*unstructured.Unstructured{w.edge + "/client": {Object: obj}}
		return s
	}
	for _, tc := range []struct {
		name string
		now  *snapshot
		want []string
	}{
		{"held as it was", state(enrolled, "STRICT", true, as), nil},
		{"torn down (a failed read taken for a missing license)", state(map[string]string{labels.Mesh: labels.MeshEnabled}, "", false, as), []string{
			"namespace x1-app lost core.navique.com/mesh-state=enrolled",
			"namespace x1-app lost core.navique.com/mesh-mtls=strict",
			"namespace x1-app lost core.navique.com/mesh-dataplane=ambient",
			"namespace x1-app lost its data-plane label istio.io/dataplane-mode",
			"PeerAuthentication x1-app/mesh-mtls was deleted",
			"AuthorizationPolicy x1-app/mesh-isolation was deleted",
		}},
		{"relaxed without the spec asking", state(with(enrolled, labels.MeshMTLS, "permissive"), "PERMISSIVE", true, as), []string{
			`namespace x1-app went from core.navique.com/mesh-mtls=strict to "permissive" without the spec asking`,
			"PeerAuthentication x1-app/mesh-mtls went from STRICT to PERMISSIVE without the spec asking",
		}},
		{"relaxed for mtls.mode permissive", state(with(enrolled, labels.MeshMTLS, "permissive"), "PERMISSIVE", true,
			func(m *meshv1.ServiceMesh) { m.Spec.MTLS.Mode = meshv1.MTLSPermissive }), nil},
		{"relaxed for an open maintenance window", state(with(enrolled, labels.MeshMTLS, "permissive"), "PERMISSIVE", true,
			func(m *meshv1.ServiceMesh) { m.Spec.MTLS.MaintenanceUntil = &metav1.Time{Time: at.Add(time.Minute)} }), nil},
		{"relaxed after the maintenance window ended", state(with(enrolled, labels.MeshMTLS, "permissive"), "PERMISSIVE", true,
			func(m *meshv1.ServiceMesh) { m.Spec.MTLS.MaintenanceUntil = &metav1.Time{Time: at.Add(-time.Minute)} }), []string{
			`namespace x1-app went from core.navique.com/mesh-mtls=strict to "permissive" without the spec asking`,
			"PeerAuthentication x1-app/mesh-mtls went from STRICT to PERMISSIVE without the spec asking",
		}},
		{"isolation switched off", state(enrolled, "STRICT", false, func(m *meshv1.ServiceMesh) { m.Spec.Isolation = meshv1.IsolationOff }), nil},
		{"released, opted out by the admin", state(map[string]string{labels.Mesh: labels.MeshDisabled}, "", false, as), nil},
		{"released, no longer asked for", state(map[string]string{}, "", false, as), nil},
		{"released while switching the data plane", state(map[string]string{labels.Mesh: labels.MeshEnabled}, "", false,
			func(m *meshv1.ServiceMesh) { m.Spec.DataPlane = meshv1.DataPlaneSidecar }), nil},
		{"the ServiceMesh deleted", state(map[string]string{labels.Mesh: labels.MeshEnabled}, "", false, nil), nil},
		// A fleet's routing declared an edge the namespace has not
		// accepted, whose Pods call in plaintext: the relaxation is owed
		// (the api-faults scenario met it once the faults cleared, before
		// the fleet operator could withdraw the edge it had turned off).
		{"relaxed for a newly declared plaintext edge", withEdgePod(state(with(enrolled, labels.MeshMTLS, "permissive", edgeLabel, "true"), "PERMISSIVE", true, as), false), nil},
		{"relaxed for a newly declared edge whose Pods are meshed", withEdgePod(state(with(enrolled, labels.MeshMTLS, "permissive", edgeLabel, "true"), "PERMISSIVE", true, as), true), []string{
			`namespace x1-app went from core.navique.com/mesh-mtls=strict to "permissive" without the spec asking`,
			"PeerAuthentication x1-app/mesh-mtls went from STRICT to PERMISSIVE without the spec asking",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := releasedWhileHeld(w, before, tc.now)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("releasedWhileHeld =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	// The label records the mode in force, after the PeerAuthentication:
	// the relaxation is judged once, where the PeerAuthentication moved
	// (the label's move came a state later in api-faults, after the fleet
	// operator had withdrawn the edge that excused it).
	t.Run("the label follows its PeerAuthentication", func(t *testing.T) {
		relaxed := state(with(enrolled, labels.MeshMTLS, "permissive"), "PERMISSIVE", true, as)
		if got := releasedWhileHeld(w, state(enrolled, "PERMISSIVE", true, as), relaxed); got != nil {
			t.Fatalf("releasedWhileHeld = %q, want nothing: the PeerAuthentication was PERMISSIVE before", got)
		}
		if got := releasedWhileHeld(w, state(enrolled, "", true, as), relaxed); len(got) != 1 || !strings.Contains(got[0], "namespace x1-app went from") {
			t.Fatalf("releasedWhileHeld = %q, want the label's move judged where there was no PeerAuthentication before", got)
		}
	})
	t.Run("Istio's API removed", func(t *testing.T) {
		now := state(map[string]string{labels.Mesh: labels.MeshEnabled}, "", false, as)
		now.absent[gvrPAs], now.absent[gvrAPs] = true, true
		if got := releasedWhileHeld(w, before, now); got != nil {
			t.Fatalf("releasedWhileHeld = %q, want nothing while Istio's policies are gone with its API", got)
		}
	})

	// checkHeld judges only inside a hold: the same tear-down is a
	// violation while the read is denied, and what is owed once the
	// license has been read again and was found expired.
	torn := state(map[string]string{labels.Mesh: labels.MeshEnabled}, "", false, as)
	for _, tc := range []struct {
		name string
		h    hold
		want bool
	}{
		{"while the read is denied", hold{why: licenseUnreadable, from: at.Add(-time.Minute)}, true},
		{"within the re-read after allow", hold{why: licenseUnreadable, from: at.Add(-time.Minute), until: at.Add(time.Second)}, true},
		{"after the re-read", hold{why: licenseUnreadable, from: at.Add(-time.Minute), until: at.Add(-time.Second)}, false},
		{"after the license expired", hold{why: licenseUnreadable, from: at.Add(-time.Minute), expires: at.Add(-time.Second)}, false},
		{"before the fault", hold{why: licenseRenewing, from: at.Add(time.Second)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(w)
			j.holds = []hold{tc.h}
			j.checkHeld(before, 1)
			torn.last = "MODIFIED namespaces /x1-app"
			j.checkHeld(torn, 2)
			if (len(j.violations) > 0) != tc.want {
				t.Fatalf("violations %q, want some: %t", j.violations, tc.want)
			}
			if tc.want && !strings.HasPrefix(j.violations[0], "step 2, after MODIFIED namespaces /x1-app: while "+tc.h.why+": ") {
				t.Fatalf("violation %q does not say when and why", j.violations[0])
			}
		})
	}
}

// TestCheckTenants: each way a tenant's object can reach past its
// namespace, and each way an admin's opt-out can be taken, is caught; a
// world where the control plane is where it belongs and the admin's label
// stands passes.
func TestCheckTenants(t *testing.T) {
	w := world{app: "x1-app", edge: "x1-edge", other: "x1-other"}
	const cp = "istio-system"
	toU := func(obj any) *unstructured.Unstructured {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	named := func(ns, name string, spec map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	isolation := func(allowed ...string) *unstructured.Unstructured {
		var not []any
		for _, a := range allowed {
			not = append(not, a)
		}
		return named(w.app, meshIsolationPolicy, map[string]any{"action": "DENY", "rules": []any{map[string]any{
			"from": []any{map[string]any{"source": map[string]any{"principals": []any{"*"}, "notNamespaces": not}}}}}})
	}
	istiodEgress := func(ns string) *unstructured.Unstructured {
		return named(w.app, "a", map[string]any{"podSelector": map[string]any{}, "egress": []any{map[string]any{
			"to":    []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{labels.NamespaceName: ns}}}},
			"ports": []any{map[string]any{"port": int64(15012), "protocol": "TCP"}}}}})
	}
	appLabels := map[string]string{labels.MeshControlPlane: cp, labels.IstioInjection: "disabled"}
	// world builds a state: the clean world, changed by edit.
	state := func(rv int64, edit func(s *snapshot)) *snapshot {
		ns := func(name string, l map[string]string) *unstructured.Unstructured {
			u := &unstructured.Unstructured{}
			u.SetName(name)
			u.SetLabels(maps.Clone(l))
			return u
		}
		mesh := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: meshv1.SingletonName},
			Status: meshv1.ServiceMeshStatus{ControlPlane: &meshv1.ControlPlaneStatus{Management: meshv1.ManagementManaged, Namespace: cp}}}
		fleet := &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: w.app, Name: "a", Annotations: map[string]string{labels.IstioControlPlane: cp}}}
		s := &snapshot{rv: rv, last: "MODIFIED namespaces /x1-app", objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{
			gvrNamespaces: {"/" + w.app: ns(w.app, appLabels), "/" + w.edge: ns(w.edge, nil), "/" + w.other: ns(w.other, nil)},
			gvrMeshes:     {"/" + meshv1.SingletonName: toU(mesh)},
			gvrFleets:     {w.app + "/a": toU(fleet)},
			gvrAPs:        {w.app + "/" + meshIsolationPolicy: isolation(w.app, cp)},
			gvrNetpols:    {w.app + "/a": istiodEgress(cp)},
			// The tenant's own objects, in its own namespace, are its business.
			gvrPAs: {w.other + "/" + tenantPeerAuth: named(w.other, tenantPeerAuth, map[string]any{"mtls": map[string]any{"mode": "DISABLE"}})},
		}}
		if edit != nil {
			edit(s)
		}
		return s
	}
	setLabel := func(ns, k, v string) func(*snapshot) {
		return func(s *snapshot) {
			u := s.objs[gvrNamespaces]["/"+ns]
			l := u.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			if v == "" {
				delete(l, k)
			} else {
				l[k] = v
			}
			u.SetLabels(l)
		}
	}
	// The admin set istio-injection=disabled at rv 10; it stands until rv 50.
	optOuts := []optOut{{namespace: w.app, key: labels.IstioInjection, value: "disabled", from: 10, until: 50}}
	for _, tc := range []struct {
		name string
		s    *snapshot
		want string // "" for none
	}{
		{"clean", state(20, nil), ""},
		{"before the admin's label", state(5, setLabel(w.app, labels.IstioInjection, "")), ""},
		{"after the admin cleared it", state(50, setLabel(w.app, labels.IstioInjection, "enabled")), ""},
		{"status names the tenant", state(20, func(s *snapshot) {
			m := s.serviceMesh()
			m.Status.ControlPlane.Namespace, m.Status.ControlPlane.Management = w.other, meshv1.ManagementAdopted
			s.objs[gvrMeshes]["/"+meshv1.SingletonName] = toU(m)
		}), "the tenant's namespace x1-other is taken as the control plane: ServiceMesh status.controlPlane.namespace=x1-other (Adopted)"},
		{"label names the tenant", state(20, setLabel(w.edge, labels.MeshControlPlane, w.other)),
			"the tenant's namespace x1-other is taken as the control plane: namespace x1-edge has core.navique.com/mesh-control-plane=x1-other"},
		{"fleet annotation names the tenant", state(20, func(s *snapshot) {
			s.objs[gvrFleets][w.app+"/a"].SetAnnotations(map[string]string{labels.IstioControlPlane: w.other})
		}), "fleet x1-app/a has celld.eric.dev/istio-control-plane=x1-other"},
		{"isolation exempts the tenant", state(20, func(s *snapshot) {
			s.objs[gvrAPs][w.app+"/"+meshIsolationPolicy] = isolation(w.app, cp, w.other)
		}), "the mesh-isolation of namespace x1-app lets the tenant's namespace x1-other in: no ALLOW policy applies"},
		{"istiod egress to the tenant", state(20, func(s *snapshot) {
			s.objs[gvrNetpols][w.app+"/a"] = istiodEgress(w.other)
		}), "NetworkPolicy x1-app/a names the tenant's namespace x1-other"},
		{"an ALLOW for the tenant's principal", state(20, func(s *snapshot) {
			s.objs[gvrAPs][w.app+"/a"] = named(w.app, "a", map[string]any{"rules": []any{map[string]any{
				"from": []any{map[string]any{"source": map[string]any{"principals": []any{"cluster.local/ns/x1-other/sa/default"}}}}}}})
		}), "AuthorizationPolicy x1-app/a names the tenant's namespace x1-other"},
		{"an edge from the tenant", state(20, setLabel(w.app, labels.AllowFromPrefix+w.other, "true")),
			"namespace x1-app declares the tenant's namespace x1-other as an edge"},
		{"the admin's label overwritten", state(20, setLabel(w.app, labels.IstioInjection, "enabled")),
			`the admin's istio-injection=disabled on namespace x1-app was overwritten: it reads "enabled"`},
		{"the admin's label deleted", state(49, setLabel(w.app, labels.IstioInjection, "")),
			"the admin's istio-injection=disabled on namespace x1-app was deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJudgement(w)
			j.optOuts = optOuts
			j.checkTenants(tc.s, 3)
			switch {
			case tc.want == "" && len(j.violations) > 0:
				t.Fatalf("violations %q, want none", j.violations)
			case tc.want != "" && len(j.violations) != 1:
				t.Fatalf("violations %q, want one saying %q", j.violations, tc.want)
			case tc.want != "" && (!strings.Contains(j.violations[0], tc.want) || !strings.HasPrefix(j.violations[0], "step 3, after MODIFIED namespaces /x1-app: ")):
				t.Fatalf("violation %q does not say when and %q", j.violations[0], tc.want)
			}
		})
	}
	// check runs it at every state.
	t.Run("judged by check", func(t *testing.T) {
		j := newJudgement(w)
		j.optOuts = optOuts
		j.check(state(20, setLabel(w.app, labels.IstioInjection, "enabled")), 4)
		if len(j.violations) != 1 || !strings.Contains(j.violations[0], "was overwritten") {
			t.Fatalf("check: violations %q, want the overwritten opt-out", j.violations)
		}
	})
}

// TestIsOptOut: Istio's own opt-outs and the admin's mesh label, and
// nothing else.
func TestIsOptOut(t *testing.T) {
	for _, tc := range []struct {
		k, v string
		want bool
	}{
		{labels.IstioInjection, "disabled", true},
		{labels.IstioInjection, "enabled", false},
		{labels.IstioDataPlaneMode, "none", true},
		{labels.IstioDataPlaneMode, "ambient", false},
		{labels.Mesh, labels.MeshDisabled, true},
		{labels.Mesh, labels.MeshEnabled, false},
		{labels.IstioRevision, "none", false},
	} {
		if got := isOptOut(tc.k, tc.v); got != tc.want {
			t.Errorf("isOptOut(%s=%s) = %t, want %t", tc.k, tc.v, got, tc.want)
		}
	}
}

// TestAdminOptOutSpans: each admin label stands from the write that set it
// until the write that changed or removed it.
func TestAdminOptOutSpans(t *testing.T) {
	e := &environment{}
	e.setAdminLabels("x1-app", map[string]string{labels.IstioInjection: "disabled"}, 10)
	e.setAdminLabels("x1-app", map[string]string{labels.IstioInjection: "disabled", labels.IstioDataPlaneMode: "none"}, 20)
	e.setAdminLabels("x1-app", map[string]string{}, 30)
	e.setAdminLabels("x1-app", map[string]string{labels.IstioDataPlaneMode: "none"}, 40)
	got := e.takeOptOuts()
	want := []optOut{
		{namespace: "x1-app", key: labels.IstioInjection, value: "disabled", from: 10, until: 30},
		{namespace: "x1-app", key: labels.IstioDataPlaneMode, value: "none", from: 20, until: 30},
		{namespace: "x1-app", key: labels.IstioDataPlaneMode, value: "none", from: 40},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("spans %+v, want %+v", got, want)
	}
	if e.takeOptOuts() != nil || e.adminLabels != nil {
		t.Fatal("takeOptOuts must forget the sequence's labels")
	}
}
