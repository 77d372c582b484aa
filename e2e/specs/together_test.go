//go:build e2e

package specs

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/sailfake"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

const (
	togetherNS = "e2e-together"
	edgeNS     = "e2e-edge"
	// foreignNS is enrolled too but declared by nobody; plainNS is outside
	// the mesh.
	foreignNS = "e2e-foreign"
	plainNS   = "e2e-plain"
	// autoNS holds a fleet in the default mode auto, created before the
	// ServiceMesh; optoutNS is labelled core.navique.com/mesh=disabled by
	// an admin and holds a fleet in each asking mode.
	autoNS   = "e2e-auto"
	optoutNS = "e2e-optout"
)

// TestOperatorsTogether runs both operators on one cluster, meeting only on
// namespace labels: a licensed ServiceMesh (ambient, namespace isolation)
// enrolls a namespace whose fleet asks for the mesh; the fleet adapts
// (HBONE, its own L4 AuthorizationPolicy) and declares the edges it needs
// (the fleet operator's namespace for /state, the routing source); the mesh
// operator's isolation admits exactly those. Deleting the ServiceMesh returns
// the fleet to its no-mesh form and leaves no label of either operator.
func TestOperatorsTogether(t *testing.T) {
	ctx := context.Background()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	// The Sail API, played by the test bed (no container runtime here).
	stopSail, err := sailfake.Serve(ctx, bed.Cluster.REST, k8s, root)
	require.NoError(t, err)
	defer stopSail()

	for _, ns := range []string{togetherNS, edgeNS, foreignNS, plainNS} {
		l := map[string]string{"team": "payments"}
		if ns == edgeNS || ns == foreignNS {
			l["core.navique.com/mesh"] = "enabled" // enrolled by hand
		}
		require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: l}}))
	}
	// An admin keeps optoutNS out of the mesh before any fleet exists there.
	optout := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: optoutNS, Labels: map[string]string{"core.navique.com/mesh": "disabled"}}}
	require.NoError(t, k8s.Create(ctx, optout))
	optoutWrites := watchNamespaceWrites(t, optoutNS, optout.ResourceVersion)
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: autoNS}}))
	ledger := persistentFleet(autoNS, "ledger") // no spec.mesh: auto
	ledger.Spec.Replicas = ptr.To[int32](1)
	keepAuto, keepEnabled := persistentFleet(optoutNS, "keep-auto"), persistentFleet(optoutNS, "keep-enabled")
	keepAuto.Spec.Replicas, keepEnabled.Spec.Replicas = ptr.To[int32](1), ptr.To[int32](1)
	keepEnabled.Spec.Mesh = &fleetv1.Mesh{Mode: fleetv1.MeshEnabled}
	for _, extra := range []*fleetv1.CelldFleet{ledger, keepAuto, keepEnabled} {
		require.NoError(t, k8s.Create(ctx, extra))
	}
	f := persistentFleet(togetherNS, "vault")
	f.Spec.Mesh = &fleetv1.Mesh{Mode: fleetv1.MeshEnabled}
	f.Spec.Routing = &fleetv1.Routing{
		Hostnames: []string{"vault.example.com"},
		Ingress:   &fleetv1.IngressRouting{ClassName: "nginx"},
		Source:    fleetv1.RoutingSource{Namespace: edgeNS, PodLabels: map[string]fleetv1.LabelValue{"app": "edge-proxy"}},
	}
	require.NoError(t, k8s.Create(ctx, f))
	// A fleet that serves before any mesh exists: the mesh must join it
	// without breaking it, and leave it running.
	waitFleet(t, f, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
		c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionMeshReady))
		ready := meta.IsStatusConditionTrue(f.Status.Conditions, string(fleetv1.ConditionReady))
		return ready && c != nil && c.Reason == string(fleetv1.ReasonAwaitingEnrollment), fmt.Sprintf("ready=%t mesh %+v", ready, c)
	})
	assert.Equal(t, "enabled", nsLabels(t, togetherNS)["core.navique.com/mesh"], "the fleet asks for enrollment")
	// auto asks too, and says nothing while no mesh answers.
	waitFleet(t, ledger, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
		c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionMeshReady))
		ready := meta.IsStatusConditionTrue(f.Status.Conditions, string(fleetv1.ConditionReady))
		return ready && c == nil, fmt.Sprintf("ready=%t mesh %+v", ready, c)
	})
	assert.Equal(t, "enabled", nsLabels(t, autoNS)["core.navique.com/mesh"], "an auto fleet asks for enrollment")
	ledgerUIDs := podUIDs(t, ledger)
	for _, kf := range []*fleetv1.CelldFleet{keepAuto, keepEnabled} {
		waitFleet(t, kf, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
			c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionMeshReady))
			ready := meta.IsStatusConditionTrue(f.Status.Conditions, string(fleetv1.ConditionReady))
			return ready && c != nil && c.Reason == string(fleetv1.ReasonNamespaceOptedOut), fmt.Sprintf("ready=%t mesh %+v", ready, c)
		})
	}

	sm := &meshv1.ServiceMesh{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: meshv1.ServiceMeshSpec{Mode: meshv1.ModeManaged, Provider: meshv1.ProviderAuto, DataPlane: meshv1.DataPlaneAmbient,
			Isolation: meshv1.IsolationNamespace, MTLS: meshv1.MTLS{Mode: meshv1.MTLSStrict}},
	}
	require.NoError(t, k8s.Create(ctx, sm))

	t.Run("the mesh enrolls the namespace and the fleet adapts", func(t *testing.T) {
		waitTrue(t, 3*time.Minute, func() (bool, string) {
			l := nsLabels(t, togetherNS)
			return l["core.navique.com/mesh-state"] == "enrolled", fmt.Sprintf("labels %v; mesh %s", l, meshSummary(t))
		})
		waitFleet(t, f, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
			return f.Status.Mesh == "Ambient", fmt.Sprintf("mesh=%q", f.Status.Mesh)
		})
		l := nsLabels(t, togetherNS)
		assert.Equal(t, "ambient", l["istio.io/dataplane-mode"])
		assert.Equal(t, "true", l["allow-from.core.navique.com/fleet-system"], "edge for the operator's /state reads")
		assert.Equal(t, "true", l["allow-from.core.navique.com/"+edgeNS], "edge for the routing source")

		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: togetherNS, Name: "vault"}, np))
		assert.ElementsMatch(t, []int{8080, 15008, 8081, 15008, 8081}, policyPorts(np), "HBONE from exactly the sources already admitted, and the ambient probe address on the probed port")
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: togetherNS, Name: "vault-routing"}, np))
		assert.ElementsMatch(t, []int{8080, 15008}, policyPorts(np))
		ap := meshObject(f, "AuthorizationPolicy")
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(ap), ap))
		// (The namespace may still be PERMISSIVE here, awaiting its cutover,
		// so plaintext may still reach 8081 through the fleet's relaxing
		// PeerAuthentication; no other identity may.)
		assert.True(t, peerPortIdentitiesOnly(ap), "8081 only from the fleet's and the operator's identities")

		// The mesh operator's isolation admits the declared edges and nothing wider.
		waitTrue(t, time.Minute, func() (bool, string) {
			not, err := denyNotNamespaces(t, togetherNS)
			if err != nil {
				return false, err.Error()
			}
			return contains(not, togetherNS) && contains(not, "fleet-system") && contains(not, edgeNS), fmt.Sprintf("notNamespaces %v", not)
		})
		not, _ := denyNotNamespaces(t, togetherNS)
		assert.NotContains(t, not, "e2e-fleet", "an undeclared namespace stays denied")
	})

	t.Run("an auto fleet that predates the mesh joins without a restart; the admin's opt-out holds", func(t *testing.T) {
		waitTrue(t, 3*time.Minute, func() (bool, string) {
			l := nsLabels(t, autoNS)
			return l["core.navique.com/mesh-state"] == "enrolled", fmt.Sprintf("labels %v; mesh %s", l, meshSummary(t))
		})
		waitFleet(t, ledger, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
			return f.Status.Mesh == "Ambient", fmt.Sprintf("mesh=%q", f.Status.Mesh)
		})
		assert.Equal(t, ledgerUIDs, podUIDs(t, ledger), "ambient: joining restarts nothing")
		l := nsLabels(t, optoutNS)
		assert.Equal(t, "disabled", l["core.navique.com/mesh"], "no writer replaced the admin's disabled")
		for k := range l {
			assert.False(t, k != "core.navique.com/mesh" && (strings.Contains(k, "core.navique.com") || strings.HasPrefix(k, "istio.io/")),
				"label %s on the opted-out namespace", k)
		}
		for _, kf := range []*fleetv1.CelldFleet{keepAuto, keepEnabled} {
			c := meta.FindStatusCondition(getFleet(t, kf).Status.Conditions, string(fleetv1.ConditionMeshReady))
			if assert.NotNil(t, c) {
				assert.Equal(t, string(fleetv1.ReasonNamespaceOptedOut), c.Reason, "%s", kf.Name)
			}
		}
	})

	t.Run("namespace labels, fleet policies and mesh policies together admit exactly the fleet's callers", func(t *testing.T) {
		// Play istio-cni: it marks each captured Pod once ztunnel redirects
		// it, which is the mesh operator's signal to cut over to STRICT.
		for _, p := range append(memberPods(t, f), memberPods(t, ledger)...) {
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"ambient.istio.io/redirection":"enabled"}}}`))
			require.NoError(t, k8s.Patch(ctx, &p, patch))
		}
		for _, ns := range []string{togetherNS, autoNS} {
			waitTrue(t, 2*time.Minute, func() (bool, string) {
				l := nsLabels(t, ns)
				return l["core.navique.com/mesh-mtls"] == "strict", fmt.Sprintf("%s labels %v; mesh %s", ns, l, meshSummary(t))
			})
		}

		pods := memberPods(t, f)
		require.Len(t, pods, 3)
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		dst, peer := &pods[0], pods[1]
		no := false
		member := caller{name: peer.Name, namespace: togetherNS, labels: peer.Labels, serviceAccount: peer.Spec.ServiceAccountName, meshed: true}
		// The fleet operator as its chart deploys it into a STRICT mesh: its
		// Pods carry the chart's labels and an Istio sidecar (podLabels
		// sidecar.istio.io/inject, docs/install.md), so it has an identity.
		operator := caller{name: "fleet-operator-5d8c9", namespace: harness.FleetNamespace, serviceAccount: argValue(bed.Fleet.Args, "--operator-service-account"), meshed: true,
			labels: map[string]string{"app.kubernetes.io/name": "fleet-operator", "app.kubernetes.io/instance": "fleet-operator"}}
		neighbour := caller{name: "prometheus-0", namespace: harness.FleetNamespace, labels: map[string]string{"app": "prometheus"}, serviceAccount: "prometheus", meshed: true}
		edgeProxy := caller{name: "edge-proxy-7c9", namespace: edgeNS, labels: map[string]string{"app": "edge-proxy"}, serviceAccount: "edge-proxy", meshed: true}
		edgeOther := caller{name: "batch-1", namespace: edgeNS, labels: map[string]string{"app": "batch"}, serviceAccount: "default", meshed: true}
		appClient := caller{name: "web-1", namespace: togetherNS, labels: map[string]string{"app": "web", "celld.eric.dev/client-of": "vault"}, serviceAccount: "web", meshed: true}
		unlabelled := caller{name: "batch-2", namespace: togetherNS, labels: map[string]string{"app": "batch"}, serviceAccount: "default", meshed: true}
		optedOut := caller{name: "legacy-1", namespace: togetherNS, serviceAccount: "legacy", meshed: false,
			labels: map[string]string{"celld.eric.dev/client-of": "vault", "istio.io/dataplane-mode": "none"}}
		// Callers elsewhere wearing every label the fleet admits.
		lookalike := map[string]string{"app": "edge-proxy", "celld.eric.dev/client-of": "vault", "app.kubernetes.io/name": "fleet-operator"}
		foreign := caller{name: "shop-1", namespace: foreignNS, labels: lookalike, serviceAccount: "fleet-operator", meshed: true}
		plaintext := caller{name: "legacy-2", namespace: plainNS, labels: lookalike, serviceAccount: "default", meshed: false}

		rows := []flowRow{
			{src: member, port: 8081, want: true, why: "peers on 8081"},
			{src: member, port: 8080, want: false, why: "members are not clients of their own fleet"},
			{src: operator, port: 8081, want: true, why: "the fleet operator's /state reads (declared edge)"},
			{src: operator, port: 8080, want: false, why: "the operator only reads /state"},
			{src: neighbour, port: 8081, want: false, why: "other Pods of the operator's namespace"},
			{src: edgeProxy, port: 8080, want: true, why: "the routing source (declared edge) on the application port"},
			{src: edgeProxy, port: 8081, want: false, why: "the routing source never reaches the peer port"},
			{src: edgeOther, port: 8080, want: false, why: "only the routing source's Pods of that namespace"},
			{src: appClient, port: 8080, want: true, why: "labelled same-namespace client"},
			{src: appClient, port: 8081, want: false, why: "clients never reach the peer port"},
			{src: unlabelled, port: 8080, want: false, why: "same namespace but not labelled a client"},
			{src: optedOut, port: 8080, want: false, why: "a labelled client outside the mesh speaks plaintext, which STRICT refuses"},
			{src: foreign, port: 8080, want: false, istioAlone: &no, why: "an undeclared namespace, even with every label: isolation denies it by itself"},
			{src: foreign, port: 8081, want: false, istioAlone: &no, why: "an undeclared namespace on the peer port"},
			{src: plaintext, port: 8080, want: false, istioAlone: &no, why: "plaintext from outside the mesh"},
		}
		checkTable(t, dst, true, rows)
		// The same rows from the plugin's library (kubectl celld access).
		checkAccessReport(t, f, dst, rows)

		// The auto fleet that predates the mesh is in it: its labelled
		// client reaches it over mTLS; isolation and STRICT hold there too.
		ledgerPods := memberPods(t, ledger)
		require.Len(t, ledgerPods, 1)
		ledgerClient := caller{name: "books-1", namespace: autoNS, labels: map[string]string{"celld.eric.dev/client-of": "ledger"}, serviceAccount: "books", meshed: true}
		ledgerPlain := caller{name: "books-2", namespace: autoNS, labels: map[string]string{"celld.eric.dev/client-of": "ledger", "istio.io/dataplane-mode": "none"}, serviceAccount: "books", meshed: false}
		checkTable(t, &ledgerPods[0], true, []flowRow{
			{src: ledgerClient, port: 8080, want: true, why: "auto fleet, joined: its labelled client over the mesh"},
			{src: ledgerPlain, port: 8080, want: false, why: "auto fleet, joined: a plaintext client is refused by STRICT"},
			{src: foreign, port: 8080, want: false, istioAlone: &no, why: "auto fleet, joined: isolation denies an undeclared namespace by itself"},
		})
		// The opted-out namespace is outside the mesh: no STRICT, no
		// isolation, only the fleet NetworkPolicy, as the fleet seed has it.
		keepPods := memberPods(t, keepAuto)
		require.Len(t, keepPods, 1)
		keepClient := caller{name: "report-1", namespace: optoutNS, labels: map[string]string{"celld.eric.dev/client-of": "keep-auto"}, serviceAccount: "report", meshed: false}
		keepOther := caller{name: "report-2", namespace: optoutNS, labels: map[string]string{"app": "report"}, serviceAccount: "report", meshed: false}
		checkTable(t, &keepPods[0], false, []flowRow{
			{src: keepClient, port: 8080, want: true, why: "opted-out namespace: a labelled plaintext client, as without a mesh"},
			{src: keepOther, port: 8080, want: false, why: "opted-out namespace: the NetworkPolicy still admits only labelled clients"},
			{src: foreign, port: 8080, want: false, why: "opted-out namespace: the NetworkPolicy denies other namespaces"},
		})
	})

	t.Run("isolation strict: each fleet's 8080 admits only its wiring graph, judged at every recorded state", func(t *testing.T) {
		// The wiring graph in Pods: a client of vault and the routing
		// source's proxy, each under a ServiceAccount of its own, and an
		// unlabelled Pod of the same namespace.
		for _, sa := range []struct{ ns, name string }{{togetherNS, "web"}, {edgeNS, "edge-proxy"}, {togetherNS, "batch"}} {
			require.NoError(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: sa.ns, Name: sa.name}}))
		}
		for _, p := range []*corev1.Pod{
			graphPod(togetherNS, "web-1", "web", map[string]string{"app": "web", "celld.eric.dev/client-of": "vault"}),
			graphPod(edgeNS, "edge-proxy-1", "edge-proxy", map[string]string{"app": "edge-proxy"}),
			graphPod(togetherNS, "batch-2", "batch", map[string]string{"app": "batch"}),
		} {
			// Meshed callers: played istio-cni marks them redirected, so
			// the mesh operator's STRICT is not held back by them.
			p.Annotations = map[string]string{"ambient.istio.io/redirection": "enabled"}
			require.NoError(t, k8s.Create(ctx, p))
		}
		pods := memberPods(t, f)
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		dst, peer := &pods[0], pods[1]
		yes, no := true, false
		member := caller{name: peer.Name, namespace: togetherNS, labels: peer.Labels, serviceAccount: peer.Spec.ServiceAccountName, meshed: true}
		operator := caller{name: "fleet-operator-5d8c9", namespace: harness.FleetNamespace, serviceAccount: argValue(bed.Fleet.Args, "--operator-service-account"), meshed: true,
			labels: map[string]string{"app.kubernetes.io/name": "fleet-operator", "app.kubernetes.io/instance": "fleet-operator"}}
		wired := caller{name: "web-1", namespace: togetherNS, labels: map[string]string{"app": "web", "celld.eric.dev/client-of": "vault"}, serviceAccount: "web", meshed: true}
		unlabelled := caller{name: "batch-2", namespace: togetherNS, labels: map[string]string{"app": "batch"}, serviceAccount: "batch", meshed: true}
		source := caller{name: "edge-proxy-1", namespace: edgeNS, labels: map[string]string{"app": "edge-proxy"}, serviceAccount: "edge-proxy", meshed: true}
		// A member of another fleet of the namespace, by its labels and identity.
		otherPeer := caller{name: "other-0", namespace: togetherNS, serviceAccount: "other", meshed: true,
			labels: map[string]string{"app.kubernetes.io/name": "celld", "app.kubernetes.io/instance": "other", "celld.eric.dev/fleet": "other"}}
		// What must hold at every state of the switch: the graph's callers
		// are never cut off, the peer port never widens.
		kept := []flowRow{
			{src: wired, port: 8080, want: true, why: "wired client"},
			{src: source, port: 8080, want: true, why: "routing source"},
			{src: member, port: 8081, want: true, why: "peer"},
			{src: operator, port: 8081, want: true, why: "operator"},
			{src: wired, port: 8081, want: false, why: "a client never reaches the peer port"},
			{src: otherPeer, port: 8081, want: false, why: "a peer of another fleet never reaches the peer port"},
		}
		rec := startRecorder(t, gvrNamespaces, gvrPods, gvrNetpols, gvrPAs, gvrAPs)
		require.NoError(t, k8s.Patch(ctx, &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"isolation":"strict"}}`))))
		waitTrue(t, 2*time.Minute, func() (bool, string) {
			l := nsLabels(t, togetherNS)
			return l["core.navique.com/mesh-isolation"] == "strict", fmt.Sprintf("labels %v; mesh %s", l, meshSummary(t))
		})
		ap := meshObject(f, "AuthorizationPolicy")
		waitTrue(t, time.Minute, func() (bool, string) {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(ap), ap); err != nil {
				return false, err.Error()
			}
			return strings.Contains(fmt.Sprint(ap.Object["spec"]), "sa/web"), fmt.Sprintf("%s: %v", ap.GetName(), ap.Object["spec"])
		})
		states := rec.replay(func(s *snapshot) {
			d := s.members(togetherNS, "vault")
			if len(d) == 0 {
				return
			}
			for _, r := range kept {
				if v := s.judge(r.src, &d[0], r.port, true, true); v.allowed() != r.want {
					t.Errorf("rv %d: %s -> :%d %v, want %v (%s): %s", s.rv, r.src, r.port, v.allowed(), r.want, r.why, v.why)
				}
			}
		})
		t.Logf("judged %d recorded states of the switch to isolation strict", states)

		checkTable(t, dst, true, []flowRow{
			{src: wired, port: 8080, want: true, istioAlone: &yes, why: "strict: the wired client's identity"},
			{src: unlabelled, port: 8080, want: false, istioAlone: &no, why: "strict: an unlabelled Pod of the same namespace, refused by the fleet's own ALLOW whatever the NetworkPolicy"},
			{src: source, port: 8080, want: true, istioAlone: &yes, why: "strict: the routing source's identity"},
			{src: otherPeer, port: 8080, want: false, istioAlone: &no, why: "strict: a peer of another fleet"},
			{src: otherPeer, port: 8081, want: false, istioAlone: &no, why: "strict: a peer of another fleet on the peer port"},
			{src: member, port: 8081, want: true, why: "strict: peers"},
			{src: operator, port: 8081, want: true, why: "strict: the operator's /state reads"},
			{src: operator, port: 8080, want: false, istioAlone: &no, why: "strict: the operator is no client"},
		})

		// A client that goes is no longer admitted.
		require.NoError(t, k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: togetherNS, Name: "web-1"}}, client.GracePeriodSeconds(0)))
		waitTrue(t, time.Minute, func() (bool, string) {
			v := judge(t, wired, dst, 8080, true)
			return !v.istio, v.why
		})
	})

	t.Run("deleting the ServiceMesh: fleet keeps running in its no-mesh form, no label left behind", func(t *testing.T) {
		before := podUIDs(t, f)
		require.NoError(t, k8s.Delete(ctx, sm))
		// Play istio-cni again: once the namespace has left ambient it stops
		// redirecting the Pods. Until then the mesh operator keeps ZTunnel
		// and IstioCNI (WaitingForCNIRelease).
		waitTrue(t, time.Minute, func() (bool, string) {
			l := nsLabels(t, togetherNS)
			return l["istio.io/dataplane-mode"] == "", fmt.Sprintf("labels %v; mesh %s", l, meshSummary(t))
		})
		for _, p := range memberPods(t, f) {
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"ambient.istio.io/redirection":null}}}`))
			require.NoError(t, k8s.Patch(ctx, &p, patch))
		}
		waitTrue(t, 3*time.Minute, func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Name: "cluster"}, &meshv1.ServiceMesh{})
			return client.IgnoreNotFound(err) == nil && err != nil, "ServiceMesh still there: " + meshSummary(t)
		})
		waitFleet(t, f, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
			c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionMeshReady))
			return f.Status.Mesh == "" && c != nil && c.Reason == string(fleetv1.ReasonAwaitingEnrollment), fmt.Sprintf("mesh=%q %+v", f.Status.Mesh, c)
		})
		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: togetherNS, Name: "vault"}, np))
		assert.ElementsMatch(t, []int{8080, 8081}, policyPorts(np), "no enrollment in effect, every member released: HBONE and the probe address closed")
		assert.False(t, exists(t, meshAP(f)), "no enrollment in effect: no Istio object (mode enabled still asks)")
		assert.False(t, exists(t, meshPA(f)), "no enrollment in effect: no PeerAuthentication")
		for k := range nsLabels(t, togetherNS) {
			if k == "core.navique.com/mesh" || strings.HasPrefix(k, "allow-from.core.navique.com/") {
				continue // the fleet's own request and its edges: mode enabled still asks
			}
			assert.False(t, strings.Contains(k, "core.navique.com") || strings.HasPrefix(k, "istio.io/"), "label %s left behind", k)
		}
		for _, ns := range []string{edgeNS, foreignNS} {
			for k := range nsLabels(t, ns) {
				assert.True(t, k == "core.navique.com/mesh" || !(strings.Contains(k, "core.navique.com") || strings.HasPrefix(k, "istio.io/")),
					"label %s left behind on %s (only the hand-set request stays)", k, ns)
			}
		}
		assert.Equal(t, "payments", nsLabels(t, togetherNS)["team"], "user labels untouched")
		assert.Equal(t, before, podUIDs(t, f), "members kept running")
		assert.True(t, meta.IsStatusConditionTrue(getFleet(t, f).Status.Conditions, string(fleetv1.ConditionReady)), "still Ready after the mesh left")

		for k := range nsLabels(t, autoNS) {
			if k == "core.navique.com/mesh" || strings.HasPrefix(k, "allow-from.core.navique.com/") {
				continue // the auto fleet still asks, with its edges: inert without a mesh
			}
			assert.False(t, strings.Contains(k, "core.navique.com") || strings.HasPrefix(k, "istio.io/"), "label %s left behind on %s", k, autoNS)
		}
		assert.Equal(t, ledgerUIDs, podUIDs(t, ledger), "the auto fleet's members kept running through join and leave")

		require.NoError(t, k8s.Delete(ctx, f))
		require.NoError(t, k8s.Delete(ctx, ledger))
		for _, ns := range []string{togetherNS, autoNS} {
			waitTrue(t, time.Minute, func() (bool, string) {
				_, has := nsLabels(t, ns)["core.navique.com/mesh"]
				return !has, "the enrollment request outlives its fleet in " + ns
			})
		}
		// The admin's namespace was never written by either operator, from
		// its creation to the end: no flapping, not even a withdrawal.
		assert.Empty(t, optoutWrites.stop(), "writes to %s", optoutNS)
		require.NoError(t, k8s.Delete(ctx, keepAuto))
		require.NoError(t, k8s.Delete(ctx, keepEnabled))
	})
}

// namespaceWrites records every change to one namespace after a
// resourceVersion, through a watch.
type namespaceWrites struct {
	mu      sync.Mutex
	changes []string
	cancel  context.CancelFunc
	done    chan struct{}
}

func watchNamespaceWrites(t *testing.T, name, after string) *namespaceWrites {
	ctx, cancel := context.WithCancel(context.Background())
	wc, err := client.NewWithWatch(bed.Cluster.REST, client.Options{Scheme: k8s.Scheme()})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &corev1.NamespaceList{}, client.MatchingFields{"metadata.name": name},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: after}})
	require.NoError(t, err)
	o := &namespaceWrites{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if ns, isNS := ev.Object.(*corev1.Namespace); isNS && ev.Type == watch.Modified {
					o.mu.Lock()
					o.changes = append(o.changes, fmt.Sprintf("rv %s labels %v", ns.ResourceVersion, ns.Labels))
					o.mu.Unlock()
				}
			}
		}
	}()
	return o
}

func (o *namespaceWrites) stop() []string {
	o.cancel()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changes
}

// graphPod is a Pod of the wiring graph (a client, a routing source proxy)
// running as a ServiceAccount of its own.
func graphPod(ns, name, sa string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

// argValue is the value following flag in a command line.
func argValue(args []string, flag string) string {
	for i := range len(args) - 1 {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}

func nsLabels(t *testing.T, name string) map[string]string {
	ns := &corev1.Namespace{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Name: name}, ns))
	return ns.Labels
}

func meshSummary(t *testing.T) string {
	sm := &meshv1.ServiceMesh{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: "cluster"}, sm); err != nil {
		return err.Error()
	}
	var parts []string
	for _, c := range sm.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return sm.Status.Phase + " " + strings.Join(parts, " ")
}

func policyPorts(np *networkingv1.NetworkPolicy) []int {
	var out []int
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			out = append(out, p.Port.IntValue())
		}
	}
	return out
}

// denyNotNamespaces returns the notNamespaces of the namespace's DENY
// AuthorizationPolicy (the mesh operator's isolation).
func denyNotNamespaces(t *testing.T, ns string) ([]string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("security.istio.io/v1")
	list.SetKind("AuthorizationPolicyList")
	if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for _, ap := range list.Items {
		if action, _, _ := unstructured.NestedString(ap.Object, "spec", "action"); action != "DENY" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(ap.Object, "spec", "rules")
		var out []string
		for _, r := range rules {
			from, _, _ := unstructured.NestedSlice(r.(map[string]any), "from")
			for _, f := range from {
				not, _, _ := unstructured.NestedStringSlice(f.(map[string]any), "source", "notNamespaces")
				out = append(out, not...)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no DENY AuthorizationPolicy in %s yet", ns)
}

func contains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}
