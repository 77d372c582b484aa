package explore

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

// TestStuckAtRest: at rest only the reasons a sequence explains may
// remain (restReasons), documented or not; before issue 43 any reason
// docs/troubleshooting.md names passed, ReconcileError included.
func TestStuckAtRest(t *testing.T) {
	documented := func(reason string) bool { return reason != "Mystery" }
	cond := func(typ, status, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), Reason: reason, Message: "says " + reason}
	}
	fl := func(name string, cs ...metav1.Condition) fleetv1.CelldFleet {
		return fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: fleetv1.CelldFleetStatus{Conditions: cs}}
	}
	sm := func(c metav1.Condition) *meshv1.ServiceMesh {
		return &meshv1.ServiceMesh{Status: meshv1.ServiceMeshStatus{Conditions: []metav1.Condition{c}}}
	}
	ready := cond("Ready", "True", "MembersReady")
	seq := func(as ...Action) []Action { return as }
	create := Action{Kind: FleetCreate, Fleet: "a"}
	for _, tc := range []struct {
		name   string
		fleets []fleetv1.CelldFleet
		mesh   *meshv1.ServiceMesh
		seq    []Action
		want   string
	}{
		{"Ready", []fleetv1.CelldFleet{fl("a", ready)}, sm(cond("Ready", "True", "ControlPlaneReady")), seq(create), ""},
		{"ProxyMissing without an injector", []fleetv1.CelldFleet{fl("a", cond("Ready", "False", "ProxyMissing"))}, nil,
			seq(Action{Kind: MeshCreate, Arg: "sidecar"}, create, Action{Kind: Injector, Arg: "on"}, Action{Kind: Injector, Arg: "off"}), ""},
		{"ProxyMissing with the injector on", []fleetv1.CelldFleet{fl("a", cond("Ready", "False", "ProxyMissing"))}, nil,
			seq(Action{Kind: Injector, Arg: "on"}, Action{Kind: MeshCreate, Arg: "sidecar"}, create),
			`at rest, fleet a is Ready=False with reason "ProxyMissing", which no action of the sequence explains: says ProxyMissing`},
		{"no Ready condition", []fleetv1.CelldFleet{fl("a")}, nil, seq(create), "at rest, fleet a has no Ready condition"},
		{"MembersNotReady, nothing explains it", []fleetv1.CelldFleet{fl("a", cond("Ready", "False", "MembersNotReady"))}, nil, seq(create),
			`at rest, fleet a is Ready=False with reason "MembersNotReady", which no action of the sequence explains: says MembersNotReady`},
		{"MembersNotReady, paused", []fleetv1.CelldFleet{fl("a", cond("Ready", "False", "MembersNotReady"))}, nil,
			seq(create, Action{Kind: FleetPause, Fleet: "a", Arg: "on"}, Action{Kind: FleetImage, Fleet: "a"}), ""},
		{"MembersNotReady, paused and resumed", []fleetv1.CelldFleet{fl("a", cond("Ready", "False", "MembersNotReady"))}, nil,
			seq(create, Action{Kind: FleetPause, Fleet: "a", Arg: "on"}, Action{Kind: FleetPause, Fleet: "a", Arg: "off"}), "which no action of the sequence explains"},
		{"MembersNotReady, another fleet paused", []fleetv1.CelldFleet{fl("a", cond("Ready", "False", "MembersNotReady")), fl("b", ready)}, nil,
			seq(create, Action{Kind: FleetPause, Fleet: "b", Arg: "on"}), `fleet a is Ready=False with reason "MembersNotReady", which no action`},
		{"ReconcileError is documented, and never explained", []fleetv1.CelldFleet{fl("a", ready)}, sm(cond("Ready", "False", "ReconcileError")),
			seq(create, Action{Kind: License, Arg: "delete"}, Action{Kind: CRDs, Arg: "istio-off"}),
			`at rest, the ServiceMesh is Ready=False with reason "ReconcileError", which no action of the sequence explains`},
		{"the license deleted", nil, sm(cond("Ready", "False", "PreviewLocked")), seq(Action{Kind: License, Arg: "delete"}), ""},
		{"the license deleted and restored", nil, sm(cond("Ready", "False", "PreviewLocked")),
			seq(Action{Kind: License, Arg: "delete"}, Action{Kind: License, Arg: "restore"}), "which no action of the sequence explains"},
		{"the license unreadable", nil, sm(cond("Ready", "Unknown", "LicenseUnreadable")), seq(Action{Kind: LicenseRead, Arg: "deny"}), ""},
		{"Istio's CRDs removed, the Gateway API's restored", nil, sm(cond("Ready", "False", "IstioAPIMissing")),
			seq(Action{Kind: CRDs, Arg: "istio-off"}, Action{Kind: CRDs, Arg: "gateway-off"}, Action{Kind: CRDs, Arg: "gateway-on"}), ""},
		{"Istio's CRDs removed and restored", nil, sm(cond("Ready", "False", "IstioAPIMissing")),
			seq(Action{Kind: CRDs, Arg: "istio-off"}, Action{Kind: CRDs, Arg: "istio-on"}), "which no action of the sequence explains"},
		{"an Ingress without address", []fleetv1.CelldFleet{fl("a", ready, cond("RoutingReady", "Unknown", "AwaitingAddress"))}, nil,
			seq(create, Action{Kind: FleetRouting, Fleet: "a", Arg: "on"}), ""},
		{"a route refused by the Gateway", []fleetv1.CelldFleet{fl("a", ready, cond("RoutingReady", "False", "RouteNotAccepted"))}, nil,
			seq(create, Action{Kind: FleetRouting, Fleet: "a", Arg: "gateway"}),
			`at rest, fleet a is RoutingReady=False with reason "RouteNotAccepted", which no action of the sequence explains`},
		{"a route refused by the Gateway told to refuse", []fleetv1.CelldFleet{fl("a", ready, cond("RoutingReady", "False", "RouteNotAccepted"))}, nil,
			seq(create, Action{Kind: FleetRouting, Fleet: "a", Arg: "gateway"}, Action{Kind: Gateway, Arg: "reject"}), ""},
		{"Ready=False for the route", []fleetv1.CelldFleet{fl("a", cond("Ready", "False", "RouteNotAccepted"), cond("RoutingReady", "False", "RouteNotAccepted"))}, nil,
			seq(create, Action{Kind: Gateway, Arg: "reject"}), "routing must stay separate from Ready"},
		{"an undocumented reason", nil, sm(cond("Ready", "False", "Mystery")), seq(), `reason "Mystery", which docs/troubleshooting.md does not explain`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := stuckAtRest(tc.fleets, tc.mesh, tc.seq, documented)
			if tc.want == "" {
				wantViolation(t, got)
				return
			}
			wantViolation(t, got, tc.want)
			if len(got) != 1 {
				t.Fatalf("want one violation, got:\n%s", strings.Join(got, "\n"))
			}
		})
	}
}
