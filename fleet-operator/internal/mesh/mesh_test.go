package mesh

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/golden"
	"github.com/ericdev/fleetmesh/shared/labels"
)

func pods(spec ...string) []Pod {
	// each spec: name:revision:proxy(p|-):terminating(t|-)
	var out []Pod
	for _, s := range spec {
		f := strings.Split(s, ":")
		out = append(out, Pod{Name: f[0], Revision: f[1], Proxy: f[2] == "p", Terminating: f[3] == "t"})
	}
	return out
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name string
		obs  Observation
		want State
	}{
		{"never opted in", Observation{Pods: pods("f-0:a:-:-")}, State{Phase: NotMeshed}},
		{"join requested, nobody meshed yet: relax before the first roll",
			Observation{Desired: true, TargetRevision: "b", Pods: pods("f-0:a:-:-", "f-1:a:-:-")},
			State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true}},
		{"mixed while joining",
			Observation{Desired: true, TargetRevision: "b", Pods: pods("f-0:a:-:-", "f-1:b:p:-")},
			State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true}},
		{"a terminating Pod without proxy still counts: no early restore",
			Observation{Desired: true, TargetRevision: "b", Pods: pods("f-0:a:-:t", "f-1:b:p:-")},
			State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true}},
		{"new revision without proxy: injection missing",
			Observation{Desired: true, TargetRevision: "b", Pods: pods("f-0:a:-:-", "f-1:b:-:-")},
			State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true, MissingProxy: []string{"f-1"}}},
		{"every Pod has a proxy: restore identity rule",
			Observation{Desired: true, TargetRevision: "b", Pods: pods("f-0:b:p:-", "f-1:b:p:-")},
			State{Phase: Meshed, Policies: true, IstiodEgress: true}},
		{"leave requested, all still meshed",
			Observation{WasMeshed: true, TargetRevision: "c", Pods: pods("f-0:b:p:-", "f-1:b:p:-")},
			State{Phase: Leaving, Relaxed: true, Policies: true, IstiodEgress: true}},
		{"old sidecar terminating keeps istiod egress",
			Observation{WasMeshed: true, TargetRevision: "c", Pods: pods("f-0:c:-:-", "f-1:b:p:t")},
			State{Phase: Leaving, Relaxed: true, Policies: true, IstiodEgress: true}},
		{"left: no proxies anywhere",
			Observation{WasMeshed: true, TargetRevision: "c", Pods: pods("f-0:c:-:-", "f-1:c:-:-")},
			State{Phase: Left}},
		{"never opted in, proxies injected by the namespace: reported",
			Observation{TargetRevision: "a", Pods: pods("f-0:a:p:-", "f-1:a:-:-", "f-2:a:p:t")},
			State{Phase: NotMeshed, UnwantedProxy: []string{"f-0"}}},
		{"leaving, a replacement on the opt-out template injected anyway: reported",
			Observation{WasMeshed: true, TargetRevision: "c", Pods: pods("f-0:c:p:-", "f-1:b:p:-")},
			State{Phase: Leaving, Relaxed: true, Policies: true, IstiodEgress: true, UnwantedProxy: []string{"f-0"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Decide(tc.obs)) })
	}
}

func fleet(access v1alpha1.ApplicationAccess) *v1alpha1.CelldFleet {
	f := &v1alpha1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "fleets", UID: "11111111-2222-3333-4444-555555555555"},
		Spec:       v1alpha1.CelldFleetSpec{Image: "celld:1"},
	}
	if access != "" {
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{ControlPlaneNamespace: "istio-system", ApplicationAccess: access}}
	}
	return f
}

var params = Params{OperatorNamespace: "fleet-system", OperatorServiceAccount: "fleet-operator", TrustDomain: "cluster.local"}

func TestGoldenPolicies(t *testing.T) {
	golden.AssertYAML(t, "meshed-allowall", AuthorizationPolicy(fleet(v1alpha1.AllowAll), params, v1alpha1.AllowAll, false, Wiring{}, nil))
	golden.AssertYAML(t, "meshed-policies", AuthorizationPolicy(fleet(v1alpha1.Policies), params, v1alpha1.Policies, false, Wiring{}, nil))
	golden.AssertYAML(t, "rolling-allowall", AuthorizationPolicy(fleet(v1alpha1.AllowAll), params, v1alpha1.AllowAll, true, Wiring{}, nil), PeerAuthentication(fleet(v1alpha1.AllowAll)))
	golden.AssertYAML(t, "rolling-policies", AuthorizationPolicy(fleet(v1alpha1.Policies), params, v1alpha1.Policies, true, Wiring{}, nil), PeerAuthentication(fleet(v1alpha1.Policies)))
	// A leaving fleet has no spec.mesh: its relaxed policy keeps 8080 open as before.
	golden.AssertYAML(t, "leaving", AuthorizationPolicy(fleet(""), params, IntentFor(fleet(""), contract.State{}).Access, true, Wiring{}, nil), PeerAuthentication(fleet("")))
	golden.AssertYAML(t, "ambient-allowall", AmbientAuthorizationPolicy(fleet(""), params, v1alpha1.AllowAll, Wiring{}, nil))
	// Isolation strict: 8080 names the wired callers; with none, no 8080 rule.
	golden.AssertYAML(t, "ambient-strict", AmbientAuthorizationPolicy(fleet(""), params, v1alpha1.AllowAll, strictWiring, nil))
	golden.AssertYAML(t, "meshed-strict", AuthorizationPolicy(fleet(v1alpha1.AllowAll), params, v1alpha1.AllowAll, false, strictWiring, nil))
	golden.AssertYAML(t, "ambient-strict-no-callers", AmbientAuthorizationPolicy(fleet(""), params, v1alpha1.AllowAll, Wiring{Strict: true}, nil))
}

// strictWiring: a wired client, the routing source, and a client that
// shares the fleet's ServiceAccount (refused: it is a peer identity).
var strictWiring = Wiring{Strict: true, Callers: []string{
	"cluster.local/ns/edge/sa/edge-proxy", "cluster.local/ns/fleets/sa/orders", "cluster.local/ns/fleets/sa/web",
}}

// TestStrictTruthTable judges the real builders' policies (both data
// planes) with Istio's L4 rules: under isolation strict 8080 admits the
// wired client and the routing source only; 8081 only peers and the
// operator.
func TestStrictTruthTable(t *testing.T) {
	members := map[string]string{labels.Fleet: "orders"}
	p := func(ns, sa string) string { return "cluster.local/ns/" + ns + "/sa/" + sa }
	rows := []struct {
		name      string
		principal string
		port      int
		want      bool
	}{
		{"wired client", p("fleets", "web"), 8080, true},
		{"routing source", p("edge", "edge-proxy"), 8080, true},
		{"unlabelled Pod of the namespace", p("fleets", "batch"), 8080, false},
		{"peer of another fleet", p("fleets", "ledger"), 8080, false},
		{"peer of another fleet, peer port", p("fleets", "ledger"), 8081, false},
		{"other Pod of the routing source's namespace", p("edge", "default"), 8080, false},
		{"peer (the fleet's own identity) on 8080", p("fleets", "orders"), 8080, false},
		{"peer", p("fleets", "orders"), 8081, true},
		{"operator", p("fleet-system", "fleet-operator"), 8081, true},
		{"operator on 8080", p("fleet-system", "fleet-operator"), 8080, false},
		{"wired client on the peer port", p("fleets", "web"), 8081, false},
	}
	for name, ap := range map[string]*unstructured.Unstructured{
		"ambient": AmbientAuthorizationPolicy(fleet(""), params, v1alpha1.AllowAll, strictWiring, nil),
		"sidecar": AuthorizationPolicy(fleet(v1alpha1.AllowAll), params, v1alpha1.AllowAll, false, strictWiring, nil),
	} {
		pol := authzeval.FromUnstructured(ap, members)
		for _, r := range rows {
			ns := strings.Split(r.principal, "/")[2]
			got := authzeval.Evaluate("STRICT", []authzeval.Policy{pol}, authzeval.Request{MTLS: true, Principal: r.principal, Namespace: ns, Port: r.port})
			assert.Equal(t, r.want, got.Allowed, "%s: %s :%d (%s)", name, r.name, r.port, got.Why)
		}
	}
	none := authzeval.FromUnstructured(AmbientAuthorizationPolicy(fleet(""), params, v1alpha1.AllowAll, Wiring{Strict: true}, nil), members)
	assert.False(t, authzeval.Evaluate("STRICT", []authzeval.Policy{none}, authzeval.Request{MTLS: true, Principal: p("fleets", "web"), Namespace: "fleets", Port: 8080}).Allowed,
		"no wired caller: 8080 admits nobody")
}

func TestGoldenTemplates(t *testing.T) {
	for name, mode := range map[string]TemplateMode{"template-untouched": Untouched, "template-inject": Inject, "template-optout": OptOut, "template-disabled": Disabled} {
		tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "celld"}}}
		ApplyToTemplate(&tpl, "orders", mode)
		golden.AssertYAML(t, name, tpl.ObjectMeta)
	}
}

func TestIntentModeAndControlPlane(t *testing.T) {
	sidecarNS := contract.State{Enrolled: true, DataPlane: contract.Sidecar, ControlPlane: "istio-prod"}
	ambientNS := contract.State{Enrolled: true, DataPlane: contract.Ambient}
	plain := fleet("")
	explicit := fleet(v1alpha1.Policies)
	disabled := fleet("")
	disabled.Spec.Mesh = &v1alpha1.Mesh{Mode: v1alpha1.MeshDisabled}

	assert.Equal(t, Intent{Access: v1alpha1.AllowAll, ControlPlane: DefaultControlPlaneNamespace}, IntentFor(plain, contract.State{}), "no mesh anywhere: nothing")
	assert.Equal(t, Intent{Sidecar: true, SidecarNamespace: true, EnrollmentInEffect: true, Access: v1alpha1.AllowAll, ControlPlane: "istio-prod"}, IntentFor(plain, sidecarNS), "sidecar-enrolled namespace: as spec.mesh.istio defaults")
	assert.False(t, IntentFor(plain, sidecarNS).MayBeCaptured(), "a sidecar-enrolled namespace captures nothing")
	assert.False(t, IntentFor(explicit, contract.State{}).MayBeCaptured(), "no enrollment in effect: nothing captures the members")
	assert.True(t, IntentFor(explicit, contract.State{AmbientLabelled: true}).MayBeCaptured(),
		"a sidecar fleet in a namespace labelled for ambient capture before its enrollment is announced")
	assert.False(t, IntentFor(disabled, ambientNS).MayBeCaptured(), "a disabled fleet's members opt out of capture")
	assert.Equal(t, Intent{Ambient: true, EnrollmentInEffect: true, Access: v1alpha1.AllowAll, ControlPlane: DefaultControlPlaneNamespace}, IntentFor(plain, ambientNS))
	optedOut := IntentFor(plain, contract.State{Request: contract.RequestDisabled})
	assert.True(t, optedOut.OptedOut)
	assert.False(t, optedOut.AsksForMesh(), "an admin's disabled namespace: no HBONE, no standby policy")
	istioOut := IntentFor(plain, contract.State{Request: contract.RequestEnabled, IstioOptOut: "istio-injection=disabled"})
	assert.True(t, istioOut.OptedOut, "Istio's own opt-out counts as disabled (issue 41 item 5)")
	assert.False(t, istioOut.AsksForMesh())
	assert.True(t, IntentFor(plain, contract.State{}).AsksForMesh(), "auto asks")
	assert.False(t, IntentFor(plain, contract.State{Request: contract.RequestEnabled}).StandsBy(),
		"auto without an enrollment in effect: no standby policy, no HBONE (a no-op, as the mesh seed has it)")
	assert.True(t, IntentFor(plain, contract.State{Request: contract.RequestEnabled, AmbientLabelled: true}).StandsBy(),
		"Istio's ambient label on the namespace: capture may come before the state labels")
	assert.True(t, IntentFor(plain, contract.State{Request: contract.RequestEnabled, Joining: true}).StandsBy(),
		"announced for ambient (mesh-state=joining): the mesh operator captures only once this fleet's policy admits HBONE")
	assert.False(t, optedOut.StandsBy())
	assert.False(t, IntentFor(explicit, contract.State{}).AsksForMesh(), "spec.mesh.istio is a sidecar, not a request")
	assert.Equal(t, Intent{Sidecar: true, EnrollmentInEffect: true, Access: v1alpha1.Policies, ControlPlane: "istio-system"}, IntentFor(explicit, ambientNS), "spec.mesh.istio wins over an ambient namespace")
	assert.True(t, IntentFor(disabled, sidecarNS).Disabled, "disabled never joins")
	assert.False(t, IntentFor(disabled, sidecarNS).Sidecar)

	assert.Equal(t, Untouched, Mode(Intent{}, false), "never opted in: namespace injection behaviour untouched")
	assert.Equal(t, Inject, Mode(Intent{Sidecar: true}, false))
	assert.Equal(t, OptOut, Mode(Intent{}, true), "left: explicit opt-out")
	assert.Equal(t, Disabled, Mode(Intent{Disabled: true}, true))
	assert.Equal(t, Untouched, Mode(Intent{Ambient: true}, false), "ambient capture needs no template change")

	left := fleet("")
	left.Annotations = map[string]string{labels.IstioControlPlane: "istio-prod"}
	assert.Equal(t, "istio-prod", ControlPlaneNamespace(left, IntentFor(left, contract.State{})), "a leaving fleet keeps using the recorded control plane")
	assert.True(t, WasMeshed(left))
}

// TestAmbientCaptureIsGradual: istio-cni captures and releases members one
// Pod at a time, so an ambient fleet is relaxed while it is mixed, and keeps
// its policies while any member is still captured after the namespace left
// (found by the transition explorer: peers lost 8081 mid-capture).
func TestAmbientCaptureIsGradual(t *testing.T) {
	captured := func(names ...string) []Pod {
		var out []Pod
		for i, n := range names {
			out = append(out, Pod{Name: fmt.Sprintf("f-%d", i), Revision: "a", Captured: n == "c"})
		}
		return out
	}
	amb := State{Phase: Ambient, Policies: true}
	with := func(s State, relaxed, captured bool) State { s.Relaxed, s.Captured = relaxed, captured; return s }
	for _, c := range []struct {
		name string
		obs  Observation
		want State
	}{
		{"nothing captured yet: relaxed before the first capture", Observation{Ambient: true, Strict: true, Pods: captured("-", "-")}, with(amb, true, false)},
		{"mid-capture", Observation{Ambient: true, Strict: true, Pods: captured("c", "-")}, with(amb, true, true)},
		{"all captured, STRICT", Observation{Ambient: true, Strict: true, Pods: captured("c", "c")}, with(amb, false, true)},
		{"all captured, PERMISSIVE (cutover, migration or teardown under way): relaxed before any release", Observation{Ambient: true, Pods: captured("c", "c")}, with(amb, true, true)},
		{"all in sight captured, STRICT, but a member missing (replaced, its new Pod not created or not seen yet): relaxed for the replacement",
			Observation{Ambient: true, Strict: true, Replicas: 3, Pods: captured("c", "c")}, with(amb, true, true)},
		{"all captured, STRICT, a member terminating: relaxed before its replacement comes",
			Observation{Ambient: true, Strict: true, Replicas: 2, Pods: append(captured("c"), Pod{Name: "f-1", Revision: "a", Terminating: true})}, with(amb, true, true)},
		{"all captured, STRICT, scaling down (more members than wanted): tight",
			Observation{Ambient: true, Strict: true, Replicas: 1, Pods: captured("c", "c")}, with(amb, false, true)},
		{"sidecars left for ambient, the last replacement not seen yet: relaxed (explorer, sidecars-leave-for-ambient)",
			Observation{Ambient: true, Strict: true, WasMeshed: true, Replicas: 2, Pods: captured("c")}, with(amb, true, true)},
		{"namespace left, one member still captured", Observation{Pods: captured("c", "-")}, with(amb, true, true)},
		{"namespace left: relaxed before the first release", Observation{Strict: true, Pods: captured("c", "c")}, with(amb, true, true)},
		{"all released", Observation{Pods: captured("-", "-")}, State{Phase: NotMeshed}},
		{"asking for the mesh, not in it: the ambient policy stands by for a capture that comes first", Observation{Requested: true, Pods: captured("-", "-")},
			State{Phase: NotMeshed, Standby: true, Relaxed: true}},
		{"disabled or sidecar-desired fleets have no standby", Observation{Pods: captured("-", "-")}, State{Phase: NotMeshed}},
		{"a sidecar join while members are still captured keeps the ambient policy (Captured)", Observation{Desired: true, Pods: captured("c", "-")},
			State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true, Captured: true}},
		{"sidecars leaving for ambient while replacements are already captured take the ambient policy (Captured)",
			Observation{Ambient: true, WasMeshed: true, Pods: append(captured("c"), Pod{Name: "f-1", Revision: "a", Proxy: true})},
			State{Phase: Leaving, Relaxed: true, Policies: true, IstiodEgress: true, Captured: true}},
		{"sidecars leaving for ambient take the ambient policy before the first replacement is captured",
			Observation{Ambient: true, WasMeshed: true, Pods: []Pod{{Name: "f-0", Revision: "a", Proxy: true}, {Name: "f-1", Revision: "a", Proxy: true}}},
			State{Phase: Leaving, Relaxed: true, Policies: true, IstiodEgress: true, Captured: true}},
		{"a sidecar fleet joining a namespace that may turn ambient: members without their proxy may be captured first",
			Observation{Desired: true, MayBeCaptured: true, Pods: []Pod{{Name: "f-0", Revision: "a", Proxy: true}, {Name: "f-1", Revision: "a"}}},
			State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true, Captured: true}},
		{"a sidecar fleet joining a sidecar-enrolled namespace: nothing captures",
			Observation{Desired: true, Pods: []Pod{{Name: "f-0", Revision: "a", Proxy: true}, {Name: "f-1", Revision: "a"}}},
			State{Phase: Joining, Relaxed: true, Policies: true, IstiodEgress: true}},
		{"a sidecar fleet fully meshed: nothing to capture",
			Observation{Desired: true, MayBeCaptured: true, Pods: []Pod{{Name: "f-0", Revision: "a", Proxy: true}}},
			State{Phase: Meshed, Policies: true, IstiodEgress: true}},
		{"sidecars leaving a sidecar namespace stay on the sidecar policy",
			Observation{WasMeshed: true, Pods: []Pod{{Name: "f-0", Revision: "a", Proxy: true}}},
			State{Phase: Leaving, Relaxed: true, Policies: true, IstiodEgress: true}},
	} {
		assert.Equal(t, c.want, Decide(c.obs), c.name)
	}
	st := Decide(Observation{Ambient: true, WasMeshed: true, Pods: pods("f-0:a:p:-", "f-1:b:-:-")})
	assert.Equal(t, Leaving, st.Phase, "sidecars leaving for ambient still relax first")

	// The ambient policy, judged as ztunnel would: a captured member takes
	// its peer's plaintext on 8081 wherever PeerAuthentication lets
	// plaintext in (PERMISSIVE: the fleet relaxed 8081, or the namespace is
	// not STRICT), never another identity's.
	f := fleet(v1alpha1.AllowAll)
	members := map[string]string{labels.Fleet: f.Name}
	ap := authzeval.FromUnstructured(AmbientAuthorizationPolicy(f, params, v1alpha1.AllowAll, Wiring{}, nil), members)
	plaintextPeer := authzeval.Request{Port: 8081}
	client := authzeval.Request{MTLS: true, Principal: "cluster.local/ns/" + f.Namespace + "/sa/web", Namespace: f.Namespace, Port: 8081}
	peer := authzeval.Request{MTLS: true, Principal: "cluster.local/ns/" + f.Namespace + "/sa/" + f.Name, Namespace: f.Namespace, Port: 8081}
	assert.True(t, authzeval.Evaluate("PERMISSIVE", []authzeval.Policy{ap}, plaintextPeer).Allowed, "PERMISSIVE: plaintext on 8081")
	assert.False(t, authzeval.Evaluate("STRICT", []authzeval.Policy{ap}, plaintextPeer).Allowed, "STRICT refuses plaintext before any policy")
	assert.False(t, authzeval.Evaluate("PERMISSIVE", []authzeval.Policy{ap}, client).Allowed, "a client identity on 8081")
	assert.True(t, authzeval.Evaluate("STRICT", []authzeval.Policy{ap}, peer).Allowed, "a captured peer on 8081")
}

// TestAllowAllAdmitsAnyCallerOn8080 judges the sidecar-mode policy with
// Istio's rules (shared/authzeval): AllowAll means any caller on 8080, as
// the seed says, including a client that shares the fleet's ServiceAccount
// and the operator; NetworkPolicy keeps peers off 8080 in sidecar mode.
func TestAllowAllAdmitsAnyCallerOn8080(t *testing.T) {
	f := fleet(v1alpha1.AllowAll)
	f.Spec.ServiceAccountName = "default"
	members := map[string]string{labels.Fleet: f.Name}
	ap := authzeval.FromUnstructured(AuthorizationPolicy(f, params, v1alpha1.AllowAll, false, Wiring{}, nil), members)
	callers := map[string]authzeval.Request{
		"a client sharing the fleet's ServiceAccount": {MTLS: true, Principal: "cluster.local/ns/" + f.Namespace + "/sa/default", Namespace: f.Namespace},
		"the operator":   {MTLS: true, Principal: "cluster.local/ns/fleet-system/sa/fleet-operator", Namespace: "fleet-system"},
		"another client": {MTLS: true, Principal: "cluster.local/ns/shop/sa/checkout", Namespace: "shop"},
	}
	for name, req := range callers {
		req.Port = 8080
		assert.True(t, authzeval.Evaluate("STRICT", []authzeval.Policy{ap}, req).Allowed, "%s on 8080", name)
	}
	other := callers["another client"]
	other.Port = 8081
	assert.False(t, authzeval.Evaluate("STRICT", []authzeval.Policy{ap}, other).Allowed, "8081 stays limited to the peer identities")

	// Ambient keeps the exclusion: the NetworkPolicy sees only HBONE there.
	amb := authzeval.FromUnstructured(AmbientAuthorizationPolicy(f, params, v1alpha1.AllowAll, Wiring{}, nil), members)
	shared := callers["a client sharing the fleet's ServiceAccount"]
	shared.Port = 8080
	assert.False(t, authzeval.Evaluate("STRICT", []authzeval.Policy{amb}, shared).Allowed, "ambient: peer identities stay off 8080")
	other.Port = 8080
	assert.True(t, authzeval.Evaluate("STRICT", []authzeval.Policy{amb}, other).Allowed)
}

// TestFormerAccountsAdmittedOn8081 judges both policies with Istio's rules
// while a change of spec.serviceAccountName rolls: the old identity the
// members or the template still run as and the new one are both peers on
// 8081; with no former account left, only the new one.
func TestFormerAccountsAdmittedOn8081(t *testing.T) {
	f := fleet(v1alpha1.AllowAll)
	f.Spec.ServiceAccountName = "custom"
	template := "orders"
	former := FormerAccounts(f, []string{"orders", "custom", "orders", ""}, &template)
	assert.Equal(t, []string{"default", "orders"}, former, "sorted, without the spec's, a Pod naming none runs as default")
	assert.Empty(t, FormerAccounts(f, []string{"custom"}, nil))

	members := map[string]string{labels.Fleet: f.Name}
	peer := func(sa string) authzeval.Request {
		return authzeval.Request{MTLS: true, Principal: "cluster.local/ns/" + f.Namespace + "/sa/" + sa, Namespace: f.Namespace, Port: 8081}
	}
	for mode, build := range map[string]func([]string) *unstructured.Unstructured{
		"sidecar": func(former []string) *unstructured.Unstructured {
			return AuthorizationPolicy(f, params, v1alpha1.AllowAll, false, Wiring{}, former)
		},
		"ambient": func(former []string) *unstructured.Unstructured {
			return AmbientAuthorizationPolicy(f, params, v1alpha1.AllowAll, Wiring{}, former)
		},
	} {
		rolling := authzeval.FromUnstructured(build([]string{"orders"}), members)
		assert.True(t, authzeval.Evaluate("STRICT", []authzeval.Policy{rolling}, peer("orders")).Allowed, "%s: an old member on 8081 during the roll", mode)
		assert.True(t, authzeval.Evaluate("STRICT", []authzeval.Policy{rolling}, peer("custom")).Allowed, "%s: a new member on 8081 during the roll", mode)
		assert.False(t, authzeval.Evaluate("STRICT", []authzeval.Policy{rolling}, peer("web")).Allowed, "%s: no other identity", mode)
		rolled := authzeval.FromUnstructured(build(nil), members)
		assert.False(t, authzeval.Evaluate("STRICT", []authzeval.Policy{rolled}, peer("orders")).Allowed, "%s: the old identity once nothing runs as it", mode)
		assert.True(t, authzeval.Evaluate("STRICT", []authzeval.Policy{rolled}, peer("custom")).Allowed, "%s", mode)
	}
}

// TestDeclaresEdges: a fleet that asks for the mesh declares its edges; a
// disabled one keeps them while any member is still in the mesh (captured,
// or running a proxy, terminating ones included) and only then withdraws
// them (issue 42: the roll out of an isolated namespace deadlocked).
func TestDeclaresEdges(t *testing.T) {
	disabled := Intent{Disabled: true}
	decide := func(o Observation) State { o.Replicas = 2; return Decide(o) }
	captured := []Pod{{Name: "m-0", Captured: true}, {Name: "m-1", Revision: "new"}}
	released := []Pod{{Name: "m-0"}, {Name: "m-1"}}
	sidecarTerminating := []Pod{{Name: "m-0", Proxy: true, Terminating: true}, {Name: "m-1"}}
	tests := []struct {
		name string
		in   Intent
		st   State
		want bool
	}{
		{"auto asks: edges with the request", Intent{}, decide(Observation{Pods: released}), true},
		{"disabled, a member still captured", disabled, decide(Observation{Pods: captured, TargetRevision: "new"}), true},
		{"disabled, the last member released", disabled, decide(Observation{Pods: released}), false},
		{"disabled after sidecars, a terminating member still runs its proxy", disabled, decide(Observation{WasMeshed: true, Pods: sidecarTerminating}), true},
		{"disabled after sidecars, no proxy left", disabled, decide(Observation{WasMeshed: true, Pods: released}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, DeclaresEdges(tc.in, tc.st))
		})
	}
}

// TestIstiodNamespaces: a moved control plane stays open while a proxy
// (terminating ones included) points at it, or while a proxy does not say
// where it points (issue 42: moving it cut the running sidecars off).
func TestIstiodNamespaces(t *testing.T) {
	meshed := State{Phase: Meshed, Policies: true, IstiodEgress: true}
	old := func(name string) Pod { return Pod{Name: name, Proxy: true, ControlPlanes: []string{"istio-old"}} }
	moved := func(name string) Pod { return Pod{Name: name, Proxy: true, ControlPlanes: []string{"istio-new"}} }
	unknown := Pod{Name: "m-2", Proxy: true, ControlPlaneUnknown: true}
	terminating := old("m-0")
	terminating.Terminating = true
	for _, tc := range []struct {
		name string
		st   State
		open []string
		pods []Pod
		want []string
	}{
		{"no proxy may need istiod: nothing", State{Phase: Left}, []string{"istio-old"}, []Pod{{Name: "m-0"}}, nil},
		{"moved, every proxy still on the old one", meshed, []string{"istio-old"}, []Pod{old("m-0"), old("m-1")}, []string{"istio-new", "istio-old"}},
		{"a terminating proxy on the old one", meshed, []string{"istio-new", "istio-old"}, []Pod{terminating, moved("m-1")}, []string{"istio-new", "istio-old"}},
		{"every proxy on the new one: the old one closes", meshed, []string{"istio-new", "istio-old"}, []Pod{moved("m-0"), moved("m-1")}, []string{"istio-new"}},
		{"a proxy that does not say keeps what is open", meshed, []string{"istio-new", "istio-old"}, []Pod{moved("m-0"), unknown}, []string{"istio-new", "istio-old"}},
		{"a proxy that does not say, nothing open yet", meshed, nil, []Pod{unknown}, []string{"istio-new"}},
		{"a proxy injected by another control plane than the fleet names", meshed, nil, []Pod{{Name: "m-0", Proxy: true, ControlPlanes: []string{"istio-rev"}}}, []string{"istio-new", "istio-rev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, IstiodNamespaces(tc.st, "istio-new", tc.open, tc.pods))
		})
	}
}
