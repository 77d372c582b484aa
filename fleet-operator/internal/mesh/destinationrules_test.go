package mesh

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

func TestMutualTLSRules(t *testing.T) {
	f := &v1alpha1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart"}}
	dests := FleetDestinations(f)
	app, peer := "cart.shop.svc.cluster.local:8080", "cart-peers.shop.svc.cluster.local:8081"
	mutual := func(ns, name, host string, exportTo ...string) DestinationRule {
		return DestinationRule{Namespace: ns, Name: name, Host: host, ExportTo: exportTo, TLSMode: IstioMutual}
	}
	withMode := func(r DestinationRule, mode string) DestinationRule { r.TLSMode = mode; return r }
	withPort := func(r DestinationRule, port int, mode string) DestinationRule {
		r.PortTLSModes = map[int]string{port: mode}
		return r
	}
	one := func(ns, name string, toward ...string) []MutualTLSRule {
		return []MutualTLSRule{{Namespace: ns, Name: name, Toward: toward}}
	}
	tests := []struct {
		name  string
		rules []DestinationRule
		want  []MutualTLSRule
	}{
		{"no rules", nil, nil},
		{"short name in the fleet's namespace", []DestinationRule{mutual("shop", "dr", "cart")}, one("shop", "dr", app)},
		{"short name of the peer Service", []DestinationRule{mutual("shop", "dr", "cart-peers")}, one("shop", "dr", peer)},
		{"a short name is relative to the rule's namespace", []DestinationRule{mutual("istio-system", "dr", "cart")}, nil},
		{"fully qualified", []DestinationRule{mutual("shop", "dr", "cart-peers.shop.svc.cluster.local")}, one("shop", "dr", peer)},
		{"svc.ns is not completed by Istio: no match", []DestinationRule{mutual("shop", "dr", "cart.shop")}, nil},
		{"namespace wildcard", []DestinationRule{mutual("shop", "dr", "*.shop.svc.cluster.local")}, one("shop", "dr", app, peer)},
		{"cluster wildcard", []DestinationRule{mutual("shop", "dr", "*.cluster.local")}, one("shop", "dr", app, peer)},
		{"another namespace's wildcard", []DestinationRule{mutual("shop", "dr", "*.other.svc.cluster.local")}, nil},
		{"*", []DestinationRule{mutual("shop", "dr", "*")}, one("shop", "dr", app, peer)},
		{"root namespace, exported everywhere by default", []DestinationRule{mutual("istio-system", "default", "*")}, one("istio-system", "default", app, peer)},
		{"root namespace, exported with *", []DestinationRule{mutual("istio-system", "default", "*.local", "*")}, one("istio-system", "default", app, peer)},
		{"root namespace, exported to the fleet's namespace", []DestinationRule{mutual("istio-system", "default", "*", "shop")}, one("istio-system", "default", app, peer)},
		{"root namespace, private", []DestinationRule{mutual("istio-system", "default", "*", ".")}, nil},
		{"root namespace, exported elsewhere", []DestinationRule{mutual("istio-system", "default", "*", "other")}, nil},
		{"fleet namespace, private: still applies to callers there", []DestinationRule{mutual("shop", "dr", "cart", ".")}, one("shop", "dr", app)},
		{"fleet namespace, exported to none", []DestinationRule{mutual("shop", "dr", "cart", "~")}, nil},
		{"fleet namespace, exported only elsewhere", []DestinationRule{mutual("shop", "dr", "cart", "other")}, nil},
		{"another namespace's rule exported to the fleet's: Istio does not consult it",
			[]DestinationRule{mutual("other", "dr", "cart.shop.svc.cluster.local", "shop")}, nil},
		{"a rule without ISTIO_MUTUAL", []DestinationRule{withMode(mutual("shop", "dr", "cart"), "DISABLE")}, nil},
		{"SIMPLE", []DestinationRule{withMode(mutual("shop", "dr", "*"), "SIMPLE")}, nil},
		{"port level ISTIO_MUTUAL on the peer port only",
			[]DestinationRule{withPort(withMode(mutual("shop", "dr", "*"), ""), 8081, IstioMutual)}, one("shop", "dr", peer)},
		{"port level DISABLE on 8081 wins over the rule's own",
			[]DestinationRule{withPort(mutual("shop", "dr", "*"), 8081, "DISABLE")}, one("shop", "dr", app)},
		{"port level on another port does not matter",
			[]DestinationRule{withPort(withMode(mutual("shop", "dr", "*"), ""), 9090, IstioMutual)}, nil},
		{"the fleet namespace's match hides the root's",
			[]DestinationRule{withMode(mutual("shop", "auto", "*.shop.svc.cluster.local"), ""), mutual("istio-system", "default", "*")}, nil},
		{"the root's applies where the fleet namespace has no match",
			[]DestinationRule{withMode(mutual("shop", "other", "db"), ""), mutual("istio-system", "default", "*")}, one("istio-system", "default", app, peer)},
		{"the most specific host wins in a namespace",
			[]DestinationRule{mutual("shop", "wide", "*.shop.svc.cluster.local"), withMode(mutual("shop", "peers", "cart-peers"), "")}, one("shop", "wide", app)},
		{"a longer wildcard wins over *",
			[]DestinationRule{mutual("shop", "all", "*"), withMode(mutual("shop", "ns", "*.shop.svc.cluster.local"), "")}, nil},
		{"rules with the same host are merged: any ISTIO_MUTUAL counts",
			[]DestinationRule{withMode(mutual("shop", "a", "cart"), ""), mutual("shop", "b", "cart.shop.svc.cluster.local")}, one("shop", "b", app)},
		{"several rules are named, sorted",
			[]DestinationRule{mutual("shop", "z", "cart"), mutual("shop", "a", "cart-peers")},
			[]MutualTLSRule{{Namespace: "shop", Name: "a", Toward: []string{peer}}, {Namespace: "shop", Name: "z", Toward: []string{app}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MutualTLSRules("shop", "istio-system", dests, tt.rules)
			if len(tt.want) == 0 {
				assert.Empty(t, got)
				return
			}
			assert.Equal(t, tt.want, got)
		})
	}
	t.Run("the fleet in the root namespace", func(t *testing.T) {
		got := MutualTLSRules("shop", "shop", dests, []DestinationRule{mutual("shop", "dr", "*")})
		assert.Equal(t, one("shop", "dr", app, peer), got)
	})
}

func TestDestinationRuleFrom(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "shop", "name": "dr"},
		"spec": map[string]any{
			"host":     "*.shop.svc.cluster.local",
			"exportTo": []any{".", "other"},
			"trafficPolicy": map[string]any{
				"tls": map[string]any{"mode": "ISTIO_MUTUAL"},
				"portLevelSettings": []any{
					map[string]any{"port": map[string]any{"number": int64(8081)}, "tls": map[string]any{"mode": "DISABLE"}},
					map[string]any{"port": map[string]any{"number": int64(8080)}, "loadBalancer": map[string]any{"simple": "ROUND_ROBIN"}},
				},
			},
		},
	}}
	assert.Equal(t, DestinationRule{
		Namespace: "shop", Name: "dr", Host: "*.shop.svc.cluster.local", ExportTo: []string{".", "other"},
		TLSMode: IstioMutual, PortTLSModes: map[int]string{8081: "DISABLE"},
	}, DestinationRuleFrom(u))
}
