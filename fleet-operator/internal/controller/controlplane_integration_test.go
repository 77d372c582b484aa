//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/access"
	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// proxyMember creates member ordinal of fleet with a native istio-proxy
// injected by the istiod of controlPlane (its PROXY_CONFIG's
// discoveryAddress, as Istio's injection template writes it; "" writes
// none, a proxy whose control plane cannot be told), then plays the
// kubelet. Its finalizer keeps it terminating once deleted.
func proxyMember(t *testing.T, c client.Client, ns, fleet string, ordinal int, revision, ip, controlPlane string) {
	t.Helper()
	ctx := context.Background()
	p := memberPod(ns, fleet, ordinal, true)
	p.Labels[revisionLabel] = revision
	p.Finalizers = []string{heldFinalizer}
	if controlPlane != "" {
		cfg, err := json.Marshal(map[string]any{"discoveryAddress": "istiod." + controlPlane + ".svc:15012", "proxyMetadata": map[string]string{}})
		require.NoError(t, err)
		p.Spec.InitContainers[0].Env = []corev1.EnvVar{{Name: "PROXY_CONFIG", Value: string(cfg)}}
	}
	require.Eventually(t, func() bool { return c.Create(ctx, p) == nil }, 10*time.Second, 100*time.Millisecond, "creating %s", p.Name)
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}},
		PodIP:      ip, PodIPs: []corev1.PodIP{{IP: ip}},
	}
	require.NoError(t, c.Status().Update(ctx, p), "playing the kubelet for %s", p.Name)
}

// istiodReachable judges, with the live NetworkPolicies (cyclonus, through
// fleet-operator/access), whether member pod reaches istiod in
// controlPlane on TCP 15012.
func istiodReachable(t *testing.T, env *testenv.Env, f *v1alpha1.CelldFleet, pod, controlPlane string) bool {
	t.Helper()
	ctx := context.Background()
	apis := &served.Catalog{Discovery: discovery.NewDiscoveryClientForConfigOrDie(env.Config), MaxAge: served.Fresh}
	opts := access.Options{OperatorNamespace: "fleet-system", OperatorServiceAccount: "fleet-operator",
		OperatorPodLabels: map[string]string{"app.kubernetes.io/name": "fleet-operator"}}
	snap, err := access.Read(ctx, env.Client, apis, f.Namespace, f.Name, access.ReadOptions{Options: opts})
	require.NoError(t, err)
	// The report judges egress to the istiod of the fleet's spec: ask it
	// about the control plane this proxy was injected for.
	snap.Fleet.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{ControlPlaneNamespace: controlPlane}}
	rep, err := access.Compute(snap, opts)
	require.NoError(t, err)
	// A terminating Pod is not in the report (it serves nothing), but its
	// proxy still runs; the NetworkPolicy selects every member by the same
	// labels, so another member's verdict is its verdict.
	var any *access.EgressEntry
	for i, e := range rep.Egress {
		if e.Target.Class != access.TargetIstiod {
			continue
		}
		if e.Member == pod {
			return e.Allowed
		}
		any = &rep.Egress[i]
	}
	require.NotNil(t, any, "no istiod egress verdict for %s", pod)
	return any.Allowed
}

// proxyControlPlane is the control plane a played member's proxy was
// injected for, as proxyMember wrote it ("" when it does not say).
func proxyControlPlane(p *corev1.Pod) string {
	for _, c := range p.Spec.InitContainers {
		for _, e := range c.Env {
			var cfg struct{ DiscoveryAddress string }
			if e.Name == "PROXY_CONFIG" && json.Unmarshal([]byte(e.Value), &cfg) == nil {
				return strings.TrimSuffix(strings.TrimPrefix(cfg.DiscoveryAddress, "istiod."), ".svc:15012")
			}
		}
	}
	return ""
}

// TestControlPlaneMove (issue 42, item 8): moving istiod's namespace, in
// spec.mesh.istio.controlPlaneNamespace or through the namespace's
// mesh-control-plane label, restarts no member, so the running sidecars
// keep talking to the istiod that injected them: istiod egress stays open
// to both namespaces until no member (terminating ones included) runs a
// proxy that points at the old one, or whose control plane cannot be told.
func TestControlPlaneMove(t *testing.T) {
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.InstallCRDs(t, istioCRDFile(t))
	t.Run("spec.mesh.istio.controlPlaneNamespace", func(t *testing.T) { testControlPlaneMove(t, env, false) })
	t.Run("the namespace's mesh-control-plane label", func(t *testing.T) { testControlPlaneMove(t, env, true) })
}

func testControlPlaneMove(t *testing.T, env *testenv.Env, viaLabel bool) {
	ctx := context.Background()
	ns, ipBase := "cpspec", 10
	if viaLabel {
		ns, ipBase = "cplabel", 20
	}
	createNamespace(t, env.Client, ns)
	setControlPlaneLabel := func(cp string) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, labels.MeshControlPlane, cp)
		require.NoError(t, env.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner("mesh-operator")))
	}
	f := fleet(ns, "m")
	if viaLabel {
		enroll(t, env.Client, ns, "sidecar")
		setControlPlaneLabel("istio-old")
	} else {
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{ControlPlaneNamespace: "istio-old"}}
	}
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	ips := map[int]string{}
	h.startMembers(f, "127.42.8.%d", ipBase, func(i int, ip string) {
		ips[i] = ip
		proxyMember(t, env.Client, ns, "m", i, "rev1", ip, "istio-old")
	})
	require.NoError(t, h.get(f, ns, "m"))
	require.Equal(t, "Meshed", f.Status.Mesh)

	// check judges one observed state: every proxy, terminating ones
	// included, reaches the istiod it was injected for (one that does not
	// say reaches both); once the operator has looked, istio-old is
	// closed if no proxy may still need it.
	check := func(step string, reconciled bool) {
		t.Helper()
		pods := &corev1.PodList{}
		require.NoError(t, env.Client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(names.Selector("m"))))
		oldNeeded := false
		for _, p := range pods.Items {
			cps := []string{proxyControlPlane(&p)}
			if cps[0] == "" {
				cps = []string{"istio-old", "istio-new"}
			}
			for _, cp := range cps {
				oldNeeded = oldNeeded || cp == "istio-old"
				assert.True(t, istiodReachable(t, env, f, p.Name, cp), "%s: %s's proxy lost istiod in %s", step, p.Name, cp)
			}
		}
		if reconciled && !oldNeeded {
			np := &networkingv1.NetworkPolicy{}
			require.NoError(t, h.get(np, ns, "m"))
			assert.False(t, egressToNamespace(np, "istio-old"), "%s: no proxy points at istio-old any more: closed", step)
			assert.True(t, egressToNamespace(np, "istio-new"), "%s: the new control plane is open", step)
		}
	}
	check("meshed", true)

	if viaLabel {
		setControlPlaneLabel("istio-new")
	} else {
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"istio":{"controlPlaneNamespace":"istio-new"}}}}`))))
	}
	check("moved, not reconciled", false)
	h.reconcile(f)
	check("moved", true)
	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, ns, "m"))
	assert.Equal(t, int64(1), sts.Generation, "the move restarts no member")

	// The members restart by themselves, one at a time (a node drained),
	// and their replacements are injected by the new control plane; one
	// replacement's proxy first does not say where it points.
	restart := func(i int, cp string) {
		t.Helper()
		name := fmt.Sprintf("m-%d", i)
		require.NoError(t, env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}))
		check(name+" terminating", false)
		h.reconcile(f)
		check(name+" terminating", true)
		releaseMember(t, env.Client, ns, name)
		require.Eventually(t, func() bool { return apierrors.IsNotFound(h.get(&corev1.Pod{}, ns, name)) }, 10*time.Second, 50*time.Millisecond)
		check(name+" gone", false)
		proxyMember(t, env.Client, ns, "m", i, "rev1", ips[i], cp)
		check(name+" replaced", false)
		h.reconcile(f)
		check(name+" replaced", true)
	}
	restart(0, "istio-new")
	restart(1, "istio-new")
	restart(2, "")
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, h.get(np, ns, "m"))
	assert.True(t, egressToNamespace(np, "istio-old"), "a proxy that does not say where it points keeps the old control plane open")
	restart(2, "istio-new")
	require.NoError(t, h.get(np, ns, "m"))
	assert.False(t, egressToNamespace(np, "istio-old"), "every proxy points at istio-new: the old one is closed")
}
