//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
	istiopolicy "github.com/ericdev/fleetmesh/shared/policy"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// heldFinalizer keeps a deleted member Pod terminating until the test lets
// it go, as a kubelet would while the container stops.
const heldFinalizer = "test.celld.eric.dev/terminating"

// saMember creates member ordinal of fleet as the StatefulSet controller
// would from a template that names sa, then plays the kubelet (Running,
// Ready). Its finalizer keeps it terminating once deleted (releaseMember).
func saMember(t *testing.T, c client.Client, ns, fleet string, ordinal int, proxy bool, revision, sa, ip string) {
	t.Helper()
	ctx := context.Background()
	p := memberPod(ns, fleet, ordinal, proxy)
	p.Labels[revisionLabel] = revision
	p.Spec.ServiceAccountName = sa
	p.Finalizers = []string{heldFinalizer}
	require.Eventually(t, func() bool { return c.Create(ctx, p) == nil }, 10*time.Second, 100*time.Millisecond, "creating %s", p.Name)
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}},
		PodIP:      ip, PodIPs: []corev1.PodIP{{IP: ip}},
	}
	require.NoError(t, c.Status().Update(ctx, p), "playing the kubelet for %s", p.Name)
}

// meshMember is saMember of fleet m in the mesh: with its sidecar, or
// captured by ztunnel (istio-cni's redirection mark).
func meshMember(t *testing.T, c client.Client, ns string, ordinal int, ambient bool, revision, sa, ip string) {
	t.Helper()
	saMember(t, c, ns, "m", ordinal, !ambient, revision, sa, ip)
	if ambient {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"enabled"}}}`, labels.IstioAmbientRedirection)
		require.NoError(t, c.Patch(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("m-%d", ordinal)}},
			client.RawPatch(types.MergePatchType, []byte(patch))))
	}
}

// releaseMember lets a terminating member go.
func releaseMember(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	require.NoError(t, c.Patch(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))))
}

func serviceAccountExists(t *testing.T, h *harness, ns, name string) bool {
	t.Helper()
	err := h.get(&corev1.ServiceAccount{}, ns, name)
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// peerPrincipals are the principals FLEET-mesh admits on 8081.
func peerPrincipals(t *testing.T, h *harness, ns, fleet string) []string {
	t.Helper()
	ap := policy(mesh.AuthorizationPolicyKind)
	require.NoError(t, h.get(ap, ns, mesh.PolicyName(fleet)))
	rules, _, _ := unstructured.NestedSlice(ap.Object, "spec", "rules")
	for _, r := range rules {
		rule := r.(map[string]any)
		ports, _, _ := unstructured.NestedSlice(rule, "to")
		if len(ports) == 0 || !strings.Contains(fmt.Sprint(ports), fmt.Sprint(names.PeerPort)) {
			continue
		}
		var out []string
		from, _, _ := unstructured.NestedSlice(rule, "from")
		for _, f := range from {
			ps, _, _ := unstructured.NestedStringSlice(f.(map[string]any), "source", "principals")
			out = append(out, ps...)
		}
		return out
	}
	t.Fatalf("FLEET-mesh has no 8081 rule: %v", rules)
	return nil
}

// TestServiceAccountChanges (issue 42): the ServiceAccount the operator
// made stays while anything still runs as it, and the mesh admits the old
// and the new identity on 8081 while members of both exist.
func TestServiceAccountChanges(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	ctx := context.Background()

	t.Run("named after the fleet: the operator's ServiceAccount is kept", func(t *testing.T) {
		createNamespace(t, env.Client, "saown")
		f := fleet("saown", "own")
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.reconcile(f)
		require.True(t, serviceAccountExists(t, h, "saown", "own"))

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"serviceAccountName":"own"}}`))))
		h.reconcile(f)
		assert.True(t, serviceAccountExists(t, h, "saown", "own"), "the spec names the very account the members run as")

		// Gone anyway (deleted by hand): made again.
		require.NoError(t, env.Client.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "saown", Name: "own"}}))
		h.reconcile(f)
		assert.True(t, serviceAccountExists(t, h, "saown", "own"), "the account the spec names and the operator made is made again")
	})

	t.Run("named after the fleet, someone else's: used as it is", func(t *testing.T) {
		const ns = "saforeign"
		createNamespace(t, env.Client, ns)
		theirs := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs", Labels: map[string]string{"team": "theirs"}}}
		require.NoError(t, env.Client.Create(ctx, theirs))
		f := fleet(ns, "theirs")
		f.Spec.ServiceAccountName = "theirs"
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.reconcile(f)
		if c := condition(t, h, f, v1alpha1.ConditionInfrastructureBlocked); c != nil {
			assert.NotEqual(t, string(v1alpha1.ReasonOwnershipConflict), c.Reason, c.Message)
		}
		require.NoError(t, h.get(theirs, ns, "theirs"))
		assert.Empty(t, theirs.OwnerReferences, "never adopted")
		assert.Equal(t, map[string]string{"team": "theirs"}, theirs.Labels)
		assert.NoError(t, h.get(&appsv1.StatefulSet{}, ns, "theirs"), "the members run as the account the spec names")
	})

	t.Run("paused: the old ServiceAccount stays while the held template or a member names it", func(t *testing.T) {
		const ns = "sapaused"
		createNamespace(t, env.Client, ns)
		require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "custom"}}))
		f := fleet(ns, "p")
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.reconcile(f)
		playStatefulSet(t, env.Client, ns, "p", "rev1")
		for i := range 3 {
			ip := fmt.Sprintf("127.14.42.%d", i+1)
			serveState(t, ip)
			saMember(t, env.Client, ns, "p", i, false, "rev1", "p", ip)
		}
		h.reconcile(f)
		require.True(t, serviceAccountExists(t, h, ns, "p"))

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"maintenance":{"paused":true},"serviceAccountName":"custom"}}`))))
		h.reconcile(f)
		assert.True(t, serviceAccountExists(t, h, ns, "p"), "paused: the held template still names it")

		// A node is drained: member 0 goes and comes back from the held template.
		require.NoError(t, env.Client.Delete(ctx, memberPod(ns, "p", 0, false)))
		h.reconcile(f)
		assert.True(t, serviceAccountExists(t, h, ns, "p"), "the held template still names it while member 0 is terminating")
		releaseMember(t, env.Client, ns, "p-0")
		h.reconcile(f)
		require.True(t, serviceAccountExists(t, h, ns, "p"), "the evicted member can come back from the held template")
		saMember(t, env.Client, ns, "p", 0, false, "rev1", "p", "127.14.42.1")
		h.reconcile(f)
		assert.True(t, serviceAccountExists(t, h, ns, "p"))

		// Unpaused: the template names the new account; members still run the old one.
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"maintenance":{"paused":false}}}`))))
		h.reconcile(f)
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, ns, "p"))
		require.Equal(t, "custom", sts.Spec.Template.Spec.ServiceAccountName)
		playStatefulSetRevisions(t, env.Client, ns, "p", "rev1", "rev2")
		h.reconcile(f)
		assert.True(t, serviceAccountExists(t, h, ns, "p"), "members still run as it")

		// Every member replaced by hand; the last old one still terminating.
		for i := range 3 {
			require.NoError(t, env.Client.Delete(ctx, memberPod(ns, "p", i, false)))
			if i < 2 {
				releaseMember(t, env.Client, ns, fmt.Sprintf("p-%d", i))
				saMember(t, env.Client, ns, "p", i, false, "rev2", "custom", fmt.Sprintf("127.14.42.%d", i+1))
			}
		}
		h.reconcile(f)
		assert.True(t, serviceAccountExists(t, h, ns, "p"), "a terminating member still runs as it")
		releaseMember(t, env.Client, ns, "p-2")
		h.reconcile(f)
		assert.False(t, serviceAccountExists(t, h, ns, "p"), "nothing runs as it any more: deleted")
		assert.True(t, serviceAccountExists(t, h, ns, "custom"), "the account the spec names is not the operator's")
	})

	t.Run("sidecar: 8081 admits both identities through the roll", func(t *testing.T) { testServiceAccountRoll(t, env, false) })
	t.Run("ambient: 8081 admits both identities through the roll", func(t *testing.T) { testServiceAccountRoll(t, env, true) })
}

// testServiceAccountRoll changes the ServiceAccount of a fleet in the mesh
// (sidecar, or captured by ambient) and judges FLEET-mesh at every state
// the roll goes through.
func testServiceAccountRoll(t *testing.T, env *testenv.Env, ambient bool) {
	ctx := context.Background()
	ns, ipBase := "sasidecar", 11
	if ambient {
		ns, ipBase = "saambient", 21
	}
	createNamespace(t, env.Client, ns)
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "custom"}}))
	f := fleet(ns, "m")
	if ambient {
		enroll(t, env.Client, ns, "ambient")
	} else {
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
	}
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	h.startMembers(f, "127.14.42.%d", ipBase, func(i int, ip string) { meshMember(t, env.Client, ns, i, ambient, "rev1", "m", ip) })
	require.NoError(t, h.get(f, ns, "m"))
	if ambient {
		require.Equal(t, "Ambient", f.Status.Mesh)
	} else {
		require.Equal(t, "Meshed", f.Status.Mesh)
	}

	td := h.r.Config.IstioTrustDomain
	oldP, newP := istiopolicy.Principal(td, ns, "m"), istiopolicy.Principal(td, ns, "custom")
	// check judges one observed state: every identity a member (even a
	// terminating one) or the template runs as is admitted on 8081;
	// once the operator has looked (reconciled), none other of the
	// fleet's. Between a change and the operator's next look the
	// policy may still admit an identity nobody runs as any more.
	check := func(step string, reconciled bool) {
		t.Helper()
		want := map[string]bool{}
		pods := &corev1.PodList{}
		require.NoError(t, env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(names.Selector("m"))))
		for _, p := range pods.Items {
			want[istiopolicy.Principal(td, ns, p.Spec.ServiceAccountName)] = true
		}
		sts := &appsv1.StatefulSet{}
		require.NoError(t, h.get(sts, ns, "m"))
		want[istiopolicy.Principal(td, ns, sts.Spec.Template.Spec.ServiceAccountName)] = true
		got := peerPrincipals(t, h, ns, "m")
		for p := range want {
			assert.Contains(t, got, p, "%s: a member or the template runs as %s", step, p)
		}
		if reconciled && !want[oldP] {
			assert.NotContains(t, got, oldP, "%s: no member runs as the old identity any more", step)
		}
	}
	check("before the change", true)

	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"serviceAccountName":"custom"}}`))))
	h.reconcile(f)
	check("template changed", true)
	assert.Contains(t, peerPrincipals(t, h, ns, "m"), newP, "the new identity is admitted before any member runs as it")
	playStatefulSetRevisions(t, env.Client, ns, "m", "rev1", "rev2")
	check("StatefulSet controller saw the template", false)

	for step := 0; step < 10; step++ {
		h.reconcile(f)
		check(fmt.Sprintf("roll pass %d", step), true)
		pods := &corev1.PodList{}
		require.NoError(t, env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(names.Selector("m"))))
		old := 0
		for _, p := range pods.Items {
			if p.Labels[revisionLabel] == "rev1" {
				old++
			}
			if p.DeletionTimestamp == nil {
				continue
			}
			// The roll deleted it: it stops, and the StatefulSet
			// controller makes it again from the new template.
			check(p.Name+" terminating", false)
			releaseMember(t, env.Client, ns, p.Name)
			check(p.Name+" gone", false)
			saMember(t, env.Client, ns, "m", ordinal(p.Name), true, "rev2", "custom", p.Status.PodIP)
			check(p.Name+" replaced", false)
		}
		if old == 0 {
			break
		}
	}
	h.reconcile(f)
	check("rolled", true)
	assert.ElementsMatch(t, []string{newP, istiopolicy.Principal(td, "fleet-system", "fleet-operator")}, peerPrincipals(t, h, ns, "m"),
		"after the roll only the new identity (and the operator's)")
	assert.False(t, serviceAccountExists(t, h, ns, "m"), "nothing runs as the old account: deleted")
}
