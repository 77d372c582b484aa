//go:build integration

package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/access"
	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	istiopolicy "github.com/ericdev/fleetmesh/shared/policy"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// accessReport reads from the API server what decides access to the fleet
// and judges every caller on every member port (fleet-operator/access:
// cyclonus for the NetworkPolicies, shared/authzeval for Istio's rules,
// the namespace's own AuthorizationPolicies included).
func accessReport(t *testing.T, env *testenv.Env, f *v1alpha1.CelldFleet) *access.Report {
	t.Helper()
	ctx := context.Background()
	apis := &served.Catalog{Discovery: discovery.NewDiscoveryClientForConfigOrDie(env.Config), MaxAge: served.Fresh}
	opts := access.Options{OperatorNamespace: "fleet-system", OperatorServiceAccount: "fleet-operator",
		OperatorPodLabels: map[string]string{"app.kubernetes.io/name": "fleet-operator"}}
	snap, err := access.Read(ctx, env.Client, apis, f.Namespace, f.Name, access.ReadOptions{Options: opts})
	require.NoError(t, err)
	rep, err := access.Compute(snap, opts)
	require.NoError(t, err)
	return rep
}

// peersAndOperatorOn8081 fails the step unless every live member admits
// every other live member, and the fleet operator (meshed, or without a
// mesh identity when sidecar says so), on the peer port.
func peersAndOperatorOn8081(t *testing.T, rep *access.Report, step string, plaintextOperator bool) {
	t.Helper()
	for _, e := range rep.Ingress {
		if e.Port != names.PeerPort {
			continue
		}
		switch {
		case e.Caller.Class == access.ClassMember && e.Caller.Live:
		case e.Caller.Class == access.ClassOperator && (e.Caller.Meshed || plaintextOperator):
		default:
			continue
		}
		assert.True(t, e.Allowed, "%s: %s -> %s:%d (wire %d) refused: network %+v, istio %+v", step, e.Caller.Name, e.Member, e.Port, e.WirePort, e.Network, e.Istio)
	}
}

// noMeshTrace fails unless the fleet holds no Istio object and its
// NetworkPolicy opens neither HBONE nor the ambient probe address nor
// istiod egress.
func noMeshTrace(t *testing.T, h *harness, ns, fleet, step string) {
	t.Helper()
	err := h.get(policy(mesh.AuthorizationPolicyKind), ns, mesh.PolicyName(fleet))
	assert.True(t, apierrors.IsNotFound(err), "%s: no AuthorizationPolicy %s-mesh (got %v)", step, fleet, err)
	err = h.get(policy(mesh.PeerAuthenticationKind), ns, mesh.PolicyName(fleet))
	assert.True(t, apierrors.IsNotFound(err), "%s: no PeerAuthentication %s-mesh (got %v)", step, fleet, err)
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, h.get(np, ns, fleet))
	assert.NotContains(t, ingressPorts(np), istiopolicy.HBONEPort, "%s: no HBONE ingress", step)
	assert.False(t, hasEgressPort(np, istiopolicy.HBONEPort), "%s: no HBONE egress", step)
	assert.False(t, hasEgressPort(np, 15012), "%s: no istiod egress", step)
	for _, r := range np.Spec.Ingress {
		for _, from := range r.From {
			assert.Nil(t, from.IPBlock, "%s: no ipBlock source (the ambient probe address) in %v", step, r)
		}
	}
}

// walkRoll drives a roll pass by pass, playing the StatefulSet controller
// and the kubelet, and calls check at every state it observes: after each
// pass (reconciled), and for each member the roll replaces, while it
// terminates, once it is gone and once its replacement (made by replace)
// runs (not reconciled: the operator has not looked yet).
func walkRoll(t *testing.T, h *harness, f *v1alpha1.CelldFleet, from, to string, replace func(ordinal int, ip string), check func(step string, reconciled bool)) {
	t.Helper()
	ctx := context.Background()
	ns := f.Namespace
	for pass := 0; pass < 12; pass++ {
		h.reconcile(f)
		check(fmt.Sprintf("roll pass %d", pass), true)
		pods := &corev1.PodList{}
		require.NoError(t, h.env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(names.Selector(f.Name))))
		old := 0
		for _, p := range pods.Items {
			if p.Labels[revisionLabel] == from {
				old++
			}
			if p.DeletionTimestamp == nil {
				continue
			}
			check(p.Name+" terminating", false)
			releaseMember(t, h.env.Client, ns, p.Name)
			require.Eventually(t, func() bool { return apierrors.IsNotFound(h.get(&corev1.Pod{}, ns, p.Name)) }, 10*time.Second, 50*time.Millisecond)
			check(p.Name+" gone", false)
			replace(ordinal(p.Name), p.Status.PodIP)
			check(p.Name+" replaced", false)
		}
		if old == 0 {
			h.reconcile(f)
			check("rolled", true)
			return
		}
	}
	t.Fatalf("the roll from %s to %s did not end", from, to)
}

// TestNoMeshNoIstioTrace (issue 42, item 4): without a mesh enrollment in
// effect (the namespace neither enrolled nor labelled for ambient capture,
// no member captured or injected) a fleet in mode auto writes no Istio
// object and opens no HBONE or probe port, also after it left the mesh
// with "mesh": null; members still in the mesh keep their paths until
// they left.
func TestNoMeshNoIstioTrace(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	ctx := context.Background()

	t.Run("auto, Istio's API served, no enrollment: nothing of the mesh", func(t *testing.T) {
		const ns = "noenroll"
		createNamespace(t, env.Client, ns)
		f := fleet(ns, "a")
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.startMembers(f, "127.42.4.%d", 1, func(i int, ip string) { runningMember(t, env.Client, ns, "a", i, false, "rev1", ip) })
		noMeshTrace(t, h, ns, "a", "auto without a mesh")
		peersAndOperatorOn8081(t, accessReport(t, env, f), "auto without a mesh", true)
		assert.Equal(t, labels.MeshEnabled, namespaceLabels(t, h, ns)[labels.Mesh], "auto still asks for its namespace's enrollment")
	})

	t.Run(`"mesh": null: the sidecars leave one at a time, then no Istio object, no istiod egress`, func(t *testing.T) {
		const ns = "nullleave"
		createNamespace(t, env.Client, ns)
		f := fleet(ns, "m")
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.startMembers(f, "127.42.5.%d", 1, func(i int, ip string) { saMember(t, env.Client, ns, "m", i, true, "rev1", "m", ip) })
		require.NoError(t, h.get(f, ns, "m"))
		require.Equal(t, "Meshed", f.Status.Mesh)

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":null}}`))))
		h.reconcile(f)
		playStatefulSetRevisions(t, env.Client, ns, "m", "rev1", "rev2")
		check := func(step string, reconciled bool) {
			t.Helper()
			pods := &corev1.PodList{}
			require.NoError(t, env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(names.Selector("m"))))
			proxies := slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return len(p.Spec.InitContainers) > 0 })
			np := &networkingv1.NetworkPolicy{}
			require.NoError(t, h.get(np, ns, "m"))
			if proxies {
				assert.True(t, hasEgressPort(np, 15012), "%s: a sidecar still runs: istiod stays reachable", step)
				assert.NoError(t, h.get(policy(mesh.PeerAuthenticationKind), ns, "m-mesh"), "%s: mixed members: 8081 PERMISSIVE", step)
			}
			peersAndOperatorOn8081(t, accessReport(t, env, f), step, true)
			if reconciled && !proxies {
				noMeshTrace(t, h, ns, "m", step)
			}
		}
		walkRoll(t, h, f, "rev1", "rev2", func(i int, ip string) { saMember(t, env.Client, ns, "m", i, false, "rev2", "m", ip) }, check)
		noMeshTrace(t, h, ns, "m", "left")
		c := condition(t, h, f, v1alpha1.ConditionMeshReady)
		require.NotNil(t, c)
		assert.Equal(t, string(v1alpha1.ReasonLeftMesh), c.Reason)
		assert.Equal(t, "Left", f.Status.Mesh)
	})

	t.Run("the namespace leaves ambient: captured members keep their paths until istio-cni released the last", func(t *testing.T) {
		const ns = "ambleave"
		createNamespace(t, env.Client, ns)
		enroll(t, env.Client, ns, "ambient")
		ambientLabel(t, env.Client, ns, true)
		f := fleet(ns, "m")
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.startMembers(f, "127.42.6.%d", 1, func(i int, ip string) { meshMember(t, env.Client, ns, i, true, "rev1", "m", ip) })
		require.NoError(t, h.get(f, ns, "m"))
		require.Equal(t, "Ambient", f.Status.Mesh)
		check := func(step string) {
			t.Helper()
			peersAndOperatorOn8081(t, accessReport(t, env, f), step, false)
		}
		check("captured")
		// The mesh operator's teardown: its state labels go first (Istio's
		// label last), then istio-cni releases the members one at a time.
		unenroll(t, env.Client, ns)
		check("state labels gone")
		h.reconcile(f)
		check("state labels gone, reconciled")
		for i := range 3 {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, labels.IstioAmbientRedirection)
			require.NoError(t, env.Client.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("m-%d", i)}},
				client.RawPatch(types.MergePatchType, []byte(patch))))
			check(fmt.Sprintf("m-%d released", i))
			h.reconcile(f)
			check(fmt.Sprintf("m-%d released, reconciled", i))
		}
		ambientLabel(t, env.Client, ns, false)
		check("Istio's label gone")
		h.reconcile(f)
		check("Istio's label gone, reconciled")
		noMeshTrace(t, h, ns, "m", "the namespace left, every member released")
		require.NoError(t, h.get(f, ns, "m"))
		assert.Empty(t, f.Status.Mesh)
	})
}

// ambientLabel puts Istio's ambient label on the namespace, or takes it
// away, as the mesh operator does with its state labels.
func ambientLabel(t *testing.T, c client.Client, ns string, on bool) {
	t.Helper()
	v := `"ambient"`
	if !on {
		v = "null"
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, labels.IstioDataPlaneMode, v)
	require.NoError(t, c.Patch(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("mesh-operator")))
}

// playIsolation plays the mesh operator's namespace isolation for ns as its
// labels declare it now: a namespace-wide DENY for authenticated sources
// outside the namespace and its declared edges.
func playIsolation(t *testing.T, c client.Client, ns string) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Namespace{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: ns}, n))
	st, _ := contract.Parse(n.Labels)
	allowed := append([]string{ns}, st.Edges...)
	deny := istiopolicy.AuthorizationPolicy(istiopolicy.Object{Namespace: ns, Name: "mesh-isolation"}, nil, istiopolicy.Deny,
		istiopolicy.Rule{From: []istiopolicy.Source{{Principals: []string{"*"}, NotNamespaces: allowed}}})
	deny.SetOwnerReferences(nil)
	live := policy(mesh.AuthorizationPolicyKind)
	if err := c.Get(ctx, client.ObjectKeyFromObject(deny), live); err == nil {
		deny.SetResourceVersion(live.GetResourceVersion())
		require.NoError(t, c.Update(ctx, deny))
		return
	}
	require.NoError(t, c.Create(ctx, deny))
}

// TestDisabledWithdrawsEdgesAfterItsMembersLeft (issue 42, item 5): a fleet
// switched to mode disabled in an ambient namespace that something else
// keeps enrolled, under namespace isolation, keeps the edges it declared
// (the operator's namespace, its routing source) until its last member has
// left the mesh: the roll walks state by state, the mesh operator's
// isolation DENY played from the namespace's labels at each, and a member
// whose /state the operator cannot read is not healthy, as in a cluster.
func TestDisabledWithdrawsEdgesAfterItsMembersLeft(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	ctx := context.Background()
	const ns = "disiso"
	createNamespace(t, env.Client, ns)
	adminLabel(t, env.Client, ns, labels.MeshEnabled) // the namespace stays enrolled whatever the fleet asks
	enroll(t, env.Client, ns, "ambient")
	ambientLabel(t, env.Client, ns, true)
	createNamespace(t, env.Client, "edge")
	ambientLabel(t, env.Client, "edge", true) // the routing source is meshed: isolation judges its identity
	f := fleet(ns, "m")
	f.Spec.Routing = &v1alpha1.Routing{Hostnames: []string{"m.example.com"}, Ingress: &v1alpha1.IngressRouting{ClassName: "nginx"},
		Source: v1alpha1.RoutingSource{Namespace: "edge", PodLabels: map[string]v1alpha1.LabelValue{"app": "edge"}}}
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	servers := map[string]*stateServer{}
	for i, s := range h.startMembers(f, "127.42.7.%d", 1, func(i int, ip string) { meshMember(t, env.Client, ns, i, true, "rev1", "m", ip) }) {
		servers[fmt.Sprintf("m-%d", i)] = s
	}
	require.NoError(t, h.get(f, ns, "m"))
	require.Equal(t, "Ambient", f.Status.Mesh)
	edgeOperator, edgeRouting := labels.AllowFromPrefix+"fleet-system", labels.AllowFromPrefix+"edge"

	// check plays the mesh operator's isolation from the labels as they
	// stand, judges the operator's /state reads and the peers, and makes
	// each member's /state as healthy as the operator can read it.
	check := func(step string, _ bool) {
		t.Helper()
		playIsolation(t, env.Client, ns)
		rep := accessReport(t, env, f)
		for _, e := range rep.Ingress {
			if e.Port == names.AppPort && e.Caller.Class == access.ClassRoutingSource {
				assert.True(t, e.Allowed, "%s: routed traffic to %s refused: network %+v, istio %+v", step, e.Member, e.Network, e.Istio)
			}
			if e.Port == names.PeerPort && e.Caller.Class == access.ClassOperator && e.Caller.Meshed {
				assert.True(t, e.Allowed, "%s: the operator's /state read of %s refused: network %+v, istio %+v", step, e.Member, e.Network, e.Istio)
				if s := servers[e.Member]; s != nil {
					s.healthy.Store(e.Allowed)
				}
			}
		}
		peersAndOperatorOn8081(t, rep, step, false)
	}
	check("captured", true)

	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"mode":"disabled"}}}`))))
	h.reconcile(f)
	check("disabled, template changed", true)
	l := namespaceLabels(t, h, ns)
	assert.Equal(t, "true", l[edgeOperator], "members still captured: the operator's edge stays")
	assert.Equal(t, "true", l[edgeRouting], "members still captured: the routing source's edge stays")
	playStatefulSetRevisions(t, env.Client, ns, "m", "rev1", "rev2")
	walkRoll(t, h, f, "rev1", "rev2", func(i int, ip string) {
		// The replacement opts out of capture (istio.io/dataplane-mode: none).
		saMember(t, env.Client, ns, "m", i, false, "rev2", "m", ip)
	}, check)

	n := &corev1.Namespace{}
	require.NoError(t, h.get(n, "", ns))
	assert.Empty(t, contract.LabelsHeldBy(n, declarationManager(f)), "no member in the mesh any more: the fleet's edges are withdrawn")
	require.NoError(t, h.get(f, ns, "m"))
	assert.Empty(t, f.Status.Mesh)
}
