//go:build integration

package controller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestStatefulSetRefusedByAdmissionSaysSo (issue 43, the explorer's
// policy.sts): a ValidatingAdmissionPolicy refuses every StatefulSet
// without a label no fleet's StatefulSet carries. The fleet's conditions
// say so where a user and a GitOps health check look, quoting the policy:
// Provisioning (not CreatingMembers, "0 of 2 member(s) exist", as if
// members were on their way), Ready (not MembersNotReady) while members
// are missing, and Stalled (a person must act, as for MembersRefused).
// Members that run keep Ready: a refused update leaves them serving.
func TestStatefulSetRefusedByAdmissionSaysSo(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	const ns = "stsrefused"
	createNamespace(t, env.Client, ns)
	needsLabel := "!has(object.metadata.labels) || !('policy.example/approved' in object.metadata.labels)"
	probe := func(c client.Client) error {
		return c.Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
			Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "registry.example/probe:1"}}}}}}, client.DryRunAll)
	}

	t.Run("a new fleet's StatefulSet refused", func(t *testing.T) {
		msg, allow := denyOperatorWrites(t, env, ns, "sts-needs-label", "apps", "statefulsets", needsLabel, probe)
		defer allow()
		f := fleet(ns, "new")
		f.Spec.Replicas = ptr.To[int32](2)
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.actAsOperator()
		h.reconcile(f)

		prov := condition(t, h, f, v1alpha1.ConditionProvisioning)
		require.NotNil(t, prov)
		assert.Equal(t, metav1.ConditionTrue, prov.Status)
		assert.Equal(t, string(v1alpha1.ReasonStatefulSetRefused), prov.Reason, "Provisioning names the refusal: %s", prov.Message)
		assert.Contains(t, prov.Message, msg, "the API server's answer is quoted")
		ready := condition(t, h, f, v1alpha1.ConditionReady)
		require.NotNil(t, ready)
		assert.Equal(t, metav1.ConditionFalse, ready.Status)
		assert.Equal(t, string(v1alpha1.ReasonStatefulSetRefused), ready.Reason, "Ready points to the refusal: %s", ready.Message)
		stalled := condition(t, h, f, v1alpha1.ConditionStalled)
		require.NotNil(t, stalled)
		assert.Equal(t, metav1.ConditionTrue, stalled.Status, "a person must act: %s", stalled.Message)
		assert.Equal(t, string(v1alpha1.ReasonStatefulSetRefused), stalled.Reason)
		reconciled := condition(t, h, f, v1alpha1.ConditionReconciled)
		require.NotNil(t, reconciled)
		assert.Equal(t, string(v1alpha1.ReasonStepFailed), reconciled.Reason, "Reconciled still names the failed step")
	})

	t.Run("an update refused: the members keep serving", func(t *testing.T) {
		member := serveState(t, "127.14.143.1")
		f := fleet(ns, "running")
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.actAsOperator()
		// The first case's policy may be enforced for a moment after it
		// went.
		require.Eventually(t, func() bool {
			h.reconcile(f)
			return h.get(&appsv1.StatefulSet{}, ns, "running") == nil
		}, 30*time.Second, 200*time.Millisecond)
		playStatefulSet(t, env.Client, ns, "running", "rev1")
		runningMember(t, env.Client, ns, "running", 0, false, "rev1", member.ip)
		h.reconcile(f)
		ready := condition(t, h, f, v1alpha1.ConditionReady)
		require.NotNil(t, ready)
		require.Equal(t, metav1.ConditionTrue, ready.Status, "%+v", f.Status.Conditions)

		msg, allow := denyOperatorWrites(t, env, ns, "sts-needs-label-update", "apps", "statefulsets", needsLabel, probe)
		defer allow()
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":"registry.example/celld:2.0.0"}}`))))
		h.reconcile(f)
		prov := condition(t, h, f, v1alpha1.ConditionProvisioning)
		require.NotNil(t, prov)
		assert.Equal(t, string(v1alpha1.ReasonStatefulSetRefused), prov.Reason, "the new spec is not applied, and Provisioning says why: %s", prov.Message)
		assert.Contains(t, prov.Message, msg)
		ready = condition(t, h, f, v1alpha1.ConditionReady)
		assert.Equal(t, metav1.ConditionTrue, ready.Status, "the member still serves: %s", ready.Message)
		stalled := condition(t, h, f, v1alpha1.ConditionStalled)
		require.NotNil(t, stalled)
		assert.Equal(t, metav1.ConditionTrue, stalled.Status)
	})
}
