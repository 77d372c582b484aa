//go:build e2e

package specs

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/injector"
	"github.com/ericdev/fleetmesh/e2e/sailfake"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

// Namespaces of TestSamples. The samples name no namespace (users apply them
// with `kubectl apply -n NAMESPACE`), so each is applied unmodified into its
// own namespace; none of these is used by another spec. The Gateway
// namespace "edge" and the ingress controller namespace "ingress-nginx" are
// the ones the samples themselves name.
const (
	samplesBasicNS   = "e2e-samples-basic"
	samplesMeshNS    = "e2e-samples-mesh"
	samplesGatewayNS = "e2e-samples-gateway"
	samplesIngressNS = "e2e-samples-ingress"
	sampleEdgeNS     = "edge"
	sampleIngressNS  = "ingress-nginx"
)

// TestSamples applies every manifest of docs/samples, unmodified and the
// way the docs tell users to, to the running bed, and waits for the status
// the sample and its doc promise. Where that status comes from a component
// the bed lacks, the spec plays it the way the real one behaves: a Gateway
// API implementation and an ingress controller that write route status, the
// test sidecar injector for Istio, sailfake for the Sail Operator. The
// subtests run in parallel with each other (separate namespaces; only one
// of them touches the ServiceMesh singleton), never with other specs.
func TestSamples(t *testing.T) {
	t.Run("fleet-basic.yaml", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		createNamespace(t, samplesBasicNS, nil)
		kubectl(t, "apply", "-n", samplesBasicNS, "-f", samplePath(t, "fleet-basic.yaml"))
		f := &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: samplesBasicNS, Name: "my-fleet"}}

		// The sample: Phase Ready with 3/3 once every member is up and
		// healthy on /state (the bed runs with networkPolicyEnforced=true).
		waitFleet(t, f, 4*time.Minute, readyOn("1.4.2"))
		got := getFleet(t, f)
		assert.Equal(t, "Ready", got.Status.Phase)
		assert.EqualValues(t, 3, got.Status.ReadyReplicas)
		assert.EqualValues(t, 3, got.Status.UpdatedReplicas)
		for _, pvc := range pvcs(t, samplesBasicNS) {
			assert.Equal(t, corev1.ClaimBound, pvc.Status.Phase, pvc.Name)
			assert.Equal(t, "10Gi", pvc.Spec.Resources.Requests.Storage().String(), pvc.Name)
		}
		require.Len(t, pvcs(t, samplesBasicNS), 3, "one claim per member")
		// The client Deployment runs, with the label the fleet policy admits.
		waitTrue(t, 2*time.Minute, func() (bool, string) {
			d := &appsv1.Deployment{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: samplesBasicNS, Name: "my-fleet-client"}, d))
			return d.Status.AvailableReplicas == 1, fmt.Sprintf("client available %d", d.Status.AvailableReplicas)
		})
		assertRow(t, map[string]string{"REPLICAS": "3", "READY": "3", "UPDATED": "3", "PHASE": "Ready"}, "-n", samplesBasicNS, "get", "celldfleet", "my-fleet")
		deleteNamespaceIfPassed(t, samplesBasicNS)
	})

	t.Run("istio-mesh.yaml", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		// Istio's sidecar injector, played by the test webhook on the API
		// server's real admission path.
		inj, err := injector.Start(ctx, bed.Cluster.REST)
		require.NoError(t, err)
		t.Cleanup(func() { inj.Stop(context.Background()) })

		createNamespace(t, samplesMeshNS, nil)
		kubectl(t, "apply", "-n", samplesMeshNS, "-f", samplePath(t, "istio-mesh.yaml"))
		f := &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: samplesMeshNS, Name: "ledger"}}

		// docs/mesh.md: Meshed, MeshReady=True, once every member runs a proxy.
		waitFleet(t, f, 4*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
			ok, msg := readyOn("1.0.0")(f)
			c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionMeshReady))
			return ok && f.Status.Mesh == "Meshed" && c != nil && c.Status == metav1.ConditionTrue && c.Reason == string(fleetv1.ReasonMeshed) && c.ObservedGeneration == f.Generation,
				fmt.Sprintf("%s; mesh=%q MeshReady=%+v", msg, f.Status.Mesh, c)
		})
		assert.Equal(t, "Ready", getFleet(t, f).Status.Phase)
		pods := memberPods(t, f)
		require.Len(t, pods, 3)
		for _, p := range pods {
			assert.True(t, hasProxy(&p), "%s runs a native istio-proxy", p.Name)
		}
		// applicationAccess: Policies: the fleet's policy admits the peer
		// port only, so 8080 stays closed until a policy of the user's allows it.
		ap := meshAP(f)
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(ap), ap))
		assert.True(t, peerPortIdentitiesOnly(ap), "8081 only from the fleet's and the operator's identities")
		assert.False(t, exists(t, meshPA(f)), "and 8081 not relaxed: STRICT refuses plaintext")
		ports := authzPorts(ap)
		assert.Contains(t, ports, "8081")
		assert.NotContains(t, ports, "8080", "Policies leaves 8080 to the user's own AuthorizationPolicy")
		assert.False(t, exists(t, meshPA(f)), "no PERMISSIVE override once every member is meshed")
		assertRow(t, map[string]string{"READY": "3", "PHASE": "Ready", "MESH": "Meshed"}, "-n", samplesMeshNS, "get", "celldfleet", "ledger", "-o", "wide")
		deleteNamespaceIfPassed(t, samplesMeshNS)
	})

	t.Run("gateway-routing.yaml", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		gw := gatewayClient(t)
		createNamespace(t, samplesGatewayNS, nil)
		// The platform's Gateway: "public" in "edge", listener "https"
		// admitting routes from the fleet's namespace, as the sample requires.
		createNamespace(t, sampleEdgeNS, nil)
		class := &gatewayv1.GatewayClass{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-samples"},
			Spec:       gatewayv1.GatewayClassSpec{ControllerName: sampleGatewayController},
		}
		require.NoError(t, gw.Create(ctx, class))
		t.Cleanup(func() { _ = gw.Delete(context.Background(), class) })
		require.NoError(t, gw.Create(ctx, &gatewayv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: sampleEdgeNS, Name: "public"},
			Spec: gatewayv1.GatewaySpec{
				GatewayClassName: "e2e-samples",
				Listeners: []gatewayv1.Listener{{
					Name: "https", Port: 443, Protocol: gatewayv1.HTTPSProtocolType,
					TLS: &gatewayv1.ListenerTLSConfig{
						Mode:            ptr.To(gatewayv1.TLSModeTerminate),
						CertificateRefs: []gatewayv1.SecretObjectReference{{Name: "shop-example-com"}},
					},
					AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{
						From: ptr.To(gatewayv1.NamespacesFromSelector),
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{
							"kubernetes.io/metadata.name": samplesGatewayNS,
						}},
					}},
				}},
			},
		}))

		kubectl(t, "apply", "-n", samplesGatewayNS, "-f", samplePath(t, "gateway-routing.yaml"))
		f := &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: samplesGatewayNS, Name: "storefront"}}
		waitFleet(t, f, 4*time.Minute, readyOn("1.0.0"))

		// No Gateway controller yet: the route waits for its verdict.
		waitFleet(t, f, 2*time.Minute, routingReady(metav1.ConditionUnknown, fleetv1.ReasonAwaitingGateway))
		route := &gatewayv1.HTTPRoute{}
		require.NoError(t, gw.Get(ctx, client.ObjectKey{Namespace: samplesGatewayNS, Name: "storefront-routing"}, route))
		require.Len(t, route.Spec.ParentRefs, 1)
		assert.EqualValues(t, "public", route.Spec.ParentRefs[0].Name)
		assert.EqualValues(t, ptr.To[gatewayv1.Namespace](sampleEdgeNS), route.Spec.ParentRefs[0].Namespace)
		assert.EqualValues(t, ptr.To[gatewayv1.SectionName]("https"), route.Spec.ParentRefs[0].SectionName)
		assert.ElementsMatch(t, []gatewayv1.Hostname{"shop.example.com", "*.shop.example.com"}, route.Spec.Hostnames)

		// The Gateway's controller accepts the route and resolves its backend.
		playUntilCleanup(t, func(ctx context.Context) { runGatewayController(ctx, gw, "e2e-samples") })
		waitFleet(t, f, 2*time.Minute, routingReady(metav1.ConditionTrue, fleetv1.ReasonRouteAccepted))

		// The routing policy admits 8080 from the sample's source only.
		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: samplesGatewayNS, Name: "storefront-routing"}, np))
		assertRoutingPolicy(t, np, sampleEdgeNS, map[string]string{"app": "public-gateway"})
		assertRow(t, map[string]string{"READY": "3", "PHASE": "Ready"}, "-n", samplesGatewayNS, "get", "celldfleet", "storefront")
		deleteNamespaceIfPassed(t, samplesGatewayNS)
		deleteNamespaceIfPassed(t, sampleEdgeNS)
	})

	t.Run("ingress-routing.yaml", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		createNamespace(t, samplesIngressNS, nil)
		createNamespace(t, sampleIngressNS, nil)
		// The IngressClass the ingress-nginx chart installs.
		class := &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
			Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
		}
		require.NoError(t, k8s.Create(ctx, class))
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), class) })

		kubectl(t, "apply", "-n", samplesIngressNS, "-f", samplePath(t, "ingress-routing.yaml"))
		f := &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: samplesIngressNS, Name: "catalog"}}
		waitFleet(t, f, 4*time.Minute, readyOn("1.0.0"))

		// No controller has published an address yet.
		waitFleet(t, f, 2*time.Minute, routingReady(metav1.ConditionUnknown, fleetv1.ReasonAwaitingAddress))
		ing := &networkingv1.Ingress{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: samplesIngressNS, Name: "catalog-routing"}, ing))
		assert.Equal(t, ptr.To("nginx"), ing.Spec.IngressClassName)
		require.Len(t, ing.Spec.TLS, 1)
		assert.Equal(t, "app-tls", ing.Spec.TLS[0].SecretName)
		assert.Equal(t, []string{"catalog.example.com"}, ing.Spec.TLS[0].Hosts)
		assert.Equal(t, "letsencrypt", ing.Annotations["cert-manager.io/cluster-issuer"])

		// The controller publishes its address (a name: nothing is contacted).
		const address = "ingress-nginx-controller.ingress-nginx.e2e.invalid"
		playUntilCleanup(t, func(ctx context.Context) { runIngressController(ctx, k8s, "k8s.io/ingress-nginx", address) })
		waitFleet(t, f, 2*time.Minute, routingReady(metav1.ConditionTrue, fleetv1.ReasonAddressAssigned))
		c := meta.FindStatusCondition(getFleet(t, f).Status.Conditions, string(fleetv1.ConditionRoutingReady))
		assert.Contains(t, c.Message, address)

		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: samplesIngressNS, Name: "catalog-routing"}, np))
		assertRoutingPolicy(t, np, sampleIngressNS, map[string]string{"app.kubernetes.io/component": "controller"})
		assertRow(t, map[string]string{"READY": "3", "PHASE": "Ready"}, "-n", samplesIngressNS, "get", "celldfleet", "catalog")
		deleteNamespaceIfPassed(t, samplesIngressNS)
		deleteNamespaceIfPassed(t, sampleIngressNS)
	})

	t.Run("servicemesh.yaml", func(t *testing.T) {
		t.Parallel()
		testServiceMeshSample(t)
	})
}

// playUntilCleanup runs a component the bed lacks (a controller the test
// plays) until the test ends, and waits for it to stop.
func playUntilCleanup(t *testing.T, run func(ctx context.Context)) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}

// testServiceMeshSample: without a license the ServiceMesh is PreviewLocked
// and changes nothing; with the license Secret created the way the sample
// says, it becomes Ready on a Sail-managed control plane; deleting it tears
// the control plane down. The bed's own license Secret is put back after.
func testServiceMeshSample(t *testing.T) {
	ctx := context.Background()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	// The Sail Operator, already installed (the bed's operator runs with
	// --sail-install=false and must never fetch a chart): its API from the
	// project's minimal Sail CRDs, its controller played by sailfake.
	stopSail, err := sailfake.Serve(ctx, bed.Cluster.REST, k8s, root)
	require.NoError(t, err)
	t.Cleanup(stopSail)

	// Start from a cluster without a license: take the bed's Secret away,
	// and put it back afterwards for the other specs.
	key := client.ObjectKey{Namespace: harness.MeshNamespace, Name: "mesh-operator-license"}
	orig := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, key, orig))
	require.NoError(t, k8s.Delete(ctx, orig))
	t.Cleanup(func() {
		ctx := context.Background()
		_ = k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
		waitTrue(t, time.Minute, func() (bool, string) {
			err := k8s.Get(ctx, key, &corev1.Secret{})
			return apierrors.IsNotFound(err), fmt.Sprintf("license Secret still there: %v", err)
		})
		restore := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: orig.Data}
		if err := k8s.Create(ctx, restore); err != nil {
			t.Errorf("restoring the bed's license Secret: %v", err)
		}
	})

	kubectl(t, "apply", "-f", samplePath(t, "servicemesh.yaml"))
	sm := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}
	t.Cleanup(func() { deleteServiceMesh(t) })

	// The sample: without a valid license, PreviewLocked and nothing changes.
	waitMesh(t, 2*time.Minute, func(m *meshv1.ServiceMesh) (bool, string) {
		locked := meta.FindStatusCondition(m.Status.Conditions, string(meshv1.ConditionPreviewLocked))
		ready := meta.FindStatusCondition(m.Status.Conditions, string(meshv1.ConditionReady))
		return m.Status.Phase == "PreviewLocked" && locked != nil && locked.Status == metav1.ConditionTrue && locked.Reason == string(meshv1.ReasonLicenseMissing) &&
				ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == string(meshv1.ReasonPreviewLocked),
			meshSummary(t)
	})
	assert.Empty(t, sailResources(t, "Istio"), "a locked mesh installs nothing")
	assertRow(t, map[string]string{"PHASE": "PreviewLocked"}, "get", "servicemesh", "cluster")

	// The license Secret, created exactly as the sample and docs/licensing.md say.
	dir := t.TempDir()
	require.NoError(t, bed.SignLicense(ctx, filepath.Join(dir, "license.json"), "docs samples e2e", "service-mesh", 24*time.Hour))
	kubectlIn(t, dir, "-n", harness.MeshNamespace, "create", "secret", "generic", "mesh-operator-license", "--from-file=license=license.json")

	// Within the locked recheck (about 30 s): Ready on the Sail control plane.
	waitMesh(t, 3*time.Minute, func(m *meshv1.ServiceMesh) (bool, string) {
		ready := meta.FindStatusCondition(m.Status.Conditions, string(meshv1.ConditionReady))
		return m.Status.Phase == "Ready" && ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == m.Generation,
			meshSummary(t)
	})
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(sm), sm))
	assert.Equal(t, string(meshv1.ReasonControlPlaneReady), meta.FindStatusCondition(sm.Status.Conditions, string(meshv1.ConditionReady)).Reason)
	locked := meta.FindStatusCondition(sm.Status.Conditions, string(meshv1.ConditionPreviewLocked))
	require.NotNil(t, locked)
	assert.Equal(t, metav1.ConditionFalse, locked.Status)
	assert.Equal(t, string(meshv1.ReasonLicenseValid), locked.Reason)
	assert.Contains(t, locked.Message, "docs samples e2e", "the license from the Secret created here")
	cp := meta.FindStatusCondition(sm.Status.Conditions, string(meshv1.ConditionControlPlaneReady))
	require.NotNil(t, cp)
	assert.Equal(t, metav1.ConditionTrue, cp.Status)
	assert.Equal(t, string(meshv1.ReasonSailResourcesReady), cp.Reason)
	assert.Equal(t, "sail", sm.Status.Provider)
	require.NotNil(t, sm.Status.ControlPlane)
	assert.EqualValues(t, "Managed", sm.Status.ControlPlane.Management)
	assert.Equal(t, "istio-system", sm.Status.ControlPlane.Namespace)
	assert.EqualValues(t, "sidecar", sm.Status.ControlPlane.DataPlane)
	istios := sailResources(t, "Istio")
	require.Len(t, istios, 1)
	assert.Equal(t, "default", istios[0].GetName())
	version, _, _ := unstructured.NestedString(istios[0].Object, "spec", "version")
	assert.Equal(t, "v1.30-latest", version, "spec.version 1.30 in Sail's spelling")
	assert.Empty(t, sailResources(t, "ZTunnel"), "sidecar data plane: no ztunnel")
	assertRow(t, map[string]string{"PHASE": "Ready", "PROVIDER": "sail", "MANAGEMENT": "Managed"}, "get", "servicemesh", "cluster", "-o", "wide")

	// Only one ServiceMesh may exist: remove it (and its control plane)
	// before other specs create theirs.
	deleteServiceMesh(t)
	assert.Empty(t, sailResources(t, "Istio"), "teardown removes the control plane")
}

// deleteServiceMesh deletes the singleton and waits until it, its Sail
// resources and the namespaces the operator created for them are gone.
func deleteServiceMesh(t *testing.T) {
	ctx := context.Background()
	err := k8s.Delete(ctx, &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}})
	require.NoError(t, client.IgnoreNotFound(err))
	waitTrue(t, 3*time.Minute, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Name: "cluster"}, &meshv1.ServiceMesh{})
		return apierrors.IsNotFound(err), "ServiceMesh still there: " + meshSummary(t)
	})
	waitTrue(t, 3*time.Minute, func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Name: "istio-system"}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), fmt.Sprintf("namespace istio-system: %v", err)
	})
}

func waitMesh(t *testing.T, timeout time.Duration, cond func(*meshv1.ServiceMesh) (bool, string)) {
	t.Helper()
	waitTrue(t, timeout, func() (bool, string) {
		m := &meshv1.ServiceMesh{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: "cluster"}, m); err != nil {
			return false, err.Error()
		}
		return cond(m)
	})
}

func sailResources(t *testing.T, kind string) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("sailoperator.io/v1")
	list.SetKind(kind + "List")
	require.NoError(t, k8s.List(context.Background(), list))
	return list.Items
}

func routingReady(status metav1.ConditionStatus, reason fleetv1.ConditionReason) func(*fleetv1.CelldFleet) (bool, string) {
	return func(f *fleetv1.CelldFleet) (bool, string) {
		c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionRoutingReady))
		return c != nil && c.Status == status && c.Reason == string(reason) && c.ObservedGeneration == f.Generation,
			fmt.Sprintf("RoutingReady=%+v", c)
	}
}

// assertRoutingPolicy checks NAME-routing: TCP 8080 from the source Pods in
// the source namespace, nothing else. The sample fleets are auto, but no
// mesh enrollment is in effect in their namespaces, so HBONE (15008) stays
// closed (issue 42 item 4; docs/mesh.md).
func assertRoutingPolicy(t *testing.T, np *networkingv1.NetworkPolicy, namespace string, podLabels map[string]string) {
	t.Helper()
	require.Len(t, np.Spec.Ingress, 1)
	assert.Equal(t, []int{8080}, policyPorts(np))
	require.Len(t, np.Spec.Ingress[0].From, 1)
	from := np.Spec.Ingress[0].From[0]
	require.NotNil(t, from.NamespaceSelector)
	require.NotNil(t, from.PodSelector)
	assert.Equal(t, namespace, from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
	assert.Equal(t, podLabels, from.PodSelector.MatchLabels)
}

// authzPorts lists every port an AuthorizationPolicy's rules name.
func authzPorts(ap *unstructured.Unstructured) []string {
	var out []string
	rules, _, _ := unstructured.NestedSlice(ap.Object, "spec", "rules")
	for _, r := range rules {
		to, _, _ := unstructured.NestedSlice(r.(map[string]any), "to")
		for _, op := range to {
			ports, _, _ := unstructured.NestedStringSlice(op.(map[string]any), "operation", "ports")
			out = append(out, ports...)
		}
	}
	return out
}

func samplePath(t *testing.T, name string) string {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	return filepath.Join(root, "docs", "samples", name)
}

// kubectl runs the bed's kubectl as the cluster admin, like a user following
// the docs, and returns its output.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return kubectlIn(t, "", args...)
}

func kubectlIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := cluster.BinDir()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(bin, "kubectl"), append([]string{"--kubeconfig", bed.Cluster.Kubeconfig}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// assertRow runs `kubectl get` for one object, as the docs show it, and
// checks the named columns of its row.
func assertRow(t *testing.T, want map[string]string, args ...string) {
	t.Helper()
	out := kubectl(t, args...)
	t.Log("kubectl " + strings.Join(args, " ") + "\n" + out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, "a header and one row")
	// kubectl aligns the columns; a header may hold a space ("DATA PLANE")
	// and a cell may be empty, so cells are cut at the header offsets.
	header, row := lines[0], lines[1]
	cols := regexp.MustCompile(`\S+( \S+)*`).FindAllStringIndex(header, -1)
	got := map[string]string{}
	for i, c := range cols {
		end := len(row)
		if i+1 < len(cols) && cols[i+1][0] < end {
			end = cols[i+1][0]
		}
		if c[0] < end {
			got[header[c[0]:c[1]]] = strings.TrimSpace(row[c[0]:end])
		}
	}
	for col, v := range want {
		assert.Equal(t, v, got[col], "column %s of\n%s", col, out)
	}
}

func createNamespace(t *testing.T, name string, l map[string]string) {
	t.Helper()
	require.NoError(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}))
}

// deleteNamespaceIfPassed removes a sample's namespace at the end of a
// passing subtest, so later specs share the bed with fewer members; a
// failing one is left for the kept bed files and logs.
func deleteNamespaceIfPassed(t *testing.T, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
	})
}

func gatewayClient(t *testing.T) client.Client {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, gatewayv1.Install(s))
	c, err := client.New(bed.Cluster.REST, client.Options{Scheme: s})
	require.NoError(t, err)
	return c
}

// sampleGatewayController is the controllerName of the Gateway API
// implementation TestSamples plays.
const sampleGatewayController gatewayv1.GatewayController = "e2e.fleetmesh.dev/samples-gateway"

// runGatewayController plays a Gateway API implementation for Gateways of
// the class className: for every HTTPRoute parent that is such a Gateway it
// writes the Accepted and ResolvedRefs conditions for the route's current
// generation, judged as the specification says (the listener named by
// sectionName, its allowedRoutes namespaces and kinds, hostname
// intersection; backends that are Services in the route's namespace with
// the referenced port). Other controllers' parent entries are kept.
func runGatewayController(ctx context.Context, c client.Client, className string) {
	for ctx.Err() == nil {
		routes := &gatewayv1.HTTPRouteList{}
		if err := c.List(ctx, routes); err == nil {
			for i := range routes.Items {
				syncRoute(ctx, c, className, &routes.Items[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func syncRoute(ctx context.Context, c client.Client, className string, r *gatewayv1.HTTPRoute) {
	var parents []gatewayv1.RouteParentStatus
	for _, p := range r.Status.Parents {
		if p.ControllerName != sampleGatewayController {
			parents = append(parents, p)
		}
	}
	changed := false
	for _, ref := range r.Spec.ParentRefs {
		if (ref.Group != nil && *ref.Group != gatewayv1.GroupName) || (ref.Kind != nil && *ref.Kind != "Gateway") {
			continue
		}
		ns := r.Namespace
		if ref.Namespace != nil {
			ns = string(*ref.Namespace)
		}
		g := &gatewayv1.Gateway{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: string(ref.Name)}, g); err != nil || string(g.Spec.GatewayClassName) != className {
			continue // not a Gateway of ours
		}
		var old []metav1.Condition
		for _, p := range r.Status.Parents {
			if p.ControllerName == sampleGatewayController && equalParentRef(p.ParentRef, ref) {
				old = p.Conditions
			}
		}
		conds := append([]metav1.Condition(nil), old...)
		status, reason, msg := admitRoute(ctx, c, g, ref, r)
		meta.SetStatusCondition(&conds, metav1.Condition{Type: string(gatewayv1.RouteConditionAccepted), Status: status, Reason: reason, Message: msg, ObservedGeneration: r.Generation})
		status, reason, msg = resolveBackends(ctx, c, r)
		meta.SetStatusCondition(&conds, metav1.Condition{Type: string(gatewayv1.RouteConditionResolvedRefs), Status: status, Reason: reason, Message: msg, ObservedGeneration: r.Generation})
		if !sameConditions(old, conds) {
			changed = true
		}
		parents = append(parents, gatewayv1.RouteParentStatus{ParentRef: ref, ControllerName: sampleGatewayController, Conditions: conds})
	}
	if changed {
		r.Status.Parents = parents
		_ = c.Status().Update(ctx, r) // a conflict is retried on the next pass
	}
}

func admitRoute(ctx context.Context, c client.Client, g *gatewayv1.Gateway, ref gatewayv1.ParentReference, r *gatewayv1.HTTPRoute) (metav1.ConditionStatus, string, string) {
	var listeners []gatewayv1.Listener
	for _, l := range g.Spec.Listeners {
		if ref.SectionName == nil || *ref.SectionName == l.Name {
			listeners = append(listeners, l)
		}
	}
	if len(listeners) == 0 {
		return metav1.ConditionFalse, string(gatewayv1.RouteReasonNoMatchingParent), "no listener named by sectionName"
	}
	routeNS := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: r.Namespace}, routeNS); err != nil {
		return metav1.ConditionFalse, string(gatewayv1.RouteReasonNotAllowedByListeners), err.Error()
	}
	allowed := false
	for _, l := range listeners {
		if !listenerAdmits(l, g.Namespace, routeNS) {
			continue
		}
		allowed = true
		if hostnamesIntersect(l.Hostname, r.Spec.Hostnames) {
			return metav1.ConditionTrue, string(gatewayv1.RouteReasonAccepted), "accepted by the samples' Gateway controller"
		}
	}
	if allowed {
		return metav1.ConditionFalse, string(gatewayv1.RouteReasonNoMatchingListenerHostname), "no hostname matches the listener"
	}
	return metav1.ConditionFalse, string(gatewayv1.RouteReasonNotAllowedByListeners), "the listener's allowedRoutes do not admit namespace " + r.Namespace
}

func listenerAdmits(l gatewayv1.Listener, gatewayNS string, routeNS *corev1.Namespace) bool {
	if l.Protocol != gatewayv1.HTTPProtocolType && l.Protocol != gatewayv1.HTTPSProtocolType {
		return false
	}
	from := gatewayv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if l.AllowedRoutes != nil {
		if kinds := l.AllowedRoutes.Kinds; len(kinds) > 0 {
			ok := false
			for _, k := range kinds {
				ok = ok || (k.Kind == "HTTPRoute" && ptr.Deref(k.Group, gatewayv1.GroupName) == gatewayv1.GroupName)
			}
			if !ok {
				return false
			}
		}
		if ns := l.AllowedRoutes.Namespaces; ns != nil {
			if ns.From != nil {
				from = *ns.From
			}
			sel = ns.Selector
		}
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return true
	case gatewayv1.NamespacesFromSame:
		return routeNS.Name == gatewayNS
	case gatewayv1.NamespacesFromSelector:
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && sel != nil && s.Matches(labels.Set(routeNS.Labels))
	}
	return false
}

// hostnamesIntersect: a listener without a hostname takes any route; else
// some route hostname must match it (exactly or through a wildcard on
// either side).
func hostnamesIntersect(listener *gatewayv1.Hostname, route []gatewayv1.Hostname) bool {
	if listener == nil || *listener == "" || len(route) == 0 {
		return true
	}
	l := string(*listener)
	for _, h := range route {
		r := string(h)
		switch {
		case r == l,
			strings.HasPrefix(l, "*.") && strings.HasSuffix(r, l[1:]),
			strings.HasPrefix(r, "*.") && strings.HasSuffix(l, r[1:]):
			return true
		}
	}
	return false
}

func resolveBackends(ctx context.Context, c client.Client, r *gatewayv1.HTTPRoute) (metav1.ConditionStatus, string, string) {
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if (b.Group != nil && *b.Group != "") || (b.Kind != nil && *b.Kind != "Service") {
				return metav1.ConditionFalse, string(gatewayv1.RouteReasonInvalidKind), "only Services are supported"
			}
			if b.Namespace != nil && string(*b.Namespace) != r.Namespace {
				return metav1.ConditionFalse, string(gatewayv1.RouteReasonRefNotPermitted), "cross-namespace backend without a ReferenceGrant"
			}
			svc := &corev1.Service{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: string(b.Name)}, svc); err != nil {
				return metav1.ConditionFalse, string(gatewayv1.RouteReasonBackendNotFound), err.Error()
			}
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || (b.Port != nil && p.Port == int32(*b.Port))
			}
			if !found {
				return metav1.ConditionFalse, string(gatewayv1.RouteReasonBackendNotFound), fmt.Sprintf("Service %s has no port %v", svc.Name, b.Port)
			}
		}
	}
	return metav1.ConditionTrue, string(gatewayv1.RouteReasonResolvedRefs), "every backend resolved"
}

func equalParentRef(a, b gatewayv1.ParentReference) bool {
	return ptr.Deref(a.Group, gatewayv1.GroupName) == ptr.Deref(b.Group, gatewayv1.GroupName) &&
		ptr.Deref(a.Kind, "Gateway") == ptr.Deref(b.Kind, "Gateway") &&
		ptr.Deref(a.Namespace, "") == ptr.Deref(b.Namespace, "") && a.Name == b.Name &&
		ptr.Deref(a.SectionName, "") == ptr.Deref(b.SectionName, "") && ptr.Deref(a.Port, 0) == ptr.Deref(b.Port, 0)
}

func sameConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range b {
		y := meta.FindStatusCondition(a, x.Type)
		if y == nil || y.Status != x.Status || y.Reason != x.Reason || y.ObservedGeneration != x.ObservedGeneration {
			return false
		}
	}
	return true
}

// runIngressController plays an ingress controller (ingress-nginx): for
// every Ingress whose class names an IngressClass of controller it
// publishes its load balancer address in the Ingress status, as the real
// one does once its Service has an address.
func runIngressController(ctx context.Context, c client.Client, controller, address string) {
	for ctx.Err() == nil {
		classes := &networkingv1.IngressClassList{}
		ingresses := &networkingv1.IngressList{}
		if c.List(ctx, classes) == nil && c.List(ctx, ingresses) == nil {
			ours := map[string]bool{}
			for _, cl := range classes.Items {
				ours[cl.Name] = cl.Spec.Controller == controller
			}
			for i := range ingresses.Items {
				ing := &ingresses.Items[i]
				if ing.Spec.IngressClassName == nil || !ours[*ing.Spec.IngressClassName] || len(ing.Status.LoadBalancer.Ingress) > 0 {
					continue
				}
				ing.Status.LoadBalancer.Ingress = []networkingv1.IngressLoadBalancerIngress{{Hostname: address}}
				_ = c.Status().Update(ctx, ing)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}
