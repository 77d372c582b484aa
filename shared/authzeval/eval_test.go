package authzeval

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const appSA = "cluster.local/ns/team-a/sa/app"

func TestWildcards(t *testing.T) {
	assert.True(t, in([]string{"cluster.local/ns/team-a/*"}, appSA, true))
	assert.True(t, in([]string{"*/sa/app"}, appSA, true))
	assert.False(t, in([]string{"*"}, "", true), "* is any authenticated identity, never plaintext")
	assert.True(t, in(nil, "", true))
}

func TestPlaintextMatchesOnlyNotPrincipalsWildcard(t *testing.T) {
	denyPlaintext := Policy{Action: "DENY", Selects: true, Rules: []Rule{{From: []Source{{NotPrincipals: []string{"*"}}}}}}
	assert.False(t, Evaluate("PERMISSIVE", []Policy{denyPlaintext}, Request{Port: 8080}).Allowed)
	assert.True(t, Evaluate("PERMISSIVE", []Policy{denyPlaintext}, Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 8080}).Allowed)
}

func TestAllowNothing(t *testing.T) {
	nothing := Policy{Action: "ALLOW", Selects: true}
	d := Evaluate("STRICT", []Policy{nothing}, Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 8080})
	assert.False(t, d.Allowed, "an ALLOW without rules admits nothing")
	assert.Equal(t, "no ALLOW policy matched", d.Why)
}

func TestFromUnstructuredSelectorAndPorts(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "vault"}},
		"rules": []any{map[string]any{
			"from": []any{map[string]any{"source": map[string]any{"principals": []any{appSA}}}},
			"to":   []any{map[string]any{"operation": map[string]any{"ports": []any{"8081", "8080"}}}},
		}},
	}}}
	p := FromUnstructured(u, map[string]string{"app": "vault", "tier": "db"})
	assert.True(t, p.Selects)
	assert.Equal(t, "ALLOW", p.Action)
	assert.Equal(t, []Rule{{From: []Source{{Principals: []string{appSA}}}, To: []int{8081, 8080}}}, p.Rules)
	assert.False(t, FromUnstructured(u, map[string]string{"app": "other"}).Selects)
	assert.False(t, FromUnstructured(u, nil).Selects)

	u.Object["spec"].(map[string]any)["action"] = "DENY"
	delete(u.Object["spec"].(map[string]any), "selector")
	p = FromUnstructured(u, nil)
	assert.True(t, p.Selects, "a policy without selector applies to every workload of its namespace")
	assert.Equal(t, "DENY", p.Action)
}

func peerAuthentication(selector map[string]any, mode string, portLevel map[string]any) unstructured.Unstructured {
	spec := map[string]any{}
	if selector != nil {
		spec["selector"] = map[string]any{"matchLabels": selector}
	}
	if mode != "" {
		spec["mtls"] = map[string]any{"mode": mode}
	}
	if portLevel != nil {
		spec["portLevelMtls"] = portLevel
	}
	return unstructured.Unstructured{Object: map[string]any{"spec": spec}}
}

func TestMTLSModeResolution(t *testing.T) {
	vault := map[string]string{"app": "vault"}
	namespaceStrict := peerAuthentication(nil, "STRICT", nil)
	peerPortPermissive := peerAuthentication(map[string]any{"app": "vault"}, "", map[string]any{"8081": map[string]any{"mode": "PERMISSIVE"}})
	for _, tc := range []struct {
		name string
		pas  []unstructured.Unstructured
		pod  map[string]string
		port int
		want string
	}{
		{"nothing set: Istio's default", nil, vault, 8080, "PERMISSIVE"},
		{"namespace-wide", []unstructured.Unstructured{namespaceStrict}, vault, 8080, "STRICT"},
		{"port-level override on its port", []unstructured.Unstructured{namespaceStrict, peerPortPermissive}, vault, 8081, "PERMISSIVE"},
		{"port-level override, other port inherits", []unstructured.Unstructured{peerPortPermissive, namespaceStrict}, vault, 8080, "STRICT"},
		{"selector does not match", []unstructured.Unstructured{namespaceStrict, peerPortPermissive}, map[string]string{"app": "web"}, 8081, "STRICT"},
		{"UNSET inherits", []unstructured.Unstructured{namespaceStrict, peerAuthentication(map[string]any{"app": "vault"}, "UNSET", nil)}, vault, 8080, "STRICT"},
		{"workload mode wins", []unstructured.Unstructured{namespaceStrict, peerAuthentication(map[string]any{"app": "vault"}, "PERMISSIVE", nil)}, vault, 8080, "PERMISSIVE"},
	} {
		assert.Equal(t, tc.want, MTLSMode(tc.pas, tc.pod, tc.port), tc.name)
	}
}

// The access report names the deciding policy and rule, so the evaluator
// must say which one decided, not only how.
func TestDecisionNamesPolicyAndRule(t *testing.T) {
	deny := Policy{Name: "team-a/mesh-isolation", Action: "DENY", Selects: true,
		Rules: []Rule{{From: []Source{{Principals: []string{"*"}, NotNamespaces: []string{"team-a"}}}}}}
	allow := Policy{Name: "team-a/vault-mesh", Action: "ALLOW", Selects: true,
		Rules: []Rule{{To: []int{8081}, From: []Source{{Principals: []string{appSA}}}}, {To: []int{8080}}}}
	d := Evaluate("STRICT", []Policy{deny, allow}, Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 8080})
	assert.True(t, d.Allowed)
	assert.Equal(t, "team-a/vault-mesh", d.Policy)
	assert.Equal(t, 1, d.Rule)
	d = Evaluate("STRICT", []Policy{deny, allow}, Request{MTLS: true, Principal: "cluster.local/ns/shop/sa/x", Namespace: "shop", Port: 8080})
	assert.False(t, d.Allowed)
	assert.Equal(t, "team-a/mesh-isolation", d.Policy)
	assert.Equal(t, 0, d.Rule)
	d = Evaluate("STRICT", []Policy{allow}, Request{MTLS: true, Principal: appSA, Namespace: "team-a", Port: 9090})
	assert.False(t, d.Allowed)
	assert.Equal(t, -1, d.Rule, "no rule decided: nothing matched")
	d = Evaluate("STRICT", nil, Request{Port: 8080})
	assert.Equal(t, -1, d.Rule)
	assert.Empty(t, d.Policy)
}

func TestModeInForceNamesThePeerAuthentication(t *testing.T) {
	ns := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": "STRICT"}}}}
	ns.SetNamespace("team-a")
	ns.SetName("mesh-mtls")
	fleet := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"selector":      map[string]any{"matchLabels": map[string]any{"app": "vault"}},
		"portLevelMtls": map[string]any{"8081": map[string]any{"mode": "PERMISSIVE"}},
	}}}
	fleet.SetNamespace("team-a")
	fleet.SetName("vault-mesh")
	pas := []unstructured.Unstructured{*ns, *fleet}
	vault := map[string]string{"app": "vault"}
	assert.Equal(t, ModeInForce{Mode: "STRICT", Source: "team-a/mesh-mtls"}, MTLSInForce(pas, vault, 8080, false))
	assert.Equal(t, ModeInForce{Mode: "PERMISSIVE", Source: "team-a/vault-mesh", PortLevel: true}, MTLSInForce(pas, vault, 8081, false))
	assert.Equal(t, ModeInForce{Mode: "PERMISSIVE"}, MTLSInForce(nil, vault, 8080, false), "Istio's default")

	disable := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": "DISABLE"}}}}
	disable.SetNamespace("team-b")
	disable.SetName("off")
	assert.Equal(t, "DISABLE", MTLSInForce([]unstructured.Unstructured{*disable}, nil, 8080, false).Mode)
	assert.Equal(t, "PERMISSIVE", MTLSInForce([]unstructured.Unstructured{*disable}, nil, 8080, true).Mode, "ztunnel ignores DISABLE")
}

// TestOldestPeerAuthenticationWins: with several namespace-wide policies
// (or several selector policies matching a workload) Istio applies the
// oldest, whatever order a list returns them in; equal creation times fall
// back to the name.
func TestOldestPeerAuthenticationWins(t *testing.T) {
	at := func(pa unstructured.Unstructured, name string, minute int) unstructured.Unstructured {
		pa.SetNamespace("team-a")
		pa.SetName(name)
		pa.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 12, 7, 4, minute, 0, 0, time.UTC)))
		return pa
	}
	users := at(peerAuthentication(nil, "PERMISSIVE", nil), "default", 1)
	ours := at(peerAuthentication(nil, "STRICT", nil), "mesh-mtls", 2)
	vault := map[string]string{"app": "vault"}
	for _, order := range [][]unstructured.Unstructured{{users, ours}, {ours, users}} {
		assert.Equal(t, ModeInForce{Mode: "PERMISSIVE", Source: "team-a/default"}, MTLSInForce(order, vault, 8080, false))
	}
	same := at(peerAuthentication(nil, "STRICT", nil), "a-first", 1)
	assert.Equal(t, "team-a/a-first", MTLSInForce([]unstructured.Unstructured{users, same}, vault, 8080, false).Source, "same minute: by name")

	oldWorkload := at(peerAuthentication(map[string]any{"app": "vault"}, "DISABLE", nil), "vault-old", 3)
	newWorkload := at(peerAuthentication(map[string]any{"app": "vault"}, "STRICT", nil), "vault-new", 4)
	for _, order := range [][]unstructured.Unstructured{{ours, newWorkload, oldWorkload}, {oldWorkload, ours, newWorkload}} {
		assert.Equal(t, ModeInForce{Mode: "DISABLE", Source: "team-a/vault-old"}, MTLSInForce(order, vault, 8080, false))
	}
}
