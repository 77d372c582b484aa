package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/pacing"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// Phases shown by kubectl get.
const (
	PhaseBlocked      = "Blocked"
	PhaseProvisioning = "Provisioning"
	PhaseRolling      = "Rolling"
	PhaseReady        = "Ready"
	PhaseDegraded     = "Degraded"
	PhasePaused       = "Paused"
)

// conditionSetter writes one condition of the status being computed;
// meta.SetStatusCondition keeps LastTransitionTime when the status did not
// flip, so an unchanged fleet produces an identical status.
type conditionSetter func(t v1alpha1.ConditionType, s metav1.ConditionStatus, reason v1alpha1.ConditionReason, msg string)

// computeStatus is a pure function of the fleet and what the reconcile
// observed. Timestamps only move when something changed, so an unchanged
// fleet produces an identical status and no write. Each condition has its
// own set*Condition below; computeStatus only orders them.
func computeStatus(fleet *v1alpha1.CelldFleet, obs *observed, now time.Time) v1alpha1.CelldFleetStatus {
	prev := fleet.Status
	st := v1alpha1.CelldFleetStatus{
		ObservedGeneration: fleet.Generation,
		Conditions:         append([]metav1.Condition(nil), prev.Conditions...),
	}
	set := func(t v1alpha1.ConditionType, s metav1.ConditionStatus, reason v1alpha1.ConditionReason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: string(t), Status: s, Reason: string(reason), Message: msg, ObservedGeneration: fleet.Generation,
			LastTransitionTime: metav1.NewTime(now),
		})
	}
	if obs.failed != nil {
		// Some objects may not have been built from this spec: status does
		// not claim it was observed.
		st.ObservedGeneration = prev.ObservedGeneration
	}
	setReconciledCondition(obs, set)
	setRoutingCondition(&st, obs, set)
	setNamespaceCondition(fleet, &st, obs, set)
	if obs.failed != nil && obs.reports == nil && obs.blocked == nil {
		// The members were not looked at (or not read): what status said
		// of them is still the best knowledge, not "not read" or Degraded.
		st.Members, st.Replicas, st.ReadyReplicas, st.UpdatedReplicas = prev.Members, prev.Replicas, prev.ReadyReplicas, prev.UpdatedReplicas
		st.CurrentRevision, st.TargetRevision, st.Phase, st.Mesh = prev.CurrentRevision, prev.TargetRevision, prev.Phase, prev.Mesh
		setKStatusConditions(&st, obs, set)
		return st
	}

	if obs.sts != nil {
		st.CurrentRevision = obs.sts.Status.CurrentRevision
		st.TargetRevision = obs.sts.Status.UpdateRevision
	} else {
		st.CurrentRevision = prev.CurrentRevision
		st.TargetRevision = prev.TargetRevision
	}
	previous := map[string]v1alpha1.MemberStatus{}
	for _, m := range prev.Members {
		previous[m.Name] = m
	}
	for i := range obs.pods {
		p := &obs.pods[i]
		ms := memberStatus(fleet, p, obs, previous[p.Name], now)
		st.Members = append(st.Members, ms)
		st.Replicas++
		if ms.Ready {
			st.ReadyReplicas++
		}
		if ms.Revision != "" && ms.Revision == st.TargetRevision {
			st.UpdatedReplicas++
		}
	}

	if obs.failed != nil && !obs.meshJudged {
		// MeshReady is judged from steps this pass did not reach (the
		// ServiceAccount's sharers): it says what it said.
		st.Mesh = prev.Mesh
	} else {
		st.Mesh = string(obs.mesh.Phase)
		if !setMeshCondition(fleet, obs, set) {
			// Outside the mesh with nothing to explain (never opted in, or the
			// namespace left the mesh): no MeshReady, as for any plain fleet.
			meta.RemoveStatusCondition(&st.Conditions, string(v1alpha1.ConditionMeshReady))
		}
	}
	if setBlockedCondition(obs, set) {
		st.Phase = PhaseBlocked
		setKStatusConditions(&st, obs, set)
		return st
	}
	setDisksCondition(fleet, obs, set)
	st.Phase = setProvisioningCondition(fleet, &st, obs, set)
	setReadyCondition(fleet, &st, obs, set)
	setKStatusConditions(&st, obs, set)
	return st
}

// setReconciledCondition: did the last reconcile run every step?
func setReconciledCondition(obs *observed, set conditionSetter) {
	if f := obs.failed; f != nil {
		set(v1alpha1.ConditionReconciled, metav1.ConditionFalse, v1alpha1.ReasonStepFailed, fmt.Sprintf(
			"Step %q failed: %v. Conditions and members not reached by this reconcile show the last known state; the operator retries.", f.step, f.err))
		return
	}
	set(v1alpha1.ConditionReconciled, metav1.ConditionTrue, v1alpha1.ReasonAllStepsRan, "The last reconcile ran every step.")
}

// setRoutingCondition: what the routing step found, kept as it was when
// the step did not get to look.
func setRoutingCondition(st *v1alpha1.CelldFleetStatus, obs *observed, set conditionSetter) {
	switch rr := obs.routing; {
	case rr.keep:
	case rr.readiness != nil:
		set(v1alpha1.ConditionRoutingReady, rr.readiness.Status, rr.readiness.Reason, rr.readiness.Message)
	default:
		meta.RemoveStatusCondition(&st.Conditions, string(v1alpha1.ConditionRoutingReady))
	}
}

// setNamespaceCondition: whether the fleet's namespace carries the labels
// the fleet asks for, kept as it was when the step got no answer.
func setNamespaceCondition(fleet *v1alpha1.CelldFleet, st *v1alpha1.CelldFleetStatus, obs *observed, set conditionSetter) {
	d := obs.declared
	switch {
	case !d.reached:
	case d.refused != nil:
		set(v1alpha1.ConditionNamespaceDeclared, metav1.ConditionFalse, v1alpha1.ReasonNamespaceLabelsRefused, fmt.Sprintf(
			"The API server refused the fleet's labels on namespace %s (%s): %v. They ask the mesh operator to enroll the namespace and, "+
				"under namespace isolation, to admit the operator's /state reads and the routing source; without them the namespace is not "+
				"enrolled for this fleet. The members run regardless, and the write is tried again at the fleet's poll, or at once when the namespace changes. Let the fleet operator's "+
				"identity write these labels (fix the policy that refused it), or set spec.mesh.mode: %s on a fleet that wants no mesh.",
			fleet.Namespace, labelList(d.labels), d.refused, v1alpha1.MeshDisabled))
	case len(d.labels) == 0:
		meta.RemoveStatusCondition(&st.Conditions, string(v1alpha1.ConditionNamespaceDeclared))
	case len(d.withheld) > 0:
		set(v1alpha1.ConditionNamespaceDeclared, metav1.ConditionTrue, v1alpha1.ReasonNamespaceLabelsDeclared, fmt.Sprintf(
			"Namespace %s carries the labels the fleet asks for (%s), except %s, which an admin set otherwise: the fleet does not replace them.",
			fleet.Namespace, labelList(d.labels), labelList(d.withheld)))
	default:
		set(v1alpha1.ConditionNamespaceDeclared, metav1.ConditionTrue, v1alpha1.ReasonNamespaceLabelsDeclared, fmt.Sprintf(
			"Namespace %s carries the labels the fleet asks for (%s).", fleet.Namespace, labelList(d.labels)))
	}
}

// labelList is "k=v, k=v" in key order.
func labelList(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ", ")
}

// setBlockedCondition sets InfrastructureBlocked and, while blocked, the
// Provisioning and Ready that point to it; it reports whether the fleet is
// blocked.
func setBlockedCondition(obs *observed, set conditionSetter) bool {
	if obs.blocked == nil {
		set(v1alpha1.ConditionInfrastructureBlocked, metav1.ConditionFalse, v1alpha1.ReasonNotBlocked, "Nothing outside the fleet blocks it.")
		return false
	}
	set(v1alpha1.ConditionInfrastructureBlocked, metav1.ConditionTrue, obs.blocked.reason, obs.blocked.message)
	set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, obs.blocked.reason, "Blocked: see the InfrastructureBlocked condition.")
	set(v1alpha1.ConditionReady, metav1.ConditionFalse, obs.blocked.reason, "Blocked: see the InfrastructureBlocked condition.")
	return true
}

// setDisksCondition: DisksResized, only for fleets with storage.
func setDisksCondition(fleet *v1alpha1.CelldFleet, obs *observed, set conditionSetter) {
	if fleet.Spec.Storage == nil {
		return
	}
	if obs.diskResize != "" {
		set(v1alpha1.ConditionDisksResized, metav1.ConditionFalse, v1alpha1.ReasonResizeRejected, obs.diskResize)
		return
	}
	set(v1alpha1.ConditionDisksResized, metav1.ConditionTrue, v1alpha1.ReasonSizeRequested, "Every member claim requests spec.storage.size.")
}

// setProvisioningCondition sets Provisioning and returns the phase it
// implies (st carries the member counts and revisions already).
func setProvisioningCondition(fleet *v1alpha1.CelldFleet, st *v1alpha1.CelldFleetStatus, obs *observed, set conditionSetter) string {
	want := derefReplicas(fleet)
	switch {
	case statefulSetRefused(obs) != "":
		// First: while the API server refuses the StatefulSet, nothing the
		// spec asks of the members happens, whatever else the members show.
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, v1alpha1.ReasonStatefulSetRefused, statefulSetRefusedMessage(fleet, st, obs))
		return PhaseProvisioning
	case len(obs.mesh.MissingProxy) > 0 && obs.heldMesh == "":
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, v1alpha1.ReasonProxyMissing, mesh.MissingProxyMessage(fleet, obs.mesh.MissingProxy))
		return PhaseProvisioning
	case obs.refusal != nil && obs.refusal.message != "":
		// Before the pause and the roll: a member the API server refuses
		// does not come back, whatever the roll or the pause waits for.
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, v1alpha1.ReasonMembersRefused, refusalMessage(st.Replicas, want, obs.refusal))
		return PhaseProvisioning
	case obs.pausedChanges:
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, v1alpha1.ReasonMaintenancePaused,
			"Maintenance is paused: changes to the members (template, image, replicas) are held until spec.maintenance.paused is false.")
		return PhasePaused
	case obs.decision.Rolling():
		msg := fmt.Sprintf("Rolling to revision %s: %d of %d member(s) updated.", st.TargetRevision, st.UpdatedReplicas, want)
		reason := v1alpha1.ReasonRolling
		if obs.decision.Waiting != "" {
			msg += " " + capitalize(obs.decision.Waiting) + "."
			if fleet.Spec.Maintenance.Paused {
				reason = v1alpha1.ReasonRollPaused
			}
		}
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, reason, msg)
		return PhaseRolling
	case obs.stsSettling:
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, v1alpha1.ReasonApplyingTemplate, "Waiting for the StatefulSet controller to observe the new member template.")
		return PhaseProvisioning
	case st.Replicas < want:
		msg := fmt.Sprintf("%d of %d member(s) exist.", st.Replicas, want)
		if obs.refusal != nil && obs.refusal.unknown != nil {
			msg += fmt.Sprintf(" Whether the API server refuses the others is unknown: the StatefulSet's events could not be read: %v.", obs.refusal.unknown)
		}
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, v1alpha1.ReasonCreatingMembers, msg)
		return PhaseProvisioning
	case !allAvailable(fleet, obs):
		set(v1alpha1.ConditionProvisioning, metav1.ConditionTrue, v1alpha1.ReasonWaitingForMembers, fmt.Sprintf("%d of %d member(s) are Ready and healthy on /state.", countAvailable(st.Members), want))
		if degraded(obs) {
			return PhaseDegraded
		}
		return PhaseProvisioning
	default:
		set(v1alpha1.ConditionProvisioning, metav1.ConditionFalse, v1alpha1.ReasonProvisioned, fmt.Sprintf("All %d member(s) run revision %s.", want, st.TargetRevision))
		return PhaseReady
	}
}

// setReadyCondition: every member present, Ready, healthy and current.
func setReadyCondition(fleet *v1alpha1.CelldFleet, st *v1alpha1.CelldFleetStatus, obs *observed, set conditionSetter) {
	want := derefReplicas(fleet)
	switch {
	case len(obs.mesh.MissingProxy) > 0 && obs.heldMesh == "":
		// A member without the proxy it must run is outside the mesh's
		// mTLS and authorization: not ready, however healthy it says it is.
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonProxyMissing, fmt.Sprintf("Member(s) %s have no %s: see the Provisioning condition.",
			strings.Join(obs.mesh.MissingProxy, ", "), mesh.ProxyContainer))
	case allAvailable(fleet, obs) && !obs.decision.Rolling() && !obs.stsSettling:
		set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonMembersReady, fmt.Sprintf("All %d member(s) are Ready and healthy on /state.", want))
	case statefulSetRefused(obs) != "":
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonStatefulSetRefused, fmt.Sprintf(
			"%d of %d member(s) are Ready and healthy on /state; the API server refuses the fleet's StatefulSet: see the Provisioning condition.", countAvailable(st.Members), want))
	default:
		set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonMembersNotReady, fmt.Sprintf("%d of %d member(s) are Ready and healthy on /state.", countAvailable(st.Members), want))
	}
}

// statefulSetRefused is the API server's answer when it refused the
// fleet's StatefulSet for what it is (admission, RBAC, the schema: see
// refused), "" otherwise. A transient failure (unavailable, timeout,
// conflict) is not a refusal: the step is retried and Reconciled says so.
func statefulSetRefused(obs *observed) string {
	if f := obs.failed; f != nil && f.step == stepStatefulSet && refused(f.err) {
		return statusMessage(f.err)
	}
	return ""
}

// statefulSetRefusedMessage is the Provisioning (and Stalled) message of a
// fleet whose StatefulSet the API server refuses.
func statefulSetRefusedMessage(fleet *v1alpha1.CelldFleet, st *v1alpha1.CelldFleetStatus, obs *observed) string {
	return fmt.Sprintf("The API server refuses StatefulSet %s/%s: %s. The members keep the last accepted template (%d of %d member(s) exist); "+
		"the spec's changes to them wait. Fix the admission policy, webhook or RBAC that refused it, or the spec; the operator tries again at each look.",
		fleet.Namespace, names.StatefulSet(fleet.Name), strings.TrimSuffix(statefulSetRefused(obs), "."), st.Replicas, derefReplicas(fleet))
}

// setKStatusConditions sets the kstatus pair from what the other
// conditions say, as the ServiceMesh does: Stalled=True while something
// outside the fleet blocks it or the API server refuses its members (a
// person must act), Reconciling=True while
// it converges or retries a failed step. A fleet whose changes are held by
// spec.maintenance.paused is neither: that is the user's choice, and it
// reports the pause as the reason.
func setKStatusConditions(st *v1alpha1.CelldFleetStatus, obs *observed, set conditionSetter) {
	reconciling := func(s metav1.ConditionStatus, reason v1alpha1.ConditionReason, msg string) {
		set(v1alpha1.ConditionReconciling, s, reason, msg)
	}
	stalled := func(s metav1.ConditionStatus, reason v1alpha1.ConditionReason, msg string) {
		set(v1alpha1.ConditionStalled, s, reason, msg)
	}
	if st.Phase == PhaseBlocked {
		if c := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionInfrastructureBlocked)); c != nil && c.Status == metav1.ConditionTrue {
			reconciling(metav1.ConditionFalse, v1alpha1.ReasonNotReconciling, "")
			stalled(metav1.ConditionTrue, v1alpha1.ConditionReason(c.Reason), c.Message)
			return
		}
	}
	prov := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionProvisioning))
	if prov != nil && prov.Reason == string(v1alpha1.ReasonStatefulSetRefused) {
		// Retrying the same StatefulSet cannot help: someone must change
		// the policy or the spec, as for refused members.
		reconciling(metav1.ConditionFalse, v1alpha1.ReasonNotReconciling, "")
		stalled(metav1.ConditionTrue, v1alpha1.ReasonStatefulSetRefused, prov.Message)
		return
	}
	if obs.failed == nil && prov != nil && prov.Status == metav1.ConditionTrue && prov.Reason == string(v1alpha1.ReasonMembersRefused) {
		// The StatefulSet controller keeps retrying, but only someone
		// changing the template, the namespace's policy or its quota lets
		// the members in: a GitOps health check should fail now, not at
		// its timeout.
		reconciling(metav1.ConditionFalse, v1alpha1.ReasonNotReconciling, "")
		stalled(metav1.ConditionTrue, v1alpha1.ReasonMembersRefused, prov.Message)
		return
	}
	stalled(metav1.ConditionFalse, v1alpha1.ReasonNotStalled, "")
	if obs.failed != nil {
		c := meta.FindStatusCondition(st.Conditions, string(v1alpha1.ConditionReconciled))
		reconciling(metav1.ConditionTrue, v1alpha1.ReasonStepFailed, c.Message)
		return
	}
	switch {
	case prov == nil || prov.Status != metav1.ConditionTrue:
		reconciling(metav1.ConditionFalse, v1alpha1.ReasonNotReconciling, "")
	case prov.Reason == string(v1alpha1.ReasonMaintenancePaused) || prov.Reason == string(v1alpha1.ReasonRollPaused):
		reconciling(metav1.ConditionFalse, v1alpha1.ConditionReason(prov.Reason), prov.Message)
	default:
		reconciling(metav1.ConditionTrue, v1alpha1.ConditionReason(prov.Reason), prov.Message)
	}
}

// degraded tells a fleet that lost members it had from one still coming up,
// from what the members show now: a celld container that has restarted, or
// a Ready member whose runtime reports itself unhealthy on /state, unless
// it reports that it is still starting (state.Report.Starting).
func degraded(obs *observed) bool {
	for i := range obs.pods {
		p := &obs.pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == members.ContainerName && c.RestartCount > 0 {
				return true
			}
		}
		if res, ok := obs.reports[p.Name]; ok && podReady(p) && res.Err == nil && res.Report != nil && !res.Report.Healthy && !res.Report.Starting() {
			return true
		}
	}
	return false
}

// setMeshCondition sets MeshReady where there is something to say, and
// reports whether it did.
func setMeshCondition(fleet *v1alpha1.CelldFleet, obs *observed, set conditionSetter) bool {
	st := obs.mesh
	enabled := fleet.Spec.Mesh != nil && fleet.Spec.Mesh.Mode == v1alpha1.MeshEnabled
	outside := !obs.namespace.state.Enrolled && !obs.intent.Sidecar && !obs.intent.Disabled
	if ns := obs.namespace.state; outside && st.Phase == mesh.NotMeshed && ns.OptedOut() {
		// An admin's opt-out (core.navique.com/mesh=disabled, or Istio's
		// own istio-injection=disabled / istio.io/dataplane-mode=none)
		// wins over the fleet's request (auto or enabled); the fleet says
		// so rather than looking merely unmeshed.
		label := labels.Mesh + "=" + labels.MeshDisabled
		if ns.Request != contract.RequestDisabled {
			label = ns.IstioOptOut
		}
		msg := fmt.Sprintf("Namespace %s is labelled %s by an admin: it is never enrolled, and neither the fleet nor the mesh operator replaces that label. "+
			"Members run outside the mesh.", fleet.Namespace, label)
		if enabled {
			msg = "spec.mesh.mode is enabled, but the fleet cannot join: " + msg + " Remove the namespace label to let it join, or set spec.mesh.mode: auto or disabled."
		}
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, v1alpha1.ReasonNamespaceOptedOut, msg)
		return true
	}
	if enabled && outside {
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, v1alpha1.ReasonAwaitingEnrollment, fmt.Sprintf(
			"spec.mesh.mode is enabled: namespace %s is labelled for enrollment and the fleet waits for a Ready mesh to enroll it "+
				"(a licensed ServiceMesh with its control plane Ready). Members keep running meanwhile.", fleet.Namespace))
		return true
	}
	if h := obs.mutualTLSHold; h != nil {
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, h.reason, h.message)
		return true
	}
	if obs.heldMesh != "" {
		// The members still run the template the pause holds: proxies are
		// missing (joining) or still there (leaving) because of the pause,
		// and a deleted member comes back unchanged.
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, v1alpha1.ReasonMaintenancePaused, fmt.Sprintf(
			"Maintenance is paused: the members keep the template they run, so the pending change, %s the mesh, waits. "+
				"They roll, one at a time, when spec.maintenance.paused is false; deleting a member Pod meanwhile brings it back unchanged.",
			obs.heldMesh))
		return true
	}
	switch {
	case st.Phase == mesh.NotMeshed && len(st.UnwantedProxy) > 0:
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, v1alpha1.ReasonInjectedWithoutOptIn, mesh.InjectedWithoutOptInMessage(fleet, st.UnwantedProxy))
		return true
	case st.Phase == mesh.Leaving && len(st.UnwantedProxy) > 0:
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, v1alpha1.ReasonProxyStillInjected, mesh.ProxyStillInjectedMessage(st.UnwantedProxy))
		return true
	}
	switch st.Phase {
	case mesh.Ambient:
		if shared := obs.sharedServiceAccount; len(shared) > 0 {
			if len(shared) > 3 {
				shared = append(shared[:3:3], fmt.Sprintf("and %d more", len(obs.sharedServiceAccount)-3))
			}
			set(v1alpha1.ConditionMeshReady, metav1.ConditionTrue, v1alpha1.ReasonAmbientSharedServiceAccount, fmt.Sprintf(
				"Namespace %s is enrolled in an ambient mesh, and Pod(s) %s, not members, run as the fleet's ServiceAccount %s. In ambient the "+
					"NetworkPolicy sees only HBONE, so AuthorizationPolicy %s keeps the fleet's identity off port 8080 itself: these Pods "+
					"are refused on 8080. Give them a ServiceAccount of their own, or give the fleet a dedicated one (leave "+
					"spec.serviceAccountName empty).", fleet.Namespace, strings.Join(shared, ", "), members.ServiceAccountName(fleet), mesh.PolicyName(fleet.Name)))
			break
		}
		set(v1alpha1.ConditionMeshReady, metav1.ConditionTrue, v1alpha1.ReasonAmbient, fmt.Sprintf(
			"Namespace %s is enrolled in an ambient mesh: ztunnel captures the members; the NetworkPolicy admits HBONE (15008) from the sources it admits, and AuthorizationPolicy %s restricts ports.",
			fleet.Namespace, mesh.PolicyName(fleet.Name)))
	case mesh.Meshed:
		set(v1alpha1.ConditionMeshReady, metav1.ConditionTrue, v1alpha1.ReasonMeshed, "Every member runs an istio-proxy; port 8081 admits only the fleet's and the operator's identities.")
	case mesh.Joining:
		reason := v1alpha1.ReasonJoiningMesh
		if len(st.MissingProxy) > 0 {
			reason = v1alpha1.ReasonProxyMissing
		}
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, reason, "Members are rolling into the mesh. Until every member runs a proxy, "+
			"PeerAuthentication "+mesh.PolicyName(fleet.Name)+" keeps port 8081 PERMISSIVE and the peer-port rule admits any source the NetworkPolicy admits.")
	case mesh.Leaving:
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, v1alpha1.ReasonLeavingMesh, "Members are rolling out of the mesh with injection disabled. Until no member runs a proxy, "+
			"port 8081 stays PERMISSIVE, the peer-port rule admits any source the NetworkPolicy admits, and istiod stays reachable.")
	case mesh.Left:
		msg := "The fleet left the mesh: its Istio policies are deleted, istiod egress is closed and its Pods opt out of injection."
		if st.Standby {
			// mesh.Decide keeps the ambient policy, relaxed, where the
			// namespace asks for a mesh: the message must not say deleted.
			msg = "The fleet left the mesh: istiod egress is closed and its Pods opt out of injection. A mesh enrollment is in effect in its namespace, so AuthorizationPolicy " +
				mesh.PolicyName(fleet.Name) + " and the PeerAuthentication holding port 8081 PERMISSIVE stand by, covering members ztunnel may capture."
		}
		set(v1alpha1.ConditionMeshReady, metav1.ConditionFalse, v1alpha1.ReasonLeftMesh, msg)
	}
	return st.Phase != mesh.NotMeshed
}

func memberStatus(fleet *v1alpha1.CelldFleet, p *corev1.Pod, obs *observed, prev v1alpha1.MemberStatus, now time.Time) v1alpha1.MemberStatus {
	ms := v1alpha1.MemberStatus{
		Name:        p.Name,
		Ready:       podReady(p) && p.DeletionTimestamp == nil,
		Revision:    p.Labels[revisionLabel],
		PeerAddress: names.PeerAddress(fleet.Name, fleet.Namespace, p.Name),
		Proxy:       podmesh.HasProxy(p),
	}
	if fleet.Spec.Storage != nil {
		ms.PersistentVolumeClaim = members.DataVolume + "-" + p.Name
	}
	res, read := obs.reports[p.Name]
	switch {
	case p.DeletionTimestamp != nil:
		ms.State = &v1alpha1.MemberState{Reachable: false, Error: "member is terminating"}
	case !read:
		ms.State = &v1alpha1.MemberState{Reachable: false, Error: fmt.Sprintf("not read: Pod is %s", p.Status.Phase)}
	default:
		ms.State = stateOf(res)
	}
	// Keep the time the current report was first seen.
	if prev.State != nil && sameState(prev.State, ms.State) {
		ms.State.Since = prev.State.Since
	} else {
		t := metav1.NewTime(now)
		ms.State.Since = &t
	}
	return ms
}

func stateOf(res state.Result) *v1alpha1.MemberState {
	if res.Err != nil || res.Report == nil {
		msg := "no report"
		if res.Err != nil {
			msg = res.Err.Error()
		}
		return &v1alpha1.MemberState{Reachable: false, Error: msg}
	}
	s := &v1alpha1.MemberState{
		Reachable: true,
		Healthy:   res.Report.Healthy,
		Phase:     res.Report.Phase,
		Version:   res.Report.Version,
	}
	if c := res.Report.Capacity; c != nil {
		s.CellsUsed, s.CellsTotal = &c.CellsUsed, &c.CellsTotal
	}
	return s
}

func sameState(a, b *v1alpha1.MemberState) bool {
	x, y := *a, *b
	x.Since, y.Since = nil, nil
	return equality.Semantic.DeepEqual(x, y)
}

// memberAvailable: the member's Pod is Ready and its /state reports it
// healthy.
func memberAvailable(m v1alpha1.MemberStatus) bool {
	return m.Ready && m.State != nil && m.State.Reachable && m.State.Healthy
}

func countAvailable(ms []v1alpha1.MemberStatus) int {
	n := 0
	for _, m := range ms {
		if memberAvailable(m) {
			n++
		}
	}
	return n
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// statusWriter is the fleet controller's one status writer.
var statusWriter = pacing.Status[v1alpha1.CelldFleetStatus]{Controller: controllerName}

// statusVerdict decides whether next is written over stored. What is
// significant (significantStatus) is written at once. The rest (the
// starting members' own entries, and what is counted from them: replicas,
// messages) is held while a member is starting (its Pod just turned
// Ready, /state does not report it healthy yet; see memberStarting): the
// fleet looks again startingPoll later, when it usually reports healthy,
// and that status is written; this one would have lived a quarter of a
// second. A member that became available beside them (progress, never a
// loss) waits with them. Once the member stops counting as starting
// (startingWindow) the status is written whatever it says. A blocked
// fleet is written at once. The pass that created the members'
// StatefulSet holds its whole status (membersAboutToAppear).
func (r *FleetReconciler) statusVerdict(stored, next v1alpha1.CelldFleetStatus, obs *observed) pacing.Verdict {
	starting := r.startingMembers(obs)
	quiet := maps.Clone(starting)
	for _, m := range next.Members {
		if memberAvailable(m) {
			if quiet == nil {
				quiet = map[string]bool{}
			}
			quiet[m.Name] = true
		}
	}
	settling := pacing.Settled
	switch {
	case membersAboutToAppear(obs):
		settling = pacing.Everything
	case obs.blocked == nil && len(starting) > 0:
		settling = pacing.Details
	}
	return statusWriter.Verdict(stored, next, func(s v1alpha1.CelldFleetStatus) any { return significantStatus(s, quiet) }, settling)
}

// membersAboutToAppear reports a pass that created the members'
// StatefulSet and met no error: its status (no members yet) is held
// (pacing.Everything), because the StatefulSet controller creates the
// members within moments, and their creation wakes the fleet to write the
// status that lists them. At 1,000 new fleets the status without members
// was a thousand writes that lived about a second. The fleet looks again
// after membersAppearWait in any case (the requeue table's row for the
// same fact), and that pass writes its status whatever it finds: a fleet
// whose members do not appear is reported within that wait. A failed
// step, a blockage or a route without its verdict is reported at once.
func membersAboutToAppear(obs *observed) bool {
	return obs.membersCreated && obs.blocked == nil && obs.failed == nil && obs.routing.ready()
}

// significant is the part of a fleet's status that is written at once:
// the observed generation, phase, revisions and mesh, each condition's
// status and reason, the member names, and every member that is neither
// starting nor available (quiet) in full.
type significant struct {
	ObservedGeneration     int64
	Phase, Current, Target string
	Mesh                   any
	Conditions             map[string][2]string
	Members                []any
}

func significantStatus(s v1alpha1.CelldFleetStatus, quiet map[string]bool) significant {
	out := significant{ObservedGeneration: s.ObservedGeneration, Phase: s.Phase, Current: s.CurrentRevision, Target: s.TargetRevision, Mesh: s.Mesh,
		Conditions: map[string][2]string{}}
	for _, c := range s.Conditions {
		out.Conditions[c.Type] = [2]string{string(c.Status), c.Reason}
	}
	for _, m := range s.Members {
		if quiet[m.Name] {
			out.Members = append(out.Members, m.Name)
		} else {
			out.Members = append(out.Members, m)
		}
	}
	return out
}
