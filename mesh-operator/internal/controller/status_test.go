package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/detect"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
)

var statusNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func statusMesh(spec v1alpha1.ServiceMeshSpec) *v1alpha1.ServiceMesh {
	return &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SingletonName, Generation: 4}, Spec: spec}
}

type wantCond struct {
	status metav1.ConditionStatus
	reason v1alpha1.ConditionReason
}

func assertConditions(t *testing.T, st *status, want map[v1alpha1.ConditionType]wantCond) {
	t.Helper()
	for typ, w := range want {
		c := meta.FindStatusCondition(st.next.Conditions, string(typ))
		require.NotNil(t, c, "%s", typ)
		assert.Equal(t, w.status, c.Status, "%s: %s", typ, c.Message)
		assert.Equal(t, string(w.reason), c.Reason, "%s: %s", typ, c.Message)
		assert.Equal(t, int64(4), c.ObservedGeneration, "%s", typ)
	}
}

// TestSetControlPlaneConditions: the phase, conditions and Warning event
// for each plan and outcome of acting on it.
func TestSetControlPlaneConditions(t *testing.T) {
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	ready := readiness{ready: true, reason: v1alpha1.ReasonSailResourcesReady, msg: "Istio default is Ready."}
	coming := readiness{reason: v1alpha1.ReasonIstioNotReady, msg: "Istio default is not Ready."}
	tests := []struct {
		name   string
		plan   detect.Plan
		rd     readiness
		actErr error
		phase  string
		warn   string // the Warning event's reason ("" for none)
		want   map[v1alpha1.ConditionType]wantCond
	}{
		{
			name: "control plane ready", plan: detect.Plan{Action: detect.ActionApply}, rd: ready, phase: PhaseReady,
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:              {T, v1alpha1.ReasonControlPlaneReady},
				v1alpha1.ConditionControlPlaneReady:  {T, v1alpha1.ReasonSailResourcesReady},
				v1alpha1.ConditionPreconditionNotMet: {F, v1alpha1.ReasonPreconditionsMet},
				v1alpha1.ConditionReconciling:        {F, v1alpha1.ReasonNotReconciling},
				v1alpha1.ConditionStalled:            {F, v1alpha1.ReasonNotStalled},
			},
		},
		{
			name: "control plane coming up", plan: detect.Plan{Action: detect.ActionApply}, rd: coming, phase: PhaseProgressing,
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {F, v1alpha1.ReasonIstioNotReady},
				v1alpha1.ConditionControlPlaneReady: {F, v1alpha1.ReasonIstioNotReady},
				v1alpha1.ConditionReconciling:       {T, v1alpha1.ReasonIstioNotReady},
				v1alpha1.ConditionStalled:           {F, v1alpha1.ReasonNotStalled},
			},
		},
		{
			name:  "blocked by detection",
			plan:  detect.Plan{Action: detect.ActionHold, BlockedReason: v1alpha1.ReasonNoMeshFound, BlockedMessage: "no mesh"},
			rd:    readiness{reason: v1alpha1.ReasonNoMeshFound, msg: "no mesh"},
			phase: PhaseBlocked, warn: string(v1alpha1.ReasonNoMeshFound),
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:       {F, v1alpha1.ReasonNoMeshFound},
				v1alpha1.ConditionStalled:     {T, v1alpha1.ReasonNoMeshFound},
				v1alpha1.ConditionReconciling: {F, v1alpha1.ReasonNotReconciling},
			},
		},
		{
			name:  "blocked by what acting found",
			plan:  detect.Plan{Action: detect.ActionApply},
			rd:    readiness{reason: v1alpha1.ReasonForeignSailResource, blockedReason: v1alpha1.ReasonForeignSailResource, blockedMessage: "Istio default is someone else's"},
			phase: PhaseBlocked, warn: string(v1alpha1.ReasonForeignSailResource),
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {F, v1alpha1.ReasonForeignSailResource},
				v1alpha1.ConditionControlPlaneReady: {F, v1alpha1.ReasonForeignSailResource},
				v1alpha1.ConditionStalled:           {T, v1alpha1.ReasonForeignSailResource},
			},
		},
		{
			name:  "deferred to OpenShift Service Mesh 2",
			plan:  detect.Plan{Action: detect.ActionHold, Deferred: true, BlockedReason: v1alpha1.ReasonMaistraDetected, BlockedMessage: "maistra runs"},
			rd:    readiness{reason: v1alpha1.ReasonMaistraDetected},
			phase: PhaseDeferred, warn: "Deferred",
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:   {F, v1alpha1.ReasonMaistraDetected},
				v1alpha1.ConditionStalled: {T, v1alpha1.ReasonMaistraDetected},
			},
		},
		{
			name: "a step failed with a reason", plan: detect.Plan{Action: detect.ActionInstallSail},
			rd:     readiness{reason: v1alpha1.ReasonSailOperatorInstalling},
			actErr: withReason(v1alpha1.ReasonSailChartUnavailable, errors.New("repository unreachable")),
			phase:  PhaseError, warn: string(v1alpha1.ReasonSailChartUnavailable),
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {F, v1alpha1.ReasonSailChartUnavailable},
				v1alpha1.ConditionControlPlaneReady: {F, v1alpha1.ReasonSailOperatorInstalling},
				v1alpha1.ConditionStalled:           {T, v1alpha1.ReasonSailChartUnavailable},
			},
		},
		{
			// The Sail Operator still runs the old release: the control
			// plane stays reported Ready, the mesh is not.
			name: "the Sail release could not be upgraded under a ready control plane", plan: detect.Plan{Action: detect.ActionApply, MaintainSail: true}, rd: ready,
			actErr: withReason(v1alpha1.ReasonSailInstallFailed, errors.New("helm upgrade sail-operator/sail-operator: timed out")),
			phase:  PhaseError, warn: string(v1alpha1.ReasonSailInstallFailed),
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {F, v1alpha1.ReasonSailInstallFailed},
				v1alpha1.ConditionControlPlaneReady: {T, v1alpha1.ReasonSailResourcesReady},
				v1alpha1.ConditionStalled:           {T, v1alpha1.ReasonSailInstallFailed},
			},
		},
		{
			name: "a step failed without one", plan: detect.Plan{Action: detect.ActionApply}, rd: coming,
			actErr: errors.New("etcd is away"), phase: PhaseError, warn: string(v1alpha1.ReasonReconcileError),
			want: map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionReady: {F, v1alpha1.ReasonReconcileError}},
		},
		{
			name:  "a precondition holds the control plane back",
			plan:  detect.Plan{Action: detect.ActionHold, PreconditionReason: v1alpha1.ReasonCiliumAmbient, PreconditionMessage: "cilium"},
			rd:    readiness{reason: v1alpha1.ReasonPreconditionNotMet, msg: "held"},
			phase: PhaseBlocked, warn: string(v1alpha1.ReasonPreconditionNotMet),
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionPreconditionNotMet: {T, v1alpha1.ReasonCiliumAmbient},
				v1alpha1.ConditionReady:              {F, v1alpha1.ReasonPreconditionNotMet},
				v1alpha1.ConditionStalled:            {T, v1alpha1.ReasonPreconditionNotMet},
			},
		},
		{
			// A read failed before readiness was judged: ControlPlaneReady
			// is Unknown, with a reason (an empty one makes the API server
			// refuse the whole status write, leaving the last Ready standing).
			name: "a read failed before readiness was judged", plan: adoptedPlan, rd: readiness{},
			actErr: errors.New("reading DaemonSet istio-cni/istio-cni-node: etcdserver: request timed out"), phase: PhaseError, warn: string(v1alpha1.ReasonReconcileError),
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {F, v1alpha1.ReasonReconcileError},
				v1alpha1.ConditionControlPlaneReady: {metav1.ConditionUnknown, v1alpha1.ReasonReconcileError},
				v1alpha1.ConditionStalled:           {T, v1alpha1.ReasonReconcileError},
			},
		},
		{
			// Issue 40 (b): managed → adopt with only the operator's own
			// Istio: it is observed (no longer changed), not NoMeshFound.
			name: "mode adopt with only the operator's own Istio",
			plan: detect.Decide(v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderAuto, DataPlane: v1alpha1.DataPlaneSidecar},
				detect.Facts{Resources: map[string][]string{detect.GroupSail: {detect.ResourceIstios}},
					Istios: []detect.SailIstio{{Name: "default", Namespace: "istio-system", Ours: true, Revision: "default"}}}, detect.Options{}),
			rd:    readiness{ready: true, reason: v1alpha1.ReasonIstioReady, msg: "Istio default is Ready."},
			phase: PhaseReady,
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {T, v1alpha1.ReasonControlPlaneReady},
				v1alpha1.ConditionControlPlaneReady: {T, v1alpha1.ReasonIstioReady},
				v1alpha1.ConditionStalled:           {F, v1alpha1.ReasonNotStalled},
			},
		},
		{
			// Issue 40 (c): adopt + ambient with Istio and ZTunnel Ready but
			// no istio-cni: no Pod is captured, so it is not Ready.
			name: "adopted ambient mesh without istio-cni",
			plan: adoptedPlan,
			rd: judgedAdoptedSail(adoptedPlan, adoptedSail{istio: readySail(&sail.Istio{}), ambient: true, ztunnel: readySail(&sail.ZTunnel{}),
				cniLookedIn: []string{"istio-cni", "istio-system", "kube-system"}}),
			phase: PhaseProgressing,
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {F, v1alpha1.ReasonIstioCNIMissing},
				v1alpha1.ConditionControlPlaneReady: {F, v1alpha1.ReasonIstioCNIMissing},
				v1alpha1.ConditionReconciling:       {T, v1alpha1.ReasonIstioCNIMissing},
			},
		},
		{
			name: "adopted ambient mesh whose istio-cni DaemonSet is not ready",
			plan: adoptedPlan,
			rd: judgedAdoptedSail(adoptedPlan, adoptedSail{istio: readySail(&sail.Istio{}), ambient: true, ztunnel: readySail(&sail.ZTunnel{}),
				cniNodes: []cniNode{{namespace: "kube-system", name: "istio-cni-node", desired: 3, ready: 1, fresh: true}}, cniLookedIn: []string{"kube-system"}}),
			phase: PhaseProgressing,
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {F, v1alpha1.ReasonIstioCNINotReady},
				v1alpha1.ConditionControlPlaneReady: {F, v1alpha1.ReasonIstioCNINotReady},
			},
		},
		{
			name: "adopted ambient mesh with a ready istio-cni DaemonSet",
			plan: adoptedPlan,
			rd: judgedAdoptedSail(adoptedPlan, adoptedSail{istio: readySail(&sail.Istio{}), ambient: true, ztunnel: readySail(&sail.ZTunnel{}),
				cniNodes: []cniNode{{namespace: "kube-system", name: "istio-cni-node", desired: 3, ready: 3, fresh: true}}, cniLookedIn: []string{"kube-system"}}),
			phase: PhaseReady,
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {T, v1alpha1.ReasonControlPlaneReady},
				v1alpha1.ConditionControlPlaneReady: {T, v1alpha1.ReasonIstioCNIReady},
			},
		},
		{
			name: "adopted ambient mesh with a Ready Sail IstioCNI",
			plan: adoptedPlan,
			rd: judgedAdoptedSail(adoptedPlan, adoptedSail{istio: readySail(&sail.Istio{}), ambient: true, ztunnel: readySail(&sail.ZTunnel{}),
				cni: readySail(&sail.IstioCNI{})}),
			phase: PhaseReady,
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionReady:             {T, v1alpha1.ReasonControlPlaneReady},
				v1alpha1.ConditionControlPlaneReady: {T, v1alpha1.ReasonIstioCNIReady},
			},
		},
		{
			// A blocking reason wins over a failure: the user must act first.
			name:  "blocked and failed",
			plan:  detect.Plan{Action: detect.ActionHold, BlockedReason: v1alpha1.ReasonSailOperatorMissing, BlockedMessage: "install it"},
			rd:    readiness{reason: v1alpha1.ReasonSailOperatorMissing},
			phase: PhaseBlocked, actErr: errors.New("reading the holders record"), warn: string(v1alpha1.ReasonSailOperatorMissing),
			want: map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionReady: {F, v1alpha1.ReasonSailOperatorMissing}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newStatus(statusMesh(v1alpha1.ServiceMeshSpec{}), statusNow)
			setControlPlaneConditions(st, tc.plan, tc.rd, tc.actErr)
			assert.Equal(t, tc.phase, st.next.Phase)
			assert.Equal(t, tc.warn, st.warnReason)
			assertConditions(t, st, tc.want)
		})
	}
}

// adoptedPlan adopts a user's Sail Istio default in istio-user.
var adoptedPlan = detect.Plan{Action: detect.ActionObserve, Management: v1alpha1.ManagementAdopted, Provider: "sail",
	AdoptedIstio: &detect.SailIstio{Name: "default", Namespace: "istio-user", Revision: "default"}}

// judgedAdoptedSail is observeControlPlane's judgement of an adopted Sail mesh.
func judgedAdoptedSail(plan detect.Plan, seen adoptedSail) readiness {
	var rd readiness
	rd.ready, rd.reason, rd.msg, _ = adoptedSailReadiness(plan, seen)
	return rd
}

// readySail makes obj a Sail CR named default that reports Ready for its generation.
func readySail[T sail.Object](obj T) T {
	obj.SetName("default")
	obj.SetGeneration(2)
	st := sail.Status{ObservedGeneration: 2, Conditions: []sail.Condition{{Type: sail.ConditionReady, Status: metav1.ConditionTrue}}}
	switch o := any(obj).(type) {
	case *sail.Istio:
		o.Status = st
	case *sail.IstioCNI:
		o.Status = st
	case *sail.ZTunnel:
		o.Status = st
	}
	return obj
}

// TestSetEnrollmentConditions: the enrollment conditions for each tally.
func TestSetEnrollmentConditions(t *testing.T) {
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	until := metav1.NewTime(statusNow.Add(90 * time.Minute))
	past := metav1.NewTime(statusNow.Add(-time.Minute))
	var many []string
	for i := range 7 {
		many = append(many, fmt.Sprintf("ns%d (Pod p)", i))
	}
	tests := []struct {
		name         string
		spec         v1alpha1.ServiceMeshSpec
		tally        enrollmentTally
		oldDataPlane string
		wait         time.Duration
		want         map[v1alpha1.ConditionType]wantCond
		absent       []v1alpha1.ConditionType
		message      map[v1alpha1.ConditionType]string // a substring the message has
	}{
		{
			name: "everything settled",
			want: map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionMTLSCutover:        {T, v1alpha1.ReasonCutOver},
				v1alpha1.ConditionDataPlaneMigration: {F, v1alpha1.ReasonSettled},
				v1alpha1.ConditionEnrollmentConflict: {F, v1alpha1.ReasonNoConflict},
				v1alpha1.ConditionMaintenanceWindow:  {F, v1alpha1.ReasonNoWindow},
			},
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionStrictIsolation, v1alpha1.ConditionAmbientNetworkPolicy},
		},
		{
			name: "ambient: NetworkPolicies admit what capture needs",
			spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneAmbient},
			want: map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionAmbientNetworkPolicy: {F, v1alpha1.ReasonNetworkPoliciesAdmitAmbient}},
		},
		{
			// The policies are named, and what to add; an unreadable
			// namespace is still said.
			name: "ambient: a NetworkPolicy blocks a namespace",
			spec: v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneAmbient},
			tally: enrollmentTally{ambientBlocked: []string{"shop: NetworkPolicy shop/web-only refuses TCP 15008"},
				ambientUnreadable: []string{"cart (forbidden)"}},
			want: map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionAmbientNetworkPolicy: {T, v1alpha1.ReasonNetworkPolicyBlocksAmbient}},
			message: map[v1alpha1.ConditionType]string{v1alpha1.ConditionAmbientNetworkPolicy: "an enrolled one stays enrolled: shop: NetworkPolicy shop/web-only refuses TCP 15008. " +
				"Add ingress rules admitting TCP 15008 (HBONE)"},
		},
		{
			name:    "ambient: unreadable NetworkPolicies",
			spec:    v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneAmbient},
			tally:   enrollmentTally{ambientUnreadable: []string{"cart (forbidden)"}},
			want:    map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionAmbientNetworkPolicy: {metav1.ConditionUnknown, v1alpha1.ReasonNetworkPolicyUnreadable}},
			message: map[v1alpha1.ConditionType]string{v1alpha1.ConditionAmbientNetworkPolicy: "cart (forbidden)"},
		},
		{
			name:   "ambient, not Ready: the last verdict stands",
			spec:   v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneAmbient},
			tally:  enrollmentTally{holdOnly: true},
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionAmbientNetworkPolicy},
		},
		{
			name:    "own Pods hold the cutover; the list is bounded",
			tally:   enrollmentTally{waiting: many, ownWaiting: true},
			want:    map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMTLSCutover: {F, v1alpha1.ReasonAwaitingCutover}},
			message: map[v1alpha1.ConditionType]string{v1alpha1.ConditionMTLSCutover: "ns0 (Pod p), ns1 (Pod p), ns2 (Pod p), ns3 (Pod p), ns4 (Pod p), and 2 more."},
		},
		{
			// Never CutOver where another policy sets the mode, and what
			// else holds is still said.
			name:  "a user's namespace-wide PeerAuthentication is in force",
			tally: enrollmentTally{foreign: []string{"PeerAuthentication shop/default (PERMISSIVE)"}, waiting: []string{"cart (Pod p)"}, ownWaiting: true},
			want:  map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMTLSCutover: {F, v1alpha1.ReasonForeignPeerAuthentication}},
			message: map[v1alpha1.ConditionType]string{v1alpha1.ConditionMTLSCutover: "PeerAuthentication shop/default (PERMISSIVE). The operator never edits or deletes it; " +
				"delete it or give it a selector for the operator's mTLS (and its cutover) to apply. Also held at PERMISSIVE: cart (Pod p)."},
		},
		{
			name:  "only an edge holds the cutover",
			tally: enrollmentTally{waiting: []string{"shop (edge clients: Pod c)"}},
			want:  map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMTLSCutover: {F, v1alpha1.ReasonAwaitingEdge}},
		},
		{
			name:         "a migration in progress names the old data plane's holder",
			tally:        enrollmentTally{migrating: []string{"b: relabelled next", "a: waiting for Pod x"}},
			oldDataPlane: "ZTunnel is kept.",
			want:         map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionDataPlaneMigration: {T, v1alpha1.ReasonMigrating}},
			message:      map[v1alpha1.ConditionType]string{v1alpha1.ConditionDataPlaneMigration: "a: waiting for Pod x; b: relabelled next. ZTunnel is kept."},
		},
		{
			name:         "the old data plane is still in use",
			oldDataPlane: "ZTunnel is kept.",
			want:         map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionDataPlaneMigration: {T, v1alpha1.ReasonReleasingOldDataPlane}},
		},
		{
			name:  "a policy name taken",
			tally: enrollmentTally{conflicts: []string{"PeerAuthentication shop/mesh-mtls"}},
			want:  map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionEnrollmentConflict: {T, v1alpha1.ReasonPolicyConflict}},
		},
		{
			name:  "strict isolation withheld",
			spec:  v1alpha1.ServiceMeshSpec{Isolation: v1alpha1.IsolationStrict},
			tally: enrollmentTally{withheld: []string{"shop (AwaitingCutover)"}},
			want:  map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionStrictIsolation: {F, v1alpha1.ReasonBaselineWithheld}},
		},
		{
			name: "strict isolation in force",
			spec: v1alpha1.ServiceMeshSpec{Isolation: v1alpha1.IsolationStrict},
			want: map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionStrictIsolation: {T, v1alpha1.ReasonBaselineInForce}},
		},
		{
			name: "a maintenance window open",
			spec: v1alpha1.ServiceMeshSpec{MTLS: v1alpha1.MTLS{MaintenanceUntil: &until}},
			wait: 90 * time.Minute,
			want: map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMaintenanceWindow: {T, v1alpha1.ReasonWindowOpen}},
		},
		{
			name: "a maintenance window ended",
			spec: v1alpha1.ServiceMeshSpec{MTLS: v1alpha1.MTLS{MaintenanceUntil: &past}},
			want: map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMaintenanceWindow: {F, v1alpha1.ReasonWindowEnded}},
		},
		{
			// Issue 40 (a): Ready, but a maintenance window holds the
			// namespaces at PERMISSIVE: they are not cut over now.
			name:    "a maintenance window holds namespaces at PERMISSIVE",
			spec:    v1alpha1.ServiceMeshSpec{MTLS: v1alpha1.MTLS{MaintenanceUntil: &until}},
			tally:   enrollmentTally{heldPermissive: []string{"shop (Maintenance)", "pay (Maintenance)"}},
			wait:    90 * time.Minute,
			want:    map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMTLSCutover: {F, v1alpha1.ReasonHeldPermissive}},
			message: map[v1alpha1.ConditionType]string{v1alpha1.ConditionMTLSCutover: "pay (Maintenance), shop (Maintenance)"},
		},
		{
			// Issue 40 (a): not Ready, and the break-glass or a migration
			// relaxed namespaces in the hold-only pass: the cutover
			// condition says so. What the pass did not look at (conflicts:
			// only enrolling finds them; the migration's Settled) is not
			// rewritten.
			name:    "hold only: namespaces relaxed to PERMISSIVE",
			tally:   enrollmentTally{holdOnly: true, heldPermissive: []string{"shop (Migrating)", "pay (Maintenance)"}},
			want:    map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMTLSCutover: {F, v1alpha1.ReasonHeldPermissive}},
			message: map[v1alpha1.ConditionType]string{v1alpha1.ConditionMTLSCutover: "pay (Maintenance), shop (Migrating)"},
			absent:  []v1alpha1.ConditionType{v1alpha1.ConditionDataPlaneMigration, v1alpha1.ConditionEnrollmentConflict},
		},
		{
			// Not Ready and nothing relaxed: every enrolled namespace was
			// read at STRICT.
			name:   "hold only: every namespace still STRICT",
			tally:  enrollmentTally{holdOnly: true},
			want:   map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMTLSCutover: {T, v1alpha1.ReasonCutOver}, v1alpha1.ConditionMaintenanceWindow: {F, v1alpha1.ReasonNoWindow}},
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionDataPlaneMigration, v1alpha1.ConditionEnrollmentConflict},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newStatus(statusMesh(tc.spec), statusNow)
			st.oldDataPlane = tc.oldDataPlane
			wait := setEnrollmentConditions(st, tc.spec, tc.tally)
			assert.Equal(t, tc.wait, wait)
			assertConditions(t, st, tc.want)
			for _, typ := range tc.absent {
				assert.Nil(t, meta.FindStatusCondition(st.next.Conditions, string(typ)), "%s", typ)
			}
			for typ, sub := range tc.message {
				c := meta.FindStatusCondition(st.next.Conditions, string(typ))
				require.NotNil(t, c)
				assert.True(t, strings.Contains(c.Message, sub), "%s message %q lacks %q", typ, c.Message, sub)
			}
			if tc.spec.MTLS.MaintenanceUntil != nil && tc.wait > 0 {
				assert.Equal(t, tc.spec.MTLS.MaintenanceUntil, st.next.MaintenanceUntil)
			} else {
				assert.Nil(t, st.next.MaintenanceUntil)
			}
		})
	}
}

// TestSetLicenseConditions: what status says for each outcome of reading
// the license, and that only a read refusal says PreviewLocked=True.
func TestSetLicenseConditions(t *testing.T) {
	T, F, U := metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	t.Run("unreadable", func(t *testing.T) {
		st := newStatus(statusMesh(v1alpha1.ServiceMeshSpec{}), statusNow)
		st.next.EnrolledNamespaces = []string{"pay"}
		setLicenseUnreadableConditions(st, "cannot read license Secret mesh-system/license: forbidden")
		assert.Equal(t, PhaseError, st.next.Phase)
		assertConditions(t, st, map[v1alpha1.ConditionType]wantCond{
			v1alpha1.ConditionPreviewLocked: {U, v1alpha1.ReasonLicenseUnreadable},
			v1alpha1.ConditionReady:         {U, v1alpha1.ReasonLicenseUnreadable},
			v1alpha1.ConditionStalled:       {T, v1alpha1.ReasonLicenseUnreadable},
		})
		assert.Equal(t, []string{"pay"}, st.next.EnrolledNamespaces, "what is held is still reported")
	})
	missing := &license.Error{Reason: license.ReasonMissing, Message: "no license: Secret mesh-system/license does not exist"}
	for _, tc := range []struct {
		name    string
		chk     licenseCheck
		keep    bool
		message string
	}{
		{name: "missing, within its grace", chk: licenseCheck{refusal: missing, missingUntil: statusNow.Add(time.Minute)}, keep: true, message: "kept as they are until 2026-01-02T03:05:05Z"},
		{name: "missing past its grace", chk: licenseCheck{refusal: missing, missingUntil: statusNow.Add(-time.Minute)}},
		{name: "expired", chk: licenseCheck{refusal: &license.Error{Reason: license.ReasonExpired, Message: "expired"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStatus(statusMesh(v1alpha1.ServiceMeshSpec{}), statusNow)
			setLicenseRefusedConditions(st, tc.chk, tc.keep)
			assert.Equal(t, PhasePreviewLocked, st.next.Phase)
			assertConditions(t, st, map[v1alpha1.ConditionType]wantCond{
				v1alpha1.ConditionPreviewLocked: {T, license.ReasonOf(tc.chk.refusal)},
				v1alpha1.ConditionReady:         {F, v1alpha1.ReasonPreviewLocked},
			})
			msg := meta.FindStatusCondition(st.next.Conditions, string(v1alpha1.ConditionPreviewLocked)).Message
			if tc.message != "" {
				assert.Contains(t, msg, tc.message)
			} else {
				assert.NotContains(t, msg, "kept as they are")
			}
		})
	}
}

// TestSetEnrollmentFailedCondition: a failed enrollment step is in status
// with the API server's words, and a clean pass clears it.
func TestSetEnrollmentFailedCondition(t *testing.T) {
	st := newStatus(statusMesh(v1alpha1.ServiceMeshSpec{}), statusNow)
	setEnrollmentFailedCondition(st, errors.New(`namespaces "pay" is forbidden`))
	assertConditions(t, st, map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionEnrollmentFailed: {metav1.ConditionTrue, v1alpha1.ReasonEnrollmentStepFailed}})
	assert.Contains(t, meta.FindStatusCondition(st.next.Conditions, string(v1alpha1.ConditionEnrollmentFailed)).Message, `namespaces "pay" is forbidden`)
	setEnrollmentFailedCondition(st, errors.New(strings.Repeat("x", 5000)))
	assert.Less(t, len(meta.FindStatusCondition(st.next.Conditions, string(v1alpha1.ConditionEnrollmentFailed)).Message), 1400, "bounded")
	setEnrollmentFailedCondition(st, nil)
	assertConditions(t, st, map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionEnrollmentFailed: {metav1.ConditionFalse, v1alpha1.ReasonEnrollmentStepsSucceeded}})
}

// TestOutcomeKeepsOwedTimers: a failed pass is retried after a backoff
// that grows to maxFailureBackoff, but never later than what it owes; a
// pass that succeeds resets the backoff.
func TestOutcomeKeepsOwedTimers(t *testing.T) {
	r := &ServiceMeshReconciler{}
	ctx := context.Background()
	fail := errors.New("refused")
	var got []time.Duration
	for i := 0; i < 8; i++ {
		res, err := r.outcome(ctx, 0, fail)
		require.NoError(t, err, "an error is reported in status, not handed to controller-runtime's backoff")
		got = append(got, res.RequeueAfter)
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}, got)
	res, _ := r.outcome(ctx, 3*time.Second, fail)
	assert.Equal(t, 3*time.Second, res.RequeueAfter, "a maintenance window's end 3 s away is kept")
	res, _ = r.outcome(ctx, 2*time.Minute, nil)
	assert.Equal(t, 2*time.Minute, res.RequeueAfter)
	res, _ = r.outcome(ctx, time.Minute, fail)
	assert.Equal(t, time.Second, res.RequeueAfter, "a success reset the backoff")
	assert.Equal(t, time.Duration(0), earliest(0, 0))
	assert.Equal(t, 2*time.Second, earliest(0, 5*time.Second, 2*time.Second))
}
