package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/roll"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/pacing"
)

// statusFleet is a three-member fleet at generation 2.
func statusFleet() *v1alpha1.CelldFleet {
	return &v1alpha1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "apps", Generation: 2},
		Spec:       v1alpha1.CelldFleetSpec{Replicas: ptr.To[int32](3)},
	}
}

// member is a member Pod on revision rev, Ready or not.
func member(i int, rev string, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("shop-%d", i), Namespace: "apps", Labels: map[string]string{revisionLabel: rev}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// healthyFleet observes three Ready, healthy members on revision r2.
func healthyFleet() *observed {
	obs := &observed{
		sts:     &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{CurrentRevision: "r2", UpdateRevision: "r2"}},
		reports: map[string]state.Result{},
	}
	for i := range 3 {
		obs.pods = append(obs.pods, member(i, "r2", true))
		obs.reports[fmt.Sprintf("shop-%d", i)] = state.Result{Report: &state.Report{Healthy: true, Phase: "serving"}}
	}
	return obs
}

type wantCondition struct {
	status metav1.ConditionStatus
	reason v1alpha1.ConditionReason
}

// TestComputeStatus: each observation gives the phase and the conditions a
// user (and a kstatus health check) reads; those not named are not checked.
func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	tests := []struct {
		name  string
		fleet func(*v1alpha1.CelldFleet)
		obs   func(*observed)
		phase string
		want  map[v1alpha1.ConditionType]wantCondition
		// absent conditions must not be in status.
		absent []v1alpha1.ConditionType
		// message: what a condition's message must say.
		message map[v1alpha1.ConditionType][]string
	}{
		{
			name: "every member ready", phase: PhaseReady,
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionReady:                 {T, v1alpha1.ReasonMembersReady},
				v1alpha1.ConditionProvisioning:          {F, v1alpha1.ReasonProvisioned},
				v1alpha1.ConditionInfrastructureBlocked: {F, v1alpha1.ReasonNotBlocked},
				v1alpha1.ConditionReconciled:            {T, v1alpha1.ReasonAllStepsRan},
				v1alpha1.ConditionReconciling:           {F, v1alpha1.ReasonNotReconciling},
				v1alpha1.ConditionStalled:               {F, v1alpha1.ReasonNotStalled},
			},
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionMeshReady, v1alpha1.ConditionDisksResized, v1alpha1.ConditionRoutingReady},
		},
		{
			name: "blocked by an unconfirmed NetworkPolicy", phase: PhaseBlocked,
			obs: func(o *observed) {
				*o = observed{blocked: &blockage{reason: v1alpha1.ReasonNetworkPolicyNotConfirmed, message: "confirm it"}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionInfrastructureBlocked: {T, v1alpha1.ReasonNetworkPolicyNotConfirmed},
				v1alpha1.ConditionProvisioning:          {T, v1alpha1.ReasonNetworkPolicyNotConfirmed},
				v1alpha1.ConditionReady:                 {F, v1alpha1.ReasonNetworkPolicyNotConfirmed},
				v1alpha1.ConditionStalled:               {T, v1alpha1.ReasonNetworkPolicyNotConfirmed},
				v1alpha1.ConditionReconciling:           {F, v1alpha1.ReasonNotReconciling},
			},
		},
		{
			name: "members still being created", phase: PhaseProvisioning,
			obs: func(o *observed) { o.pods = o.pods[:2] },
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonCreatingMembers},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
				v1alpha1.ConditionReconciling:  {T, v1alpha1.ReasonCreatingMembers},
				v1alpha1.ConditionStalled:      {F, v1alpha1.ReasonNotStalled},
			},
		},
		{
			name: "members the API server refuses: its words, not just a count", phase: PhaseProvisioning,
			obs: func(o *observed) {
				o.pods = o.pods[:2]
				o.refusal = &memberRefusal{message: `create Pod shop-2 in StatefulSet shop failed error: pods "shop-2" is forbidden: violates PodSecurity "restricted:latest": runAsUser=0`}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonMembersRefused},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
				v1alpha1.ConditionReconciling:  {F, v1alpha1.ReasonNotReconciling},
				v1alpha1.ConditionStalled:      {T, v1alpha1.ReasonMembersRefused},
			},
			message: map[v1alpha1.ConditionType][]string{
				v1alpha1.ConditionProvisioning: {"2 of 3 member(s) exist", `pods "shop-2" is forbidden`, "spec.podTemplate.securityContext", "pod-security.kubernetes.io/enforce"},
				v1alpha1.ConditionStalled:      {`pods "shop-2" is forbidden`},
			},
		},
		{
			// A member evicted while paused comes back from the held
			// template, or not at all: the refusal is what to fix.
			name: "a refused member is named before a held change", phase: PhaseProvisioning,
			obs: func(o *observed) {
				o.pods, o.pausedChanges = o.pods[:2], true
				o.refusal = &memberRefusal{message: `create Pod shop-2 in StatefulSet shop failed error: pods "shop-2" is forbidden: exceeded quota: pods`}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonMembersRefused},
			},
			message: map[v1alpha1.ConditionType][]string{v1alpha1.ConditionProvisioning: {"exceeded quota"}},
		},
		{
			name: "the StatefulSet's events unreadable: whether members are refused is unknown, and said", phase: PhaseProvisioning,
			obs: func(o *observed) {
				o.pods = o.pods[:2]
				o.refusal = &memberRefusal{unknown: errors.New(`events is forbidden`)}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonCreatingMembers},
			},
			message: map[v1alpha1.ConditionType][]string{v1alpha1.ConditionProvisioning: {"2 of 3 member(s) exist", "unknown", "events is forbidden"}},
		},
		{
			name: "a member not ready", phase: PhaseProvisioning,
			obs: func(o *observed) { o.pods[1] = member(1, "r2", false) },
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonWaitingForMembers},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
				v1alpha1.ConditionReconciling:  {T, v1alpha1.ReasonWaitingForMembers},
			},
		},
		{
			name: "a member restarted and is not ready: degraded", phase: PhaseDegraded,
			obs: func(o *observed) {
				o.pods[1] = member(1, "r2", false)
				o.pods[1].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "celld", RestartCount: 2}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonWaitingForMembers},
				v1alpha1.ConditionReconciling:  {T, v1alpha1.ReasonWaitingForMembers},
			},
		},
		{
			// The runtime answers 503 with phase Starting while it comes up:
			// that member is on its way, not lost. While 1,000 fleets started,
			// most passed through Degraded this way (bench/results/history.md,
			// fifteenth round).
			name: "a Ready member whose runtime is still starting: provisioning, not degraded", phase: PhaseProvisioning,
			obs: func(o *observed) {
				o.reports["shop-1"] = state.Result{Report: &state.Report{Healthy: false, Phase: "Starting"}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonWaitingForMembers},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
				v1alpha1.ConditionReconciling:  {T, v1alpha1.ReasonWaitingForMembers},
			},
		},
		{
			name: "a Ready member whose runtime reports itself unhealthy: degraded", phase: PhaseDegraded,
			obs: func(o *observed) {
				o.reports["shop-1"] = state.Result{Report: &state.Report{Healthy: false, Phase: "Recovering"}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonWaitingForMembers},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
			},
		},
		{
			name: "rolling", phase: PhaseRolling,
			obs: func(o *observed) {
				o.sts.Status.UpdateRevision = "r3"
				o.decision = roll.Decision{Outdated: 3, Replace: "shop-2"}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonRolling},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
				v1alpha1.ConditionReconciling:  {T, v1alpha1.ReasonRolling},
			},
		},
		{
			name:  "a roll held by the maintenance pause",
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Maintenance.Paused = true }, phase: PhaseRolling,
			obs: func(o *observed) {
				o.sts.Status.UpdateRevision = "r3"
				o.decision = roll.Decision{Outdated: 3, Waiting: "maintenance is paused"}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonRollPaused},
				v1alpha1.ConditionReconciling:  {F, v1alpha1.ReasonRollPaused},
				v1alpha1.ConditionStalled:      {F, v1alpha1.ReasonNotStalled},
			},
		},
		{
			name:  "member changes held by the maintenance pause",
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Maintenance.Paused = true }, phase: PhasePaused,
			obs: func(o *observed) { o.pausedChanges = true },
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonMaintenancePaused},
				v1alpha1.ConditionReady:        {T, v1alpha1.ReasonMembersReady},
				v1alpha1.ConditionReconciling:  {F, v1alpha1.ReasonMaintenancePaused},
			},
		},
		{
			name: "the StatefulSet controller has not seen the template", phase: PhaseProvisioning,
			obs: func(o *observed) { o.stsSettling = true },
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonApplyingTemplate},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
			},
		},
		{
			name: "a meshed member without its proxy", phase: PhaseProvisioning,
			obs: func(o *observed) { o.mesh = mesh.State{Phase: mesh.Joining, MissingProxy: []string{"shop-1"}} },
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonProxyMissing},
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonProxyMissing},
				v1alpha1.ConditionMeshReady:    {F, v1alpha1.ReasonProxyMissing},
				v1alpha1.ConditionReconciling:  {T, v1alpha1.ReasonProxyMissing},
			},
		},
		{
			// The pause holds the template, so the members still run the
			// old one: without proxies (joining) or with them (leaving). That
			// is the pause, not a broken injector: deleting a member Pod
			// brings it back unchanged from the held template.
			name:  "a mesh join held by the maintenance pause",
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Maintenance.Paused = true }, phase: PhasePaused,
			obs: func(o *observed) {
				o.pausedChanges, o.heldMesh = true, joiningMesh
				o.mesh = mesh.State{Phase: mesh.Joining, MissingProxy: []string{"shop-0", "shop-1", "shop-2"}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionMeshReady:    {F, v1alpha1.ReasonMaintenancePaused},
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonMaintenancePaused},
				v1alpha1.ConditionReconciling:  {F, v1alpha1.ReasonMaintenancePaused},
			},
			message: map[v1alpha1.ConditionType][]string{v1alpha1.ConditionMeshReady: {"joining the mesh", "spec.maintenance.paused"}},
		},
		{
			name:  "a mesh leave held by the maintenance pause",
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Maintenance.Paused = true }, phase: PhasePaused,
			obs: func(o *observed) {
				o.pausedChanges, o.heldMesh = true, leavingMesh
				o.mesh = mesh.State{Phase: mesh.Leaving, UnwantedProxy: []string{"shop-0", "shop-1", "shop-2"}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionMeshReady:    {F, v1alpha1.ReasonMaintenancePaused},
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonMaintenancePaused},
			},
			message: map[v1alpha1.ConditionType][]string{v1alpha1.ConditionMeshReady: {"leaving the mesh", "spec.maintenance.paused"}},
		},
		{
			// A DestinationRule forcing ISTIO_MUTUAL toward the fleet holds
			// the roll into the mesh before the template changes: the fleet
			// is blocked (someone must act) and MeshReady names the rule, not
			// a roll in progress.
			name: "a mesh join held by a DestinationRule", phase: PhaseBlocked,
			obs: func(o *observed) {
				hold := &blockage{reason: v1alpha1.ReasonMutualTLSDestinationRule, message: "DestinationRule shop/mtls forces ISTIO_MUTUAL"}
				o.blocked, o.mutualTLSHold, o.templateHeld = hold, hold, true
				o.mesh = mesh.State{Phase: mesh.Joining, Relaxed: true, Policies: true, IstiodEgress: true}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionMeshReady:             {F, v1alpha1.ReasonMutualTLSDestinationRule},
				v1alpha1.ConditionInfrastructureBlocked: {T, v1alpha1.ReasonMutualTLSDestinationRule},
				v1alpha1.ConditionProvisioning:          {T, v1alpha1.ReasonMutualTLSDestinationRule},
				v1alpha1.ConditionStalled:               {T, v1alpha1.ReasonMutualTLSDestinationRule},
				v1alpha1.ConditionReconciling:           {F, v1alpha1.ReasonNotReconciling},
			},
			message: map[v1alpha1.ConditionType][]string{
				v1alpha1.ConditionMeshReady:             {"shop/mtls"},
				v1alpha1.ConditionInfrastructureBlocked: {"shop/mtls"},
			},
		},
		{
			name:  "storage: a resize rejected",
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Storage = &v1alpha1.Storage{} }, phase: PhaseReady,
			obs: func(o *observed) { o.diskResize = "the storage class does not allow expansion" },
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionDisksResized: {F, v1alpha1.ReasonResizeRejected},
				v1alpha1.ConditionReady:        {T, v1alpha1.ReasonMembersReady},
			},
		},
		{
			name:  "storage: every claim requests the size",
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Storage = &v1alpha1.Storage{} }, phase: PhaseReady,
			want: map[v1alpha1.ConditionType]wantCondition{v1alpha1.ConditionDisksResized: {T, v1alpha1.ReasonSizeRequested}},
		},
		{
			name: "a failed step before the members were read keeps the last known phase", phase: PhaseRolling,
			fleet: func(f *v1alpha1.CelldFleet) {
				f.Status.Phase = PhaseRolling
				f.Status.ObservedGeneration = 1
			},
			obs: func(o *observed) {
				*o = observed{failed: &stepError{step: "applying the StatefulSet", err: errors.New("etcd is away")}, routing: routingOutcome{keep: true}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionReconciled:  {F, v1alpha1.ReasonStepFailed},
				v1alpha1.ConditionReconciling: {T, v1alpha1.ReasonStepFailed},
				v1alpha1.ConditionStalled:     {F, v1alpha1.ReasonNotStalled},
			},
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionReady},
		},
		{
			// The namespace labels are a request to the mesh operator: a
			// policy refusing them is reported, and the members, which run
			// regardless, are what Ready is about.
			name: "namespace labels refused by a policy: reported, the fleet is Ready regardless", phase: PhaseReady,
			obs: func(o *observed) {
				o.declared = namespaceOutcome{reached: true, labels: map[string]string{labels.Mesh: labels.MeshEnabled},
					refused: errors.New(`namespaces "apps" is forbidden: ValidatingAdmissionPolicy 'no-labels' denied request`)}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionNamespaceDeclared: {F, v1alpha1.ReasonNamespaceLabelsRefused},
				v1alpha1.ConditionReady:             {T, v1alpha1.ReasonMembersReady},
				v1alpha1.ConditionReconciled:        {T, v1alpha1.ReasonAllStepsRan},
				v1alpha1.ConditionStalled:           {F, v1alpha1.ReasonNotStalled},
			},
			message: map[v1alpha1.ConditionType][]string{v1alpha1.ConditionNamespaceDeclared: {
				"ValidatingAdmissionPolicy 'no-labels' denied request", labels.Mesh + "=" + labels.MeshEnabled, "The members run regardless"}},
		},
		{
			name: "namespace labels declared", phase: PhaseReady,
			obs: func(o *observed) {
				o.declared = namespaceOutcome{reached: true, labels: map[string]string{labels.Mesh: labels.MeshEnabled}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{v1alpha1.ConditionNamespaceDeclared: {T, v1alpha1.ReasonNamespaceLabelsDeclared}},
		},
		{
			name: "a fleet that asks its namespace for nothing has no NamespaceDeclared", phase: PhaseReady,
			fleet: func(f *v1alpha1.CelldFleet) {
				f.Status.Conditions = []metav1.Condition{{Type: string(v1alpha1.ConditionNamespaceDeclared), Status: T, Reason: string(v1alpha1.ReasonNamespaceLabelsDeclared)}}
			},
			obs:    func(o *observed) { o.declared = namespaceOutcome{reached: true} },
			absent: []v1alpha1.ConditionType{v1alpha1.ConditionNamespaceDeclared},
		},
		{
			name: "the namespace step got no answer: NamespaceDeclared says what it said", phase: PhaseReady,
			fleet: func(f *v1alpha1.CelldFleet) {
				f.Status.Conditions = []metav1.Condition{{Type: string(v1alpha1.ConditionNamespaceDeclared), Status: F, Reason: string(v1alpha1.ReasonNamespaceLabelsRefused)}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{v1alpha1.ConditionNamespaceDeclared: {F, v1alpha1.ReasonNamespaceLabelsRefused}},
		},
		{
			// A step that keeps failing (a policy refusing the StatefulSet)
			// must not freeze what status says of the members: they were
			// read (readMemberFacts), and Ready follows them.
			name: "a failed step after the members were read reports them as they are", phase: PhaseDegraded,
			fleet: func(f *v1alpha1.CelldFleet) {
				f.Status.Phase = PhaseReady
				f.Status.ObservedGeneration = 1
				f.Status.Conditions = []metav1.Condition{{Type: string(v1alpha1.ConditionReady), Status: T, Reason: string(v1alpha1.ReasonMembersReady)}}
			},
			obs: func(o *observed) {
				o.failed = &stepError{step: "applying the StatefulSet", err: errors.New("denied by policy")}
				o.reports["shop-1"] = state.Result{Report: &state.Report{Healthy: false, Phase: "Recovering"}}
			},
			want: map[v1alpha1.ConditionType]wantCondition{
				v1alpha1.ConditionReady:        {F, v1alpha1.ReasonMembersNotReady},
				v1alpha1.ConditionProvisioning: {T, v1alpha1.ReasonWaitingForMembers},
				v1alpha1.ConditionReconciled:   {F, v1alpha1.ReasonStepFailed},
				v1alpha1.ConditionReconciling:  {T, v1alpha1.ReasonStepFailed},
			},
			message: map[v1alpha1.ConditionType][]string{v1alpha1.ConditionReconciled: {"applying the StatefulSet", "denied by policy"}},
		},
		{
			name: "a failed step before the mesh was judged keeps MeshReady", phase: PhaseReady,
			fleet: func(f *v1alpha1.CelldFleet) {
				f.Status.Mesh = string(mesh.Ambient)
				f.Status.Conditions = []metav1.Condition{{Type: string(v1alpha1.ConditionMeshReady), Status: T, Reason: string(v1alpha1.ReasonAmbientSharedServiceAccount), Message: "shared"}}
			},
			obs: func(o *observed) {
				o.failed = &stepError{step: "mesh policies", err: errors.New("etcd is away")}
				o.mesh = mesh.State{Phase: mesh.Ambient}
			},
			want: map[v1alpha1.ConditionType]wantCondition{v1alpha1.ConditionMeshReady: {T, v1alpha1.ReasonAmbientSharedServiceAccount}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := statusFleet()
			if tc.fleet != nil {
				tc.fleet(f)
			}
			obs := healthyFleet()
			if tc.obs != nil {
				tc.obs(obs)
			}
			st := computeStatus(f, obs, now)
			assert.Equal(t, tc.phase, st.Phase)
			for typ, w := range tc.want {
				c := meta.FindStatusCondition(st.Conditions, string(typ))
				require.NotNil(t, c, "%s", typ)
				assert.Equal(t, w.status, c.Status, "%s: %s", typ, c.Message)
				assert.Equal(t, string(w.reason), c.Reason, "%s: %s", typ, c.Message)
				if c.Status == metav1.ConditionTrue && typ != v1alpha1.ConditionReady && typ != v1alpha1.ConditionReconciled {
					assert.NotEmpty(t, c.Message, "%s says why", typ)
				}
			}
			for typ, parts := range tc.message {
				if c := meta.FindStatusCondition(st.Conditions, string(typ)); assert.NotNil(t, c, "%s", typ) {
					for _, part := range parts {
						assert.Contains(t, c.Message, part, "%s", typ)
					}
				}
			}
			for _, typ := range tc.absent {
				assert.Nil(t, meta.FindStatusCondition(st.Conditions, string(typ)), "%s", typ)
			}
			if obs.failed != nil {
				assert.Equal(t, f.Status.ObservedGeneration, st.ObservedGeneration, "a failed reconcile does not claim the spec was observed")
			} else {
				assert.Equal(t, f.Generation, st.ObservedGeneration)
			}
		})
	}
}

// TestComputeStatusIsStable: computing again from the status it produced
// changes nothing, not even a timestamp, so an unchanged fleet is not
// written.
func TestComputeStatusIsStable(t *testing.T) {
	f := statusFleet()
	first := computeStatus(f, healthyFleet(), time.Unix(100, 0))
	f.Status = first
	assert.Equal(t, first, computeStatus(f, healthyFleet(), time.Unix(200, 0)))
}

// TestStartingMembersWaitForTheirReport walks a fleet's members through
// their start as the bed shows it (Pending; Ready with /state not serving
// yet; healthy) and writes each status the way updateStatus does. A member
// that has just turned Ready and has no report yet is not written on its
// own: the next look (startingPoll later) writes it with its report. Every
// other change is written at once: a member turning healthy, one turning
// unhealthy, a condition flipping, and a starting member past the window.
func TestStartingMembersWaitForTheirReport(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := &FleetReconciler{Now: func() time.Time { return now }}
	f := statusFleet()
	obs := healthyFleet()
	pending := func(i int) {
		obs.pods[i].Status = corev1.PodStatus{Phase: corev1.PodPending}
		delete(obs.reports, obs.pods[i].Name)
	}
	readySince := func(i int, d time.Duration) {
		obs.pods[i].Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-d))}}}
	}
	refused := state.Result{Err: errors.New("connect: connection refused")}
	served := state.Result{Report: &state.Report{Healthy: true, Phase: "serving"}}
	// step computes the status of obs over the stored one and reports
	// whether it is written; a written status is stored.
	step := func(what string) bool {
		t.Helper()
		next := computeStatus(f, obs, now)
		require.False(t, equality.Semantic.DeepEqual(f.Status, next), "%s: the status changed", what)
		if r.statusVerdict(f.Status, next, obs) == pacing.Hold {
			return false
		}
		f.Status = next
		return true
	}

	for i := range 3 {
		pending(i)
	}
	assert.True(t, step("three members exist, none runs"))
	readySince(0, 0)
	obs.reports["shop-0"] = refused
	assert.False(t, step("shop-0 turned Ready, /state not serving yet"), "a quarter of a second before its report")
	readySince(1, 0)
	obs.reports["shop-1"] = refused
	assert.False(t, step("shop-1 turned Ready too"))
	obs.reports["shop-0"] = served
	assert.False(t, step("shop-0 healthy"), "a member turning healthy waits for the one starting beside it")
	obs.reports["shop-1"] = served
	assert.True(t, step("shop-1 healthy"), "the starting member's report is written, with the member that waited")
	assert.Equal(t, int32(2), f.Status.ReadyReplicas)
	assert.Equal(t, 2, countAvailable(f.Status.Members))
	readySince(2, startingWindow)
	obs.reports["shop-2"] = refused
	assert.True(t, step("shop-2 Ready for startingWindow, /state still refused"), "past the window a failed read is shown")
	obs.reports["shop-2"] = served
	assert.True(t, step("shop-2 healthy"))
	require.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)))

	// A Ready fleet whose member restarts: Ready flips, written at once
	// although the member counts as starting.
	readySince(2, 0)
	obs.reports["shop-2"] = refused
	assert.True(t, step("shop-2 restarted"), "the Ready condition flipped")
	// A member that is not starting turns unhealthy beside a starting one.
	obs.reports["shop-0"] = state.Result{Report: &state.Report{Healthy: false, Phase: "Degraded"}}
	assert.True(t, step("shop-0 reports itself unhealthy"))
	// A new spec is observed while a member starts.
	obs.reports["shop-0"] = served
	f.Status = computeStatus(f, obs, now)
	f.Generation++
	assert.True(t, step("generation 3"), "a new spec is reported at once")
}

// TestLeftMeshSaysWhatStandsBy: a fleet that left the mesh where an
// enrollment is in effect keeps its ambient policies in standby
// (mesh.Decide); LeftMesh must not say they are deleted.
func TestLeftMeshSaysWhatStandsBy(t *testing.T) {
	for _, tc := range []struct {
		standby bool
		want    string
	}{
		{false, "its Istio policies are deleted"},
		{true, "stand by"},
	} {
		fleet := &v1alpha1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
		obs := &observed{mesh: mesh.State{Phase: mesh.Left, Standby: tc.standby, Relaxed: tc.standby}}
		var reason v1alpha1.ConditionReason
		var msg string
		setMeshCondition(fleet, obs, func(_ v1alpha1.ConditionType, _ metav1.ConditionStatus, r v1alpha1.ConditionReason, m string) {
			reason, msg = r, m
		})
		assert.Equal(t, v1alpha1.ReasonLeftMesh, reason)
		assert.Contains(t, msg, tc.want, "standby %v", tc.standby)
		if tc.standby {
			assert.NotContains(t, msg, "deleted")
			assert.Contains(t, msg, "orders-mesh")
		}
	}
}
