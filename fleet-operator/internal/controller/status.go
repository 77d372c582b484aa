package controller

import (
	"fmt"
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
)

// Condition types of a CelldFleet.
const (
	ConditionReady                 = "Ready"
	ConditionProvisioning          = "Provisioning"
	ConditionInfrastructureBlocked = "InfrastructureBlocked"
	// ConditionDisksResized is False when member claims could not be grown
	// to spec.storage.size (typically a storage class without expansion).
	ConditionDisksResized = "DisksResized"
	// ConditionMeshReady tells where a fleet that uses (or used) the Istio
	// mesh stands; absent for fleets that never opted in.
	ConditionMeshReady = "MeshReady"
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

// computeStatus is a pure function of the fleet and what the reconcile
// observed. Timestamps only move when something changed, so an unchanged
// fleet produces an identical status and no write.
func computeStatus(fleet *v1alpha1.CelldFleet, obs *observed, now time.Time) v1alpha1.CelldFleetStatus {
	prev := fleet.Status
	st := v1alpha1.CelldFleetStatus{
		ObservedGeneration: fleet.Generation,
		Conditions:         append([]metav1.Condition(nil), prev.Conditions...),
	}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: fleet.Generation,
			LastTransitionTime: metav1.NewTime(now),
		})
	}
	if f := obs.failed; f != nil {
		// Some objects may not have been built from this spec: status does
		// not claim it was observed.
		st.ObservedGeneration = prev.ObservedGeneration
		set(ConditionReconciled, metav1.ConditionFalse, ReasonStepFailed, fmt.Sprintf(
			"Step %q failed: %v. Conditions and members not reached by this reconcile show the last known state; the operator retries.", f.step, f.err))
	} else {
		set(ConditionReconciled, metav1.ConditionTrue, ReasonAllStepsRan, "The last reconcile ran every step.")
	}
	switch rr := obs.routing; {
	case rr.keep:
	case rr.readiness != nil:
		set(ConditionRoutingReady, rr.readiness.Status, rr.readiness.Reason, rr.readiness.Message)
	default:
		meta.RemoveStatusCondition(&st.Conditions, ConditionRoutingReady)
	}
	if obs.failed != nil && obs.reports == nil && obs.blocked == nil {
		// The members were not looked at (or not read): what status said
		// of them is still the best knowledge, not "not read" or Degraded.
		st.Members, st.Replicas, st.ReadyReplicas, st.UpdatedReplicas = prev.Members, prev.Replicas, prev.ReadyReplicas, prev.UpdatedReplicas
		st.CurrentRevision, st.TargetRevision, st.Phase, st.Mesh = prev.CurrentRevision, prev.TargetRevision, prev.Phase, prev.Mesh
		return st
	}

	want := derefReplicas(fleet)
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

	st.Mesh = string(obs.mesh.Phase)
	if !setMeshCondition(fleet, obs, set) {
		// Outside the mesh with nothing to explain (never opted in, or the
		// namespace left the mesh): no MeshReady, as for any plain fleet.
		meta.RemoveStatusCondition(&st.Conditions, ConditionMeshReady)
	}

	switch {
	case obs.blocked != nil:
		set(ConditionInfrastructureBlocked, metav1.ConditionTrue, obs.blocked.reason, obs.blocked.message)
		set(ConditionProvisioning, metav1.ConditionTrue, obs.blocked.reason, "Blocked: see the InfrastructureBlocked condition.")
		set(ConditionReady, metav1.ConditionFalse, obs.blocked.reason, "Blocked: see the InfrastructureBlocked condition.")
		st.Phase = PhaseBlocked
		return st
	default:
		set(ConditionInfrastructureBlocked, metav1.ConditionFalse, "NotBlocked", "Nothing outside the fleet blocks it.")
	}

	if fleet.Spec.Storage != nil {
		if obs.diskResize != "" {
			set(ConditionDisksResized, metav1.ConditionFalse, "ResizeRejected", obs.diskResize)
		} else {
			set(ConditionDisksResized, metav1.ConditionTrue, "SizeRequested", "Every member claim requests spec.storage.size.")
		}
	}

	available := allAvailable(fleet, obs)
	switch {
	case len(obs.mesh.MissingProxy) > 0:
		set(ConditionProvisioning, metav1.ConditionTrue, "ProxyMissing", mesh.MissingProxyMessage(fleet, obs.mesh.MissingProxy))
		st.Phase = PhaseProvisioning
	case obs.pausedChanges:
		set(ConditionProvisioning, metav1.ConditionTrue, "MaintenancePaused",
			"Maintenance is paused: changes to the members (template, image, replicas) are held until spec.maintenance.paused is false.")
		st.Phase = PhasePaused
	case obs.decision.Rolling():
		msg := fmt.Sprintf("Rolling to revision %s: %d of %d member(s) updated.", st.TargetRevision, st.UpdatedReplicas, want)
		reason := "Rolling"
		if obs.decision.Waiting != "" {
			msg += " " + capitalize(obs.decision.Waiting) + "."
			if fleet.Spec.Maintenance.Paused {
				reason = "RollPaused"
			}
		}
		set(ConditionProvisioning, metav1.ConditionTrue, reason, msg)
		st.Phase = PhaseRolling
	case obs.stsSettling:
		set(ConditionProvisioning, metav1.ConditionTrue, "ApplyingTemplate", "Waiting for the StatefulSet controller to observe the new member template.")
		st.Phase = PhaseProvisioning
	case st.Replicas < want:
		set(ConditionProvisioning, metav1.ConditionTrue, "CreatingMembers", fmt.Sprintf("%d of %d member(s) exist.", st.Replicas, want))
		st.Phase = PhaseProvisioning
	case !available:
		set(ConditionProvisioning, metav1.ConditionTrue, "WaitingForMembers", fmt.Sprintf("%d of %d member(s) are Ready and healthy on /state.", countAvailable(st.Members), want))
		st.Phase = PhaseProvisioning
		if degraded(obs) {
			st.Phase = PhaseDegraded
		}
	default:
		set(ConditionProvisioning, metav1.ConditionFalse, "Provisioned", fmt.Sprintf("All %d member(s) run revision %s.", want, st.TargetRevision))
		st.Phase = PhaseReady
	}
	switch {
	case len(obs.mesh.MissingProxy) > 0:
		// A member without the proxy it must run is outside the mesh's
		// mTLS and authorization: not ready, however healthy it says it is.
		set(ConditionReady, metav1.ConditionFalse, "ProxyMissing", fmt.Sprintf("Member(s) %s have no %s: see the Provisioning condition.",
			strings.Join(obs.mesh.MissingProxy, ", "), mesh.ProxyContainer))
	case available && !obs.decision.Rolling() && !obs.stsSettling:
		set(ConditionReady, metav1.ConditionTrue, "MembersReady", fmt.Sprintf("All %d member(s) are Ready and healthy on /state.", want))
	default:
		set(ConditionReady, metav1.ConditionFalse, "MembersNotReady", fmt.Sprintf("%d of %d member(s) are Ready and healthy on /state.", countAvailable(st.Members), want))
	}
	return st
}

// degraded tells a fleet that lost members it had from one still coming up,
// from what the members show now: a celld container that has restarted, or
// a Ready member whose runtime reports itself unhealthy on /state.
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
		if res, ok := obs.reports[p.Name]; ok && podReady(p) && res.Err == nil && res.Report != nil && !res.Report.Healthy {
			return true
		}
	}
	return false
}

// setMeshCondition sets MeshReady where there is something to say, and
// reports whether it did.
func setMeshCondition(fleet *v1alpha1.CelldFleet, obs *observed, set func(t string, s metav1.ConditionStatus, reason, msg string)) bool {
	st := obs.mesh
	enabled := fleet.Spec.Mesh != nil && fleet.Spec.Mesh.Mode == v1alpha1.MeshEnabled
	outside := !obs.namespace.state.Enrolled && !obs.intent.Sidecar && !obs.intent.Disabled
	if outside && st.Phase == mesh.NotMeshed && obs.namespace.state.Request == contract.RequestDisabled {
		// An admin's opt-out wins over the fleet's request (auto or
		// enabled); the fleet says so rather than looking merely unmeshed.
		msg := fmt.Sprintf("Namespace %s is labelled %s=%s by an admin: it is never enrolled, and the fleet does not replace that label. "+
			"Members run outside the mesh.", fleet.Namespace, labels.Mesh, labels.MeshDisabled)
		if enabled {
			msg = "spec.mesh.mode is enabled, but the fleet cannot join: " + msg + " Remove the namespace label to let it join, or set spec.mesh.mode: auto or disabled."
		}
		set(ConditionMeshReady, metav1.ConditionFalse, ReasonNamespaceOptedOut, msg)
		return true
	}
	if enabled && outside {
		set(ConditionMeshReady, metav1.ConditionFalse, "AwaitingEnrollment", fmt.Sprintf(
			"spec.mesh.mode is enabled: namespace %s is labelled for enrollment and the fleet waits for a Ready mesh to enroll it "+
				"(a licensed ServiceMesh with its control plane Ready). Members keep running meanwhile.", fleet.Namespace))
		return true
	}
	switch {
	case st.Phase == mesh.NotMeshed && len(st.UnwantedProxy) > 0:
		set(ConditionMeshReady, metav1.ConditionFalse, ReasonInjectedWithoutOptIn, mesh.InjectedWithoutOptInMessage(fleet, st.UnwantedProxy))
		return true
	case st.Phase == mesh.Leaving && len(st.UnwantedProxy) > 0:
		set(ConditionMeshReady, metav1.ConditionFalse, ReasonProxyStillInjected, mesh.ProxyStillInjectedMessage(st.UnwantedProxy))
		return true
	}
	switch st.Phase {
	case mesh.Ambient:
		if shared := obs.sharedServiceAccount; len(shared) > 0 {
			if len(shared) > 3 {
				shared = append(shared[:3:3], fmt.Sprintf("and %d more", len(obs.sharedServiceAccount)-3))
			}
			set(ConditionMeshReady, metav1.ConditionTrue, ReasonAmbientSharedServiceAccount, fmt.Sprintf(
				"Namespace %s is enrolled in an ambient mesh, and Pod(s) %s, not members, run as the fleet's ServiceAccount %s. In ambient the "+
					"NetworkPolicy sees only HBONE, so AuthorizationPolicy %s keeps the fleet's identity off port 8080 itself: these Pods "+
					"are refused on 8080. Give them a ServiceAccount of their own, or give the fleet a dedicated one (leave "+
					"spec.serviceAccountName empty).", fleet.Namespace, strings.Join(shared, ", "), members.ServiceAccountName(fleet), mesh.PolicyName(fleet.Name)))
			break
		}
		set(ConditionMeshReady, metav1.ConditionTrue, "Ambient", fmt.Sprintf(
			"Namespace %s is enrolled in an ambient mesh: ztunnel captures the members; the NetworkPolicy admits HBONE (15008) from the sources it admits, and AuthorizationPolicy %s restricts ports.",
			fleet.Namespace, mesh.PolicyName(fleet.Name)))
	case mesh.Meshed:
		set(ConditionMeshReady, metav1.ConditionTrue, "Meshed", "Every member runs an istio-proxy; port 8081 admits only the fleet's and the operator's identities.")
	case mesh.Joining:
		reason := "JoiningMesh"
		if len(st.MissingProxy) > 0 {
			reason = "ProxyMissing"
		}
		set(ConditionMeshReady, metav1.ConditionFalse, reason, "Members are rolling into the mesh. Until every member runs a proxy, "+
			"PeerAuthentication "+mesh.PolicyName(fleet.Name)+" keeps port 8081 PERMISSIVE and the peer-port rule admits any source the NetworkPolicy admits.")
	case mesh.Leaving:
		set(ConditionMeshReady, metav1.ConditionFalse, "LeavingMesh", "Members are rolling out of the mesh with injection disabled. Until no member runs a proxy, "+
			"port 8081 stays PERMISSIVE, the peer-port rule admits any source the NetworkPolicy admits, and istiod stays reachable.")
	case mesh.Left:
		set(ConditionMeshReady, metav1.ConditionFalse, "LeftMesh", "The fleet left the mesh: its Istio policies are deleted, istiod egress is closed and its Pods opt out of injection.")
	}
	return st.Phase != mesh.NotMeshed
}

func memberStatus(fleet *v1alpha1.CelldFleet, p *corev1.Pod, obs *observed, prev v1alpha1.MemberStatus, now time.Time) v1alpha1.MemberStatus {
	ms := v1alpha1.MemberStatus{
		Name:        p.Name,
		Ready:       podReady(p) && p.DeletionTimestamp == nil,
		Revision:    p.Labels[revisionLabel],
		PeerAddress: names.PeerAddress(fleet.Name, fleet.Namespace, p.Name),
		Proxy:       mesh.HasProxy(p),
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

func countAvailable(ms []v1alpha1.MemberStatus) int {
	n := 0
	for _, m := range ms {
		if m.Ready && m.State != nil && m.State.Reachable && m.State.Healthy {
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
