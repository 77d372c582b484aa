package controller

import (
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
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionStrictIsolation},
		},
		{
			name:    "own Pods hold the cutover; the list is bounded",
			tally:   enrollmentTally{waiting: many, ownWaiting: true},
			want:    map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMTLSCutover: {F, v1alpha1.ReasonAwaitingCutover}},
			message: map[v1alpha1.ConditionType]string{v1alpha1.ConditionMTLSCutover: "ns0 (Pod p), ns1 (Pod p), ns2 (Pod p), ns3 (Pod p), ns4 (Pod p), and 2 more."},
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
			// Not Ready: nothing was looked at, so what describes the
			// namespaces is not rewritten.
			name:   "hold only",
			tally:  enrollmentTally{holdOnly: true, waiting: []string{"shop (Pod p)"}, ownWaiting: true},
			want:   map[v1alpha1.ConditionType]wantCond{v1alpha1.ConditionMaintenanceWindow: {F, v1alpha1.ReasonNoWindow}},
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionMTLSCutover, v1alpha1.ConditionDataPlaneMigration, v1alpha1.ConditionEnrollmentConflict},
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
