//go:build integration

package controller

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/policy"
)

var gvrNetworkPolicies = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}

// onlyPort8080 isolates every Pod of namespace for ingress and admits TCP
// 8080 from anyone: once ztunnel captures the Pods, meshed callers arrive on
// 15008 and the kubelet's probes from 169.254.7.127, and are dropped.
func onlyPort8080(namespace, name string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: policy.TCPPorts(8080)}},
		},
	}
}

// admitAmbient is the rule docs/servicemesh.md tells users to add: HBONE
// from meshed namespaces, and the kubelet's probe address.
func admitAmbient() []networkingv1.NetworkPolicyIngressRule {
	return []networkingv1.NetworkPolicyIngressRule{{
		Ports: policy.TCPPorts(policy.HBONEPort),
		From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{labels.IstioDataPlaneMode: "ambient"}}}},
	}, {
		From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: policy.AmbientProbeSourceCIDR}}},
	}}
}

// TestAmbientNetworkPolicyIntegration (issue 41 item 7): a namespace whose
// NetworkPolicies would drop HBONE and the ambient probe address is not
// enrolled in ambient, and the operator names the policy and what to add;
// adding the rule lets it enroll. A namespace already enrolled that gains
// such a policy is reported, never withdrawn. Judged at every state: the
// data-plane label never stands on a namespace whose policy refuses HBONE,
// unless it stood there before the policy did.
func TestAmbientNetworkPolicyIntegration(t *testing.T) {
	evs := &eventLog{r: events.NewFakeRecorder(1000)}
	b := startEnrollmentBed(t, "lic-ambient-netpol", evs.r)
	ctx, admin := context.Background(), b.admin
	readyIstiod(t, admin)
	cond := func(m *v1alpha1.ServiceMesh) *metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionAmbientNetworkPolicy))
		require.NotNil(t, c, "condition %s", v1alpha1.ConditionAmbientNetworkPolicy)
		return c
	}
	nsLabel := func(name, key string) string {
		t.Helper()
		ns := &corev1.Namespace{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: name}, ns))
		return ns.Labels[key]
	}
	dataPlane := func(name string) string { t.Helper(); return nsLabel(name, labels.IstioDataPlaneMode) }

	// billing has no NetworkPolicy; shop has one that admits only 8080.
	for _, n := range []string{"shop", "billing"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
	}
	web := onlyPort8080("shop", "web-only")
	require.NoError(t, admin.Create(ctx, web))

	log := startWorldLog(t, b.env.Config, append(transitionWatched, gvrNetworkPolicies)...)
	require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient}}))
	_, m := b.reconcile(t)
	require.Equal(t, PhaseReady, m.Status.Phase)
	assert.NotContains(t, m.Status.EnrolledNamespaces, "shop", "shop's policy would drop HBONE: it is held out of the mesh")
	assert.Empty(t, dataPlane("shop"), "shop's Pods are not captured")
	assert.Contains(t, m.Status.EnrolledNamespaces, "billing", "a namespace without NetworkPolicies enrolls as before")
	c := cond(m)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, string(v1alpha1.ReasonNetworkPolicyBlocksAmbient), c.Reason)
	assert.Contains(t, c.Message, "NetworkPolicy shop/web-only")
	assert.Contains(t, c.Message, "15008", "the message says what to admit")
	assert.Equal(t, 1, evs.count(string(v1alpha1.ReasonNetworkPolicyBlocksAmbient), "shop/web-only"), "a Warning event names the policy")
	// Held, shop is announced: a workload operator admitting HBONE only
	// where an enrollment is in effect (the fleet operator) opens it now,
	// before anything captures its Pods.
	assert.Equal(t, labels.MeshStateJoining, nsLabel("shop", labels.MeshState), "shop is announced for ambient")
	_, m = b.reconcile(t)
	assert.NotContains(t, m.Status.EnrolledNamespaces, "shop", "held on every pass")
	assert.Empty(t, dataPlane("shop"), "announced is not captured")
	assert.Equal(t, 1, evs.count(string(v1alpha1.ReasonNetworkPolicyBlocksAmbient), "shop/web-only"), "reported once, not every pass")

	// The user adds the documented rule: shop enrolls.
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(web), web))
	web.Spec.Ingress = append(web.Spec.Ingress, admitAmbient()...)
	require.NoError(t, admin.Update(ctx, web))
	_, m = b.reconcile(t)
	assert.Contains(t, m.Status.EnrolledNamespaces, "shop")
	assert.Equal(t, "ambient", dataPlane("shop"))
	assert.Equal(t, labels.MeshStateEnrolled, nsLabel("shop", labels.MeshState))
	c = cond(m)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, string(v1alpha1.ReasonNetworkPoliciesAdmitAmbient), c.Reason)

	// billing, already enrolled, gains a policy that refuses HBONE: it is
	// reported, and stays enrolled (withdrawing would change its traffic
	// twice; the user decides).
	require.NoError(t, admin.Create(ctx, onlyPort8080("billing", "lockdown")))
	_, m = b.reconcile(t)
	assert.Contains(t, m.Status.EnrolledNamespaces, "billing", "an enrolled namespace is never withdrawn for its policies")
	assert.Equal(t, "ambient", dataPlane("billing"))
	c = cond(m)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, string(v1alpha1.ReasonNetworkPolicyBlocksAmbient), c.Reason)
	assert.Contains(t, c.Message, "NetworkPolicy billing/lockdown")
	assert.NotContains(t, c.Message, "shop/web-only")
	assert.Equal(t, 1, evs.count(string(v1alpha1.ReasonNetworkPolicyBlocksAmbient), "billing/lockdown"))

	// The operator cannot read NetworkPolicies: cart, asking now, is not
	// enrolled (no NetworkPolicy read is not "no NetworkPolicy"); the
	// enrolled namespaces stay. Once it can read them again, cart enrolls.
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cart", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
	b.operatorThrough(t, refuseNetworkPolicyList)
	_, m = b.reconcile(t)
	assert.NotContains(t, m.Status.EnrolledNamespaces, "cart", "unread NetworkPolicies hold a namespace out")
	assert.Empty(t, dataPlane("cart"))
	assert.Subset(t, m.Status.EnrolledNamespaces, []string{"billing", "shop"}, "enrolled namespaces are held as they are")
	c = cond(m)
	assert.Equal(t, metav1.ConditionUnknown, c.Status)
	assert.Equal(t, string(v1alpha1.ReasonNetworkPolicyUnreadable), c.Reason)
	assert.Contains(t, c.Message, "cart (listing NetworkPolicies")
	failed := meta.FindStatusCondition(m.Status.Conditions, string(v1alpha1.ConditionEnrollmentFailed))
	require.NotNil(t, failed)
	assert.Equal(t, metav1.ConditionTrue, failed.Status, "a failed read fails the pass: it is retried soon")
	assert.Contains(t, failed.Message, "listing NetworkPolicies")
	b.operatorThrough(t)
	_, m = b.reconcile(t)
	assert.Contains(t, m.Status.EnrolledNamespaces, "cart")
	assert.Equal(t, "ambient", dataPlane("cart"))

	// At every state: shop's data-plane label stands only while its policy
	// admits HBONE (billing's label predates its policy).
	v := &violations{t: t}
	states := log.replay(func(w *world) {
		if w.nsLabels("shop")[labels.IstioDataPlaneMode] != "ambient" {
			return
		}
		if np := w.get(gvrNetworkPolicies, "shop", "web-only"); np != nil {
			rules, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
			if len(rules) < 2 {
				v.add(w, "shop is captured by ambient while NetworkPolicy web-only admits only 8080")
			}
		}
	})
	v.assertNone(states)
}

// refuseNetworkPolicyList answers the operator's NetworkPolicy lists with
// 403, as a ClusterRole without the rule would.
func refuseNetworkPolicyList(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/networkpolicies") {
			body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"networkpolicies is forbidden (injected)"}`
			return &http.Response{StatusCode: http.StatusForbidden, Header: http.Header{"Content-Type": []string{"application/json"}},
				Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
		}
		return rt.RoundTrip(req)
	})
}
