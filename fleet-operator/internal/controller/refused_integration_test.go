//go:build integration

package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// fleetOperatorUser is the identity the operator runs as in the chart; the
// admission policies below refuse writes by it alone, as a policy engine
// keyed on the requesting user does.
const fleetOperatorUser = "system:serviceaccount:fleet-system:fleet-operator"

// actAsOperator makes the harness's reconciler send every request as
// fleetOperatorUser (impersonated; its group grants the rights, so only
// admission decides).
func (h *harness) actAsOperator() {
	h.t.Helper()
	h.actAs(fleetOperatorUser, "system:masters")
}

// actAs makes the harness's reconciler send every request as user (in
// groups), impersonated.
func (h *harness) actAs(user string, groups ...string) {
	h.t.Helper()
	cfg := rest.CopyConfig(h.env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: h.env.Client.Scheme()})
	require.NoError(h.t, err)
	h.r.Client = h.writes.client(c)
	h.r.Applier = &apply.Applier{Client: h.r.Client, FieldManager: names.Operator, HashAnnotation: HashAnnotation}
}

// denyOperatorWrites installs a ValidatingAdmissionPolicy that refuses
// fleetOperatorUser's writes of resource (group/resource) in namespace ns
// (of namespace ns itself, for namespaces) for which
// refuse (CEL over object and oldObject) holds, and waits until the API
// server enforces it by probing with probe (a dry-run as the operator
// must be refused). It returns the policy's message and a function that
// removes the policy.
func denyOperatorWrites(t *testing.T, env *testenv.Env, ns, name, group, resource, refuse string, probe func(c client.Client) error) (string, func()) {
	t.Helper()
	ctx := context.Background()
	msg := "the cluster's policy engine refuses this change by the fleet operator (" + name + ")"
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "fleet-operator", Expression: "request.userInfo.username == '" + fleetOperatorUser + "'"}},
			Validations:     []admissionregistrationv1.Validation{{Expression: "!(" + refuse + ")", Message: msg}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, vap))
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, binding))
	remove := func() {
		_ = env.Client.Delete(ctx, binding)
		_ = env.Client.Delete(ctx, vap)
	}
	t.Cleanup(remove)
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fleetOperatorUser, Groups: []string{"system:masters"}}
	asOperator, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	// Refused by this policy, not by anything else (a probe the schema
	// refuses would pass at once, before the policy is in force).
	var last error
	if !assert.Eventually(t, func() bool {
		last = probe(asOperator)
		return last != nil && strings.Contains(last.Error(), msg)
	}, 30*time.Second, 200*time.Millisecond, "the API server enforces %s", name) {
		t.Fatalf("the probe's last answer: %v", last)
	}
	return msg, remove
}

// namespaceLabelsChange: a namespace update that adds, changes or removes a
// label.
const namespaceLabelsChange = "(has(object.metadata.labels) ? object.metadata.labels : {'': ''}) != " +
	"(has(oldObject.metadata.labels) ? oldObject.metadata.labels : {'': ''})"

// TestRefusedStepsDoNotFreezeTheFleet: a step the API server keeps
// refusing is reported with its answer, the remaining steps still run,
// the members' facts are read and written, and the fleet is looked at
// again within its own poll rather than after an ever longer backoff.
func TestRefusedStepsDoNotFreezeTheFleet(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")

	// Every fleet but a disabled one asks for enrollment with a namespace
	// label, also where no ServiceMesh exists: a policy engine that
	// refuses the operator's namespace label writes must not keep the
	// members from running.
	t.Run("namespace label writes refused: the members run and the refusal is reported", func(t *testing.T) {
		createNamespace(t, env.Client, "nolabels")
		member := serveState(t, "127.14.142.1")
		msg, allow := denyOperatorWrites(t, env, "nolabels", "no-namespace-labels", "", "namespaces", namespaceLabelsChange, func(c client.Client) error {
			return c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nolabels"}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`)), client.DryRunAll)
		})
		f := fleet("nolabels", "refused")
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.actAsOperator()

		res, err := h.r.Reconcile(ctx, reconcileRequest(f))
		require.NoError(t, err, "a refused namespace label is reported, not retried as an error")
		assertBoundedLook(t, h, res)
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, "nolabels", "refused"), "the members' StatefulSet is applied although the namespace label was refused")
		h.reconcile(f)
		declared := condition(t, h, f, v1alpha1.ConditionNamespaceDeclared)
		require.NotNil(t, declared, "a condition reports the refused namespace labels")
		assert.Equal(t, metav1.ConditionFalse, declared.Status)
		assert.Equal(t, string(v1alpha1.ReasonNamespaceLabelsRefused), declared.Reason)
		assert.Contains(t, declared.Message, msg, "the API server's answer is quoted")
		assert.Contains(t, declared.Message, labels.Mesh, "the refused label is named")
		ns := &corev1.Namespace{}
		require.NoError(t, h.get(ns, "", "nolabels"))
		assert.NotContains(t, ns.Labels, labels.Mesh)

		// The members' facts are read and written while the refusal lasts.
		playStatefulSet(t, env.Client, "nolabels", "refused", "rev1")
		runningMember(t, env.Client, "nolabels", "refused", 0, false, "rev1", member.ip)
		h.reconcile(f)
		require.NoError(t, h.get(f, "nolabels", "refused"))
		require.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)), "%+v", f.Status.Conditions)
		member.healthy.Store(false)
		h.reconcile(f)
		require.NoError(t, h.get(f, "nolabels", "refused"))
		assert.False(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)), "Ready follows the member, not the last status")
		assert.Equal(t, PhaseDegraded, f.Status.Phase)

		// A fleet deleted while the policy refuses: it declared nothing, so
		// there is nothing to withdraw and its finalizer does not hold it.
		gone := fleet("nolabels", "gone")
		require.NoError(t, env.Client.Create(ctx, gone))
		h.reconcile(gone)
		require.NoError(t, h.get(gone, "nolabels", "gone"))
		require.NoError(t, env.Client.Delete(ctx, gone))
		h.reconcileOnce(gone)
		assert.True(t, apierrors.IsNotFound(h.get(&v1alpha1.CelldFleet{}, "nolabels", "gone")), "the deleted fleet is gone")

		// The policy goes: the first pass after the fleet's poll declares
		// the label (a refused write is asked again at the poll, not at
		// every look: TestRefusedNamespaceLabelsRetriedAtThePoll).
		// Each look here comes a poll later (the policy's removal takes a
		// moment to reach admission: a look still refused waits a poll).
		allow()
		var later atomic.Int64
		h.r.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
		require.Eventually(t, func() bool {
			later.Add(int64(h.r.Config.StateInterval))
			h.reconcile(f)
			c := condition(t, h, f, v1alpha1.ConditionNamespaceDeclared)
			return c != nil && c.Status == metav1.ConditionTrue
		}, 30*time.Second, 200*time.Millisecond)
		require.NoError(t, h.get(ns, "", "nolabels"))
		assert.Equal(t, labels.MeshEnabled, ns.Labels[labels.Mesh])
	})

	// A step that fails every pass (here the StatefulSet, refused by a
	// policy) used to leave the members as status last saw them: a
	// member that stopped being healthy stayed Ready=True.
	t.Run("the StatefulSet refused: member facts are still read, Ready is not stale, the look is bounded", func(t *testing.T) {
		createNamespace(t, env.Client, "nosts")
		member := serveState(t, "127.14.142.2")
		f := fleet("nosts", "stuck")
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.actAsOperator()
		h.reconcile(f)
		playStatefulSet(t, env.Client, "nosts", "stuck", "rev1")
		runningMember(t, env.Client, "nosts", "stuck", 0, false, "rev1", member.ip)
		h.reconcile(f)
		require.NoError(t, h.get(f, "nosts", "stuck"))
		require.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)))

		msg, _ := denyOperatorWrites(t, env, "nosts", "no-image-2", "apps", "statefulsets",
			"object.spec.template.spec.containers.exists(c, c.image.endsWith(':2.0.0'))", func(c client.Client) error {
				sts := &appsv1.StatefulSet{}
				if err := c.Get(ctx, types.NamespacedName{Namespace: "nosts", Name: "stuck"}, sts); err != nil {
					return nil
				}
				sts.Spec.Template.Spec.Containers[0].Image = "registry.example/celld:2.0.0"
				return c.Update(ctx, sts, client.DryRunAll)
			})
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":"registry.example/celld:2.0.0"}}`))))
		member.healthy.Store(false)

		res, err := h.r.Reconcile(ctx, reconcileRequest(f))
		require.NoError(t, err, "a failed step is reported in status and looked at again, not returned into the work queue's backoff")
		assertBoundedLook(t, h, res)
		require.NoError(t, h.get(f, "nosts", "stuck"))
		failed := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionReconciled))
		require.NotNil(t, failed)
		assert.Equal(t, metav1.ConditionFalse, failed.Status)
		assert.Contains(t, failed.Message, msg, "the API server's answer is quoted")
		assert.False(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)), "Ready follows the member, not the last status")
		require.Len(t, f.Status.Members, 1)
		require.NotNil(t, f.Status.Members[0].State)
		assert.False(t, f.Status.Members[0].State.Healthy, "the member's /state is read: %+v", f.Status.Members[0].State)
		assert.Less(t, f.Status.ObservedGeneration, f.Generation, "the new spec is not claimed as observed")

		// Failing again and again, the look stays within the fleet's poll.
		for range 8 {
			res, err := h.r.Reconcile(ctx, reconcileRequest(f))
			require.NoError(t, err)
			assertBoundedLook(t, h, res)
		}
	})
}

// assertBoundedLook: the pass asks to be looked at again, no later than the
// fleet's /state interval.
func assertBoundedLook(t *testing.T, h *harness, res ctrl.Result) {
	t.Helper()
	assert.Positive(t, res.RequeueAfter, "looked at again")
	assert.LessOrEqual(t, res.RequeueAfter, h.r.Config.StateInterval, "no later than the fleet's own poll")
}

// grantAsFleetNamespaces binds the operator's generated rules
// (config/rbac/role.yaml) to user as the chart does with fleetNamespaces:
// a RoleBinding in each of namespaces, and reading Namespaces cluster-wide.
func grantAsFleetNamespaces(t *testing.T, env *testenv.Env, user string, namespaces ...string) {
	t.Helper()
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "fleet-operator", "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{}
	require.NoError(t, yaml.Unmarshal(b, role))
	role.Name = user + "-rules"
	require.NoError(t, env.Client.Create(ctx, role))
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	for _, ns := range namespaces {
		require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, Subjects: subject,
		}))
	}
	readNamespaces := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user + "-namespaces"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}}}
	require.NoError(t, env.Client.Create(ctx, readNamespaces))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: readNamespaces.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readNamespaces.Name}, Subjects: subject,
	}))
}

// TestRoutingSourceOutsideTheOperatorsNamespaces: under isolation strict
// the fleet's 8080 admits its routing source's identities, read from the
// source's Pods. With fleetNamespaces not listing the source's namespace
// the operator may not list them: the fleet still gets its members and its
// spec changes, FLEET-mesh keeps admitting what it admitted from there
// (none for a new fleet: unknown is not absent, nor admitted), and the
// refusal is reported.
func TestRoutingSourceOutsideTheOperatorsNamespaces(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	for _, ns := range []string{"wired", "wired-edge"} {
		createNamespace(t, env.Client, ns)
	}
	podAs(t, env.Client, "wired-edge", "edge-proxy-1", "edge-proxy", map[string]string{"app": "edge-proxy"})
	enrollStrict(t, env.Client, "wired", "ambient", "strict")
	routed := func(name string) *v1alpha1.CelldFleet {
		f := fleet("wired", name)
		f.Spec.Replicas = ptr.To[int32](1)
		f.Spec.Routing = &v1alpha1.Routing{Hostnames: []string{name + ".example.com"}, Ingress: &v1alpha1.IngressRouting{ClassName: "nginx"},
			Source: v1alpha1.RoutingSource{Namespace: "wired-edge", PodLabels: map[string]v1alpha1.LabelValue{"app": "edge-proxy"}}}
		return f
	}

	// Set up while the operator could read the source.
	vault := routed("vault")
	require.NoError(t, env.Client.Create(ctx, vault))
	h := newHarness(t, env, true)
	h.r.Config.IstioTrustDomain = "cluster.local"
	h.reconcile(vault)
	h.reconcile(vault)
	require.True(t, verdictOf(t, h, vault, "wired-edge", "edge-proxy", 8080), "the routing source is admitted")

	// The operator is now limited to namespace wired.
	const user = "limited-fleet-operator"
	grantAsFleetNamespaces(t, env, user, "wired")
	limited := newHarness(t, env, true)
	limited.r.Config.IstioTrustDomain = "cluster.local"
	limited.actAs(user)
	require.NoError(t, env.Client.Patch(ctx, vault, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":"registry.example/celld:2.0.0"}}`))))
	res, err := limited.r.Reconcile(ctx, reconcileRequest(vault))
	require.NoError(t, err, "the refused read is reported, not returned into the work queue's backoff")
	assertBoundedLook(t, limited, res)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, "wired", "vault"))
	assert.Equal(t, "registry.example/celld:2.0.0", sts.Spec.Template.Spec.Containers[0].Image, "the spec change reaches the members")
	assert.True(t, verdictOf(t, h, vault, "wired-edge", "edge-proxy", 8080), "what the policy admitted from the unreadable source stays admitted")
	failed := condition(t, h, vault, v1alpha1.ConditionReconciled)
	require.NotNil(t, failed)
	assert.Equal(t, metav1.ConditionFalse, failed.Status)
	for _, part := range []string{"resolving the wiring graph", "forbidden", "fleetNamespaces"} {
		assert.Contains(t, failed.Message, part)
	}

	// A new fleet: nothing was admitted from the source, nothing is.
	fresh := routed("fresh")
	require.NoError(t, env.Client.Create(ctx, fresh))
	res, err = limited.r.Reconcile(ctx, reconcileRequest(fresh))
	require.NoError(t, err)
	assertBoundedLook(t, limited, res)
	require.NoError(t, h.get(&appsv1.StatefulSet{}, "wired", "fresh"), "the new fleet gets its members")
	assert.False(t, verdictOf(t, h, fresh, "wired-edge", "edge-proxy", 8080), "an identity that was never read is not admitted")
	assert.True(t, verdictOf(t, h, fresh, "wired", "fresh", 8081), "the peers are")
}
