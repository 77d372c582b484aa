package enroll

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/golden"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/netpol"
	"github.com/ericdev/fleetmesh/shared/policy"
)

var testMesh = &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: types.UID("0000-mesh")}}

// TestPolicySetGolden pins the whole per-namespace set for each data plane,
// isolation level and mTLS mode in force: the namespace's labels (data plane
// and state), the PeerAuthentication, the isolation DENY and, for strict
// while STRICT only, the allow-nothing baseline.
func TestPolicySetGolden(t *testing.T) {
	owner := Owner(testMesh)
	for _, dp := range []v1alpha1.DataPlane{v1alpha1.DataPlaneAmbient, v1alpha1.DataPlaneSidecar} {
		for _, iso := range []v1alpha1.Isolation{v1alpha1.IsolationOff, v1alpha1.IsolationNamespace, v1alpha1.IsolationStrict} {
			for _, mode := range []string{contract.MTLSStrict, contract.MTLSPermissive} {
				t.Run(fmt.Sprintf("%s-%s-%s", dp, iso, mode), func(t *testing.T) {
					nsLabels := DataPlaneLabels(dp, "default")
					state, err := contract.Enrollment{DataPlane: contract.DataPlane(dp), MTLS: mode, Isolation: string(iso), ControlPlane: "istio-system"}.StateLabels()
					assert.NoError(t, err)
					for k, v := range state {
						nsLabels[k] = v
					}
					strictReady := ""
					if mode == contract.MTLSStrict {
						strictReady = "2026-01-02T03:04:05Z"
					}
					objs := []any{map[string]any{"namespaceLabels": nsLabels}}
					set := PolicySet(PolicyInputs{Namespace: "team-a", Isolation: iso, Mode: mode, StrictReady: strictReady,
						Allowed: AllowedSources("team-a", []string{"istio-system"}, []string{"fleet-system", "ingress"}), Owner: owner}).All()
					for _, u := range set {
						objs = append(objs, u)
					}
					wantLen := map[v1alpha1.Isolation]int{v1alpha1.IsolationOff: 1, v1alpha1.IsolationNamespace: 2, v1alpha1.IsolationStrict: 2}[iso]
					if iso == v1alpha1.IsolationStrict && mode == contract.MTLSStrict {
						wantLen = 3
					}
					assert.Len(t, set, wantLen, "the baseline exists only for strict while STRICT")
					golden.AssertYAML(t, fmt.Sprintf("policies-%s-%s-%s", dp, iso, mode), objs...)
				})
			}
		}
	}
	// A named revision selects its control plane with istio.io/rev.
	golden.AssertYAML(t, "namespace-labels-sidecar-revision", map[string]any{"namespaceLabels": DataPlaneLabels(v1alpha1.DataPlaneSidecar, "canary")})
}

func TestDecide(t *testing.T) {
	protected := Protected("istio-system", "mesh-system", "")
	assert.Equal(t, []string{"istio-system", "kube-node-lease", "kube-public", "kube-system", "mesh-system"}, protected)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		listed bool
		want   Decision
	}{
		{"a", map[string]string{labels.Mesh: labels.MeshEnabled}, false, Decision{Enroll: true, Reason: "label"}},
		{"a", map[string]string{labels.Mesh: labels.MeshEnabled}, true, Decision{Enroll: true, WriteRequest: true, Reason: "label"}},
		{"a", nil, true, Decision{Enroll: true, WriteRequest: true, Reason: "enrollNamespaces"}},
		{"a", map[string]string{labels.Mesh: labels.MeshDisabled}, true, Decision{Reason: "disabled", OptedOut: "core.navique.com/mesh=disabled", Asked: true}},
		{"a", map[string]string{labels.Mesh: labels.MeshDisabled}, false, Decision{Reason: "disabled", OptedOut: "core.navique.com/mesh=disabled"}},
		// issue 41 item 5: Istio's own opt-out labels win as disabled does.
		{"a", map[string]string{labels.Mesh: labels.MeshEnabled, labels.IstioInjection: "disabled"}, false,
			Decision{Reason: "opted out by istio-injection=disabled", OptedOut: "istio-injection=disabled", Asked: true}},
		{"a", map[string]string{labels.IstioDataPlaneMode: "none"}, true,
			Decision{Reason: "opted out by istio.io/dataplane-mode=none", OptedOut: "istio.io/dataplane-mode=none", Asked: true}},
		{"a", map[string]string{labels.IstioDataPlaneMode: "none"}, false,
			Decision{Reason: "opted out by istio.io/dataplane-mode=none", OptedOut: "istio.io/dataplane-mode=none"}},
		{"a", map[string]string{labels.Mesh: labels.MeshEnabled, labels.IstioInjection: "enabled"}, false, Decision{Enroll: true, Reason: "label"}},
		{"a", map[string]string{labels.Mesh: "yes"}, false, Decision{Reason: "not requested"}},
		{"a", nil, false, Decision{Reason: "not requested"}},
		{"kube-system", map[string]string{labels.Mesh: labels.MeshEnabled}, true, Decision{Reason: "protected"}},
		{"istio-system", nil, true, Decision{Reason: "protected"}},
		{"mesh-system", map[string]string{labels.Mesh: labels.MeshEnabled}, false, Decision{Reason: "protected"}},
	} {
		assert.Equal(t, tc.want, Decide(tc.name, tc.labels, tc.listed, protected), "%s %v listed=%v", tc.name, tc.labels, tc.listed)
	}
}

func TestDataPlaneLabels(t *testing.T) {
	assert.Equal(t, map[string]string{"istio.io/dataplane-mode": "ambient"}, DataPlaneLabels(v1alpha1.DataPlaneAmbient, "canary"))
	assert.Equal(t, map[string]string{"istio-injection": "enabled"}, DataPlaneLabels(v1alpha1.DataPlaneSidecar, "default"))
	assert.Equal(t, map[string]string{"istio-injection": "enabled"}, DataPlaneLabels(v1alpha1.DataPlaneSidecar, ""))
	assert.Equal(t, map[string]string{"istio.io/rev": "canary"}, DataPlaneLabels(v1alpha1.DataPlaneSidecar, "canary"))
}

func pod(name string, phase corev1.PodPhase, mutate func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: phase},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func TestWorkloadsReady(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	native := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: ProxyContainer, RestartPolicy: &always}}
	}
	classic := func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ProxyContainer})
	}
	plainInit := func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: ProxyContainer}} }
	captured := func(p *corev1.Pod) { p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"} }

	ok, _ := WorkloadsReady(v1alpha1.DataPlaneSidecar, nil)
	assert.True(t, ok, "no Pods: ready")
	ok, _ = WorkloadsReady(v1alpha1.DataPlaneSidecar, []corev1.Pod{pod("a", corev1.PodRunning, native), pod("b", corev1.PodRunning, classic),
		pod("done", corev1.PodSucceeded, nil), pod("crashed", corev1.PodFailed, nil)})
	assert.True(t, ok, "finished Pods do not count")
	ok, who := WorkloadsReady(v1alpha1.DataPlaneSidecar, []corev1.Pod{pod("a", corev1.PodRunning, native), pod("z", corev1.PodPending, nil)})
	assert.False(t, ok)
	assert.Equal(t, "z", who)
	ok, _ = WorkloadsReady(v1alpha1.DataPlaneSidecar, []corev1.Pod{pod("a", corev1.PodRunning, plainInit)})
	assert.False(t, ok, "an istio-proxy init container that is not a native sidecar is not a proxy")
	// Issue 15 item 5: a running sidecar speaks mTLS in either data plane,
	// so sidecar Pods do not stall an ambient namespace.
	ok, _ = WorkloadsReady(v1alpha1.DataPlaneAmbient, []corev1.Pod{pod("a", corev1.PodRunning, classic), pod("b", corev1.PodRunning, native)})
	assert.True(t, ok, "a sidecar is meshed in an ambient namespace too")
	ok, who = WorkloadsReady(v1alpha1.DataPlaneAmbient, []corev1.Pod{pod("a", corev1.PodRunning, native), pod("b", corev1.PodRunning, nil)})
	assert.False(t, ok, "neither a proxy nor ztunnel capture")
	assert.Equal(t, "b", who)
	ok, _ = WorkloadsReady(v1alpha1.DataPlaneSidecar, []corev1.Pod{pod("a", corev1.PodRunning, captured)})
	assert.False(t, ok, "without ztunnel a redirection mark carries nothing")
	ok, _ = WorkloadsReady(v1alpha1.DataPlaneAmbient, []corev1.Pod{pod("a", corev1.PodRunning, captured)})
	assert.True(t, ok)
}

// TestBlockersAgreeWithWorkloadsReady: Pods of several namespaces, taken
// one at a time in shuffled orders, give each namespace the verdict
// WorkloadsReady gives its own Pods, blocker included; namespaces not asked
// for are not kept, and one without Pods is ready.
func TestBlockersAgreeWithWorkloadsReady(t *testing.T) {
	captured := func(p *corev1.Pod) { p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"} }
	sidecar := func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ProxyContainer})
	}
	in := func(ns string, p corev1.Pod) corev1.Pod { p.Namespace = ns; return p }
	byNS := map[string][]corev1.Pod{
		"ready":   {pod("b", corev1.PodRunning, captured), pod("a", corev1.PodRunning, sidecar), pod("z", corev1.PodSucceeded, nil)},
		"held":    {pod("m", corev1.PodRunning, nil), pod("c", corev1.PodRunning, captured), pod("d", corev1.PodPending, nil), pod("x", corev1.PodRunning, nil)},
		"sidecar": {pod("k", corev1.PodRunning, captured), pod("j", corev1.PodRunning, sidecar)},
		"other":   {pod("a", corev1.PodRunning, nil)},
	}
	var all []corev1.Pod
	for ns, pods := range byNS {
		for _, p := range pods {
			all = append(all, in(ns, p))
		}
	}
	asked := []string{"ready", "held", "sidecar", "empty"}
	for _, dp := range []v1alpha1.DataPlane{v1alpha1.DataPlaneAmbient, v1alpha1.DataPlaneSidecar} {
		for seed := 0; seed < 20; seed++ {
			order := slices.Clone(all)
			r := rand.New(rand.NewPCG(uint64(seed), 1))
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			b := NewBlockers(asked)
			for i := range order {
				b.Add(dp, &order[i])
			}
			require.Len(t, b, len(asked), "only the namespaces asked for are kept")
			for _, ns := range asked {
				ok, who := WorkloadsReady(dp, byNS[ns])
				assert.Equal(t, who, b[ns], "%s, %s, order %d", dp, ns, seed)
				assert.Equal(t, ok, b[ns] == "", "%s, %s, order %d", dp, ns, seed)
			}
		}
	}
	// The table is not trivially all ready: the held namespace names its
	// first unfinished Pod without a proxy or capture (a pending one too).
	_, who := WorkloadsReady(v1alpha1.DataPlaneAmbient, byNS["held"])
	assert.Equal(t, "d", who)
}

func TestMTLSMode(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	until := metav1.NewTime(now.Add(time.Minute))
	past := metav1.NewTime(now.Add(-time.Minute))
	strict := v1alpha1.MTLS{Mode: v1alpha1.MTLSStrict}
	assert.Equal(t, MTLSDecision{contract.MTLSStrict, "Strict"}, MTLSMode(strict, now, true))
	assert.Equal(t, MTLSDecision{contract.MTLSPermissive, "AwaitingCutover"}, MTLSMode(strict, now, false))
	assert.Equal(t, MTLSDecision{contract.MTLSPermissive, "Configured"}, MTLSMode(v1alpha1.MTLS{Mode: v1alpha1.MTLSPermissive}, now, true))
	assert.Equal(t, MTLSDecision{contract.MTLSPermissive, "Maintenance"}, MTLSMode(v1alpha1.MTLS{Mode: v1alpha1.MTLSStrict, MaintenanceUntil: &until}, now, true))
	assert.Equal(t, MTLSDecision{contract.MTLSStrict, "Strict"}, MTLSMode(v1alpha1.MTLS{Mode: v1alpha1.MTLSStrict, MaintenanceUntil: &past}, now, true))
	open, left := Window(v1alpha1.MTLS{MaintenanceUntil: &until}, now)
	assert.True(t, open)
	assert.Equal(t, time.Minute, left)
	open, _ = Window(v1alpha1.MTLS{MaintenanceUntil: &until}, until.Time)
	assert.False(t, open, "the window closes at the deadline")
}

func TestBaselinePolicy(t *testing.T) {
	owner := Owner(testMesh)
	for _, iso := range []v1alpha1.Isolation{v1alpha1.IsolationOff, v1alpha1.IsolationNamespace} {
		for _, mode := range []string{contract.MTLSStrict, contract.MTLSPermissive} {
			assert.Nil(t, BaselinePolicy("a", iso, mode, owner), "%s %s", iso, mode)
		}
	}
	assert.Nil(t, BaselinePolicy("a", v1alpha1.IsolationStrict, contract.MTLSPermissive, owner), "never while PERMISSIVE: it would drop plaintext")
	assert.Nil(t, BaselinePolicy("a", v1alpha1.IsolationStrict, "", owner), "an unknown mode is not STRICT")
	b := BaselinePolicy("a", v1alpha1.IsolationStrict, contract.MTLSStrict, owner)
	require.NotNil(t, b)
	assert.Equal(t, BaselinePolicyName, b.GetName())
	assert.Equal(t, "a", b.GetNamespace())
	assert.Equal(t, map[string]any{"action": "ALLOW"}, b.Object["spec"], "an ALLOW without rules or selector: admits nothing, namespace-wide")
	assert.Equal(t, []metav1.OwnerReference{owner}, b.GetOwnerReferences())
	assert.Equal(t, ManagedBy, b.GetLabels()[labels.ManagedBy])
}

func TestIsolationPolicyShape(t *testing.T) {
	assert.Nil(t, IsolationPolicy("a", v1alpha1.IsolationOff, nil, Owner(testMesh)))
	assert.Equal(t, []string{"a", "edge", "istio-system"}, AllowedSources("a", []string{"istio-system", ""}, []string{"edge", "a"}))
	ap := IsolationPolicy("a", v1alpha1.IsolationNamespace, []string{"a"}, Owner(testMesh))
	assert.Equal(t, "DENY", ap.Object["spec"].(map[string]any)["action"], "never a namespace-wide ALLOW")
	ref := ap.GetOwnerReferences()[0]
	assert.Equal(t, "ServiceMesh", ref.Kind)
	assert.True(t, *ref.Controller)
	assert.True(t, Paused(&metav1.ObjectMeta{Annotations: map[string]string{labels.ReconcilePaused: "true"}}))
	assert.False(t, Paused(&metav1.ObjectMeta{Annotations: map[string]string{labels.ReconcilePaused: "false"}}))
}

func TestDecideMTLSRelaxesWhileNotReady(t *testing.T) {
	now := time.Now()
	until := metav1.NewTime(now.Add(time.Hour))
	strict := v1alpha1.MTLS{Mode: v1alpha1.MTLSStrict}
	window := v1alpha1.MTLS{Mode: v1alpha1.MTLSStrict, MaintenanceUntil: &until}
	permissive := v1alpha1.MTLS{Mode: v1alpha1.MTLSPermissive}
	for _, tc := range []struct {
		name string
		in   MTLSInputs
		want MTLSDecision
	}{
		{"not Ready, window open: relaxed", MTLSInputs{Spec: window, Now: now, Live: contract.MTLSStrict, CutOver: true}, MTLSDecision{contract.MTLSPermissive, "Maintenance"}},
		{"not Ready, mode permissive: relaxed", MTLSInputs{Spec: permissive, Now: now, Live: contract.MTLSStrict, CutOver: true}, MTLSDecision{contract.MTLSPermissive, "Configured"}},
		{"not Ready, STRICT stays STRICT", MTLSInputs{Spec: strict, Now: now, Live: contract.MTLSStrict, CutOver: true}, MTLSDecision{contract.MTLSStrict, "Strict"}},
		{"not Ready, PERMISSIVE is not tightened", MTLSInputs{Spec: strict, Now: now, Live: contract.MTLSPermissive, CutOver: true}, MTLSDecision{contract.MTLSPermissive, "AwaitingReady"}},
		{"Ready, PERMISSIVE is tightened", MTLSInputs{Spec: strict, Now: now, Ready: true, Live: contract.MTLSPermissive, CutOver: true}, MTLSDecision{contract.MTLSStrict, "Strict"}},
	} {
		assert.Equal(t, tc.want, DecideMTLS(tc.in), tc.name)
	}
}

func TestDecideMTLSMigrating(t *testing.T) {
	now := time.Now()
	strict := v1alpha1.MTLS{Mode: v1alpha1.MTLSStrict}
	for _, ready := range []bool{true, false} {
		assert.Equal(t, MTLSDecision{contract.MTLSPermissive, "Migrating"},
			DecideMTLS(MTLSInputs{Spec: strict, Now: now, Ready: ready, Live: contract.MTLSStrict, CutOver: true, Migrating: true}), "ready=%v", ready)
	}
	assert.Equal(t, v1alpha1.DataPlaneAmbient, AppliedDataPlane(map[string]string{labels.MeshDataPlane: "ambient"}, map[string]bool{labels.MeshDataPlane: true}))
	assert.Equal(t, v1alpha1.DataPlane(""), AppliedDataPlane(map[string]string{labels.MeshDataPlane: "ambient"}, nil), "a label the operator does not hold says nothing")
	assert.Equal(t, v1alpha1.DataPlane(""), AppliedDataPlane(map[string]string{labels.MeshDataPlane: "bogus"}, map[string]bool{labels.MeshDataPlane: true}))
}

// TestAcceptedEdges: the record is read as written; a PeerAuthentication cut
// over by a release that recorded no edges accepts the edges declared now,
// so an operator upgrade does not relax a STRICT namespace (seen in the
// upgrade e2e: STRICT -> PERMISSIVE for an unmeshed routing-source edge).
func TestAcceptedEdges(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "core.navique.com/v1alpha1", Kind: "ServiceMesh", Name: "cluster", UID: "u"}
	declared := []string{"edge-a", "edge-b"}
	legacy := PeerAuthentication("ns", contract.MTLSStrict, "2026-12-01T00:00:00Z", owner)
	ann := legacy.GetAnnotations()
	delete(ann, labels.MeshStrictEdges)
	legacy.SetAnnotations(ann)

	for name, c := range map[string]struct {
		pa   *unstructured.Unstructured
		want []string
	}{
		"no PeerAuthentication":               {nil, nil},
		"not cut over":                        {PeerAuthentication("ns", contract.MTLSPermissive, "", owner), nil},
		"cut over with no edge":               {PeerAuthentication("ns", contract.MTLSStrict, "2026-12-01T00:00:00Z", owner), nil},
		"cut over with one edge":              {PeerAuthentication("ns", contract.MTLSStrict, "2026-12-01T00:00:00Z", owner, "edge-a"), []string{"edge-a"}},
		"cut over by a release without edges": {legacy, declared},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, c.want, AcceptedEdges(c.pa, declared))
		})
	}
	assert.Equal(t, "", PeerAuthentication("ns", contract.MTLSStrict, "2026-12-01T00:00:00Z", owner).GetAnnotations()[labels.MeshStrictEdges],
		"a cut-over PeerAuthentication records its edges even when there are none")
}

func TestWithoutLeaving(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		accepted, declared, leaving []string
		kept                        []string
		first                       string
	}{
		{"nothing leaves", []string{"edge", "ops"}, []string{"edge", "ops"}, nil, []string{"edge", "ops"}, ""},
		{"an accepted edge leaves: accepted no more, and named", []string{"edge", "ops"}, []string{"edge", "ops"}, []string{"edge", "other"}, []string{"ops"}, "edge"},
		{"a leaving namespace that is not an edge is no concern", []string{"ops"}, []string{"ops"}, []string{"other"}, []string{"ops"}, ""},
		{"a declared edge not accepted yet that leaves is named too", nil, []string{"b", "a"}, []string{"b", "a"}, nil, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, first := WithoutLeaving(tc.accepted, tc.declared, tc.leaving)
			if !slices.Equal(kept, tc.kept) || first != tc.first {
				t.Fatalf("WithoutLeaving = %v, %q; want %v, %q", kept, first, tc.kept, tc.first)
			}
		})
	}
}

// TestEdgeHolderReleasedNamespace: a Pod still marked redirected in an edge
// namespace that no longer carries the ambient label is istio-cni's to
// release: it holds STRICT back like any plaintext Pod, unless the Pod asks
// for ambient itself.
func TestEdgeHolderReleasedNamespace(t *testing.T) {
	marked := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gw", Annotations: map[string]string{labels.IstioAmbientRedirection: "enabled"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	own := *marked.DeepCopy()
	own.Name, own.Labels = "own", map[string]string{labels.IstioDataPlaneMode: "ambient"}
	pods := map[string][]corev1.Pod{"edge": {marked}, "self": {own}}
	e, who := EdgeHolder(v1alpha1.DataPlaneAmbient, []string{"edge"}, pods, map[string]bool{"edge": true})
	if e != "" {
		t.Fatalf("an ambient edge namespace's captured Pod holds: %s %s", e, who)
	}
	if e, who = EdgeHolder(v1alpha1.DataPlaneAmbient, []string{"edge"}, pods, nil); e != "edge" || who != "gw" {
		t.Fatalf("released namespace: EdgeHolder = %q %q, want edge gw", e, who)
	}
	if e, _ = EdgeHolder(v1alpha1.DataPlaneAmbient, []string{"self"}, pods, nil); e != "" {
		t.Fatalf("a Pod that asks for ambient itself stays captured, got holder %q", e)
	}
	if marked.Annotations[labels.IstioAmbientRedirection] == "" {
		t.Fatal("EdgeHolder changed the caller's Pod")
	}
}

// TestPolicySetCarriesTheCutoverRecord: the set the controller applies
// records the accepted edges and a migration on the PeerAuthentication, so
// the truth tables judge what is applied, annotations included.
func TestPolicySetCarriesTheCutoverRecord(t *testing.T) {
	set := PolicySet(PolicyInputs{Namespace: "team-a", Isolation: v1alpha1.IsolationStrict, Mode: contract.MTLSPermissive,
		StrictReady: "2026-01-02T03:04:05Z", AcceptedEdges: []string{"ingress"}, MigratingFrom: "sidecar",
		Allowed: AllowedSources("team-a", []string{"istio-system"}, nil), Owner: Owner(testMesh)})
	ann := set.PeerAuthentication.GetAnnotations()
	assert.Equal(t, "ingress", ann[labels.MeshStrictEdges])
	assert.Equal(t, "sidecar", ann[labels.MeshMigratingFrom])
	assert.Nil(t, set.Baseline, "no baseline at PERMISSIVE")
	assert.NotNil(t, set.Isolation)
	assert.Len(t, set.All(), 2)
}

// TestForeignPeerAuthentication: Istio applies the oldest namespace-wide
// PeerAuthentication of a namespace (by creation time, then by name); a
// policy with a workload selector is not namespace-wide.
func TestForeignPeerAuthentication(t *testing.T) {
	at := func(name string, sec int, selector map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"mtls": map[string]any{"mode": "PERMISSIVE"}}}}
		if selector != nil {
			ml := map[string]any{}
			for k, v := range selector {
				ml[k] = v
			}
			u.Object["spec"].(map[string]any)["selector"] = map[string]any{"matchLabels": ml}
		}
		u.SetName(name)
		u.SetCreationTimestamp(metav1.NewTime(time.Unix(1_700_000_000+int64(sec), 0)))
		return u
	}
	ours := at(PeerAuthenticationName, 10, nil)
	for _, tc := range []struct {
		name   string
		ours   *unstructured.Unstructured
		others []*unstructured.Unstructured
		want   string
	}{
		{"none of others", ours, nil, ""},
		{"an older one of the user's", ours, []*unstructured.Unstructured{at("default", 5, nil)}, "default"},
		{"a newer one of the user's", ours, []*unstructured.Unstructured{at("default", 20, nil)}, ""},
		{"same second: the name decides (default < mesh-mtls)", ours, []*unstructured.Unstructured{at("default", 10, nil)}, "default"},
		{"same second: the name decides (zz > mesh-mtls)", ours, []*unstructured.Unstructured{at("zz", 10, nil)}, ""},
		{"a workload selector is not namespace-wide", ours, []*unstructured.Unstructured{at("old", 1, map[string]string{"app": "a"})}, ""},
		{"an empty selector is namespace-wide", ours, []*unstructured.Unstructured{at("old", 1, map[string]string{})}, "old"},
		{"the oldest of several", ours, []*unstructured.Unstructured{at("b", 3, nil), at("a", 2, nil)}, "a"},
		{"before mesh-mtls exists", nil, []*unstructured.Unstructured{at("default", 30, nil)}, "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ForeignPeerAuthentication(tc.ours, tc.others)
			name := ""
			if got != nil {
				name = got.GetName()
			}
			assert.Equal(t, tc.want, name)
		})
	}
}

// TestGateAmbient: a namespace whose NetworkPolicies block ambient, or
// cannot be read, is held out of the mesh until it is enrolled, and only
// reported once it is.
func TestGateAmbient(t *testing.T) {
	shop := netpol.Namespace{Name: "shop", Labels: map[string]string{labels.NamespaceName: "shop", labels.IstioDataPlaneMode: "ambient"}}
	webOnly := networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-only"}, Spec: networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: policy.TCPPorts(8080)}}}}
	unread := errors.New("forbidden")
	for _, tc := range []struct {
		name     string
		enrolled bool
		policies []networkingv1.NetworkPolicy
		err      error
		hold     bool
		blocked  string
		unread   string
	}{
		{name: "no policy"},
		{name: "blocked, not enrolled: held", policies: []networkingv1.NetworkPolicy{webOnly}, hold: true, blocked: "shop: NetworkPolicy shop/web-only refuses TCP 15008"},
		{name: "blocked, enrolled: reported only", enrolled: true, policies: []networkingv1.NetworkPolicy{webOnly}, blocked: "shop: NetworkPolicy shop/web-only refuses TCP 15008"},
		{name: "unreadable, not enrolled: held", err: unread, hold: true, unread: "shop (forbidden)"},
		{name: "unreadable, enrolled: reported only", enrolled: true, err: unread, unread: "shop (forbidden)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := GateAmbient(shop, tc.enrolled, tc.policies, tc.err, nil)
			assert.Equal(t, tc.hold, g.Hold)
			assert.Equal(t, tc.unread, g.Unreadable)
			if tc.blocked == "" {
				assert.Empty(t, g.Blocked)
			} else {
				assert.True(t, strings.HasPrefix(g.Blocked, tc.blocked), g.Blocked)
			}
		})
	}
}
