package explore

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

// restReasons: the reasons a sequence may leave a condition with at rest,
// by the action that explains them ("kind arg", or "kind" for any
// argument). Only the last action of a kind on the same subject counts (the
// same fleet, the same CRD group): `env.crds istio-off` followed by
// `istio-on` explains nothing. A fleet action explains its own fleet's
// conditions only. A reason no action explains fails at rest, however
// well docs/troubleshooting.md explains it: ReconcileError,
// MembersNotReady, WaitingForMembers are what an operator that gave up
// reports.
var restReasons = map[string][]string{
	// A paused fleet holds the changes made while paused.
	FleetPause + " on": {string(fleetv1.ReasonMaintenancePaused), string(fleetv1.ReasonRollPaused), string(fleetv1.ReasonMembersNotReady)},
	// A sidecar fleet without an injector (env.injector off, or never on).
	FleetIstio + " on":       {string(fleetv1.ReasonProxyMissing)},
	FleetIstio + " policies": {string(fleetv1.ReasonProxyMissing)},
	FleetControlNS:           {string(fleetv1.ReasonProxyMissing)},
	// No Ingress controller publishes an address on the bed.
	FleetRouting + " on":  {string(fleetv1.ReasonAwaitingAddress)},
	Gateway + " reject":   {string(fleetv1.ReasonRouteNotAccepted)},
	CRDs + " gateway-off": {string(fleetv1.ReasonGatewayAPIUnavailable)},
	CRDs + " istio-off":   {string(fleetv1.ReasonIstioAPIUnavailable), string(meshv1.ReasonIstioAPIMissing)},
	License + " delete":   {string(meshv1.ReasonLicenseMissing), string(meshv1.ReasonPreviewLocked)},
	License + " expiring": {string(meshv1.ReasonLicenseExpired), string(meshv1.ReasonPreviewLocked)},
	LicenseRead + " deny": {string(meshv1.ReasonLicenseUnreadable)},
	// Pod Security admission refuses members the template does not make
	// meet restricted (policyengines.go).
	PolicyPSS + " restricted": {string(fleetv1.ReasonMembersRefused)},
	// The API server refuses the fleet's StatefulSet (policiesAtRest
	// checks that the status quotes the policy).
	PolicySTS + " on": {string(fleetv1.ReasonStatefulSetRefused)},
}

// subject is what a later action of the same kind replaces: the fleet, and
// for env.crds the CRD group.
func subject(a Action) string {
	s := a.Kind + "/" + a.Fleet
	if a.Kind == CRDs {
		group, _, _ := strings.Cut(a.Arg, "-")
		s += "/" + group
	}
	return s
}

// explainedAtRest is the set of reasons seq explains at rest for fleet
// (fleet "" : the ServiceMesh and the environment only).
func explainedAtRest(seq []Action, fleet string) map[string]bool {
	last := map[string]Action{}
	var order []string
	for _, a := range seq {
		k := subject(a)
		if _, ok := last[k]; !ok {
			order = append(order, k)
		}
		last[k] = a
	}
	out := map[string]bool{}
	// Without the played injector (never on, or off last) no Pod gets a
	// proxy: any fleet that joins a sidecar mesh (mode auto in an enrolled
	// namespace, not only fleet.istio) reports its members ProxyMissing.
	if inj, ok := last[subject(Action{Kind: Injector})]; !ok || inj.Arg != "on" {
		out[string(fleetv1.ReasonProxyMissing)] = true
	}
	for _, k := range order {
		a := last[k]
		if a.Fleet != "" && a.Fleet != fleet {
			continue
		}
		for _, key := range []string{a.Kind, a.Kind + " " + a.Arg} {
			for _, r := range restReasons[key] {
				out[r] = true
			}
		}
	}
	return out
}

// stuckAtRest judges the conditions at rest: every fleet and the
// ServiceMesh Ready (and a fleet's RoutingReady True), or not with a reason
// the sequence explains (explainedAtRest) and docs/troubleshooting.md
// documents; routing never the cause of Ready=False. mesh is nil when there
// is no ServiceMesh.
func stuckAtRest(fleets []fleetv1.CelldFleet, mesh *meshv1.ServiceMesh, seq []Action, documented func(string) bool) []string {
	var out []string
	judge := func(what string, c *metav1.Condition, explained map[string]bool) {
		if c == nil || c.Status == metav1.ConditionTrue {
			return
		}
		switch {
		case !documented(c.Reason):
			out = append(out, fmt.Sprintf("at rest, %s=%s with reason %q, which docs/troubleshooting.md does not explain: %s", what, c.Status, c.Reason, c.Message))
		case !explained[c.Reason]:
			out = append(out, fmt.Sprintf("at rest, %s=%s with reason %q, which no action of the sequence explains: %s", what, c.Status, c.Reason, c.Message))
		}
	}
	for _, f := range fleets {
		if f.DeletionTimestamp != nil {
			continue
		}
		explained := explainedAtRest(seq, f.Name)
		c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionReady))
		if c == nil {
			out = append(out, fmt.Sprintf("at rest, fleet %s has no Ready condition", f.Name))
		}
		judge("fleet "+f.Name+" is Ready", c, explained)
		// Routing is reported separately from Ready: a route's trouble
		// never makes the fleet un-Ready.
		rc := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionRoutingReady))
		if c != nil && rc != nil && c.Status != metav1.ConditionTrue && rc.Status != metav1.ConditionTrue && c.Reason == rc.Reason {
			out = append(out, fmt.Sprintf("at rest, fleet %s is Ready=%s for its route (%s): routing must stay separate from Ready", f.Name, c.Status, c.Reason))
		}
		judge("fleet "+f.Name+" is RoutingReady", rc, explained)
	}
	if mesh != nil {
		judge("the ServiceMesh is Ready", meta.FindStatusCondition(mesh.Status.Conditions, string(meshv1.ConditionReady)), explainedAtRest(seq, ""))
	}
	return out
}

// membersAtRest: at rest, a fleet that wants members runs at least one,
// unless its maintenance is paused (a paused fleet holds what it has).
func (j *judgement) membersAtRest(s *snapshot) []string {
	if s == nil {
		return nil
	}
	var out []string
	for _, f := range s.fleets(j.w.app) {
		want := int32(1)
		if f.Spec.Replicas != nil {
			want = *f.Spec.Replicas
		}
		if f.DeletionTimestamp != nil || want == 0 || f.Spec.Maintenance.Paused || j.refusedByPolicy(f) {
			continue
		}
		if len(j.members(s, f)) == 0 {
			out = append(out, fmt.Sprintf("at rest, fleet %s wants %d member(s) and runs none", f.Name, want))
		}
	}
	return out
}
