//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// stateServer plays a member's /state endpoint on a loopback address of its
// own (127.14.x.y), port 8081 as the operator reads it.
type stateServer struct {
	ip      string
	healthy atomic.Bool
}

// serveState starts a /state endpoint on ip:8081 until the test ends.
func serveState(t *testing.T, ip string) *stateServer {
	t.Helper()
	s := &stateServer{ip: ip}
	s.healthy.Store(true)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(names.PeerPort)))
	require.NoError(t, err, "listening on %s:%d for a played member", ip, names.PeerPort)
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rep := state.Report{Healthy: s.healthy.Load(), Phase: "Serving", Version: "1.0.0"}
		if !rep.Healthy {
			rep.Phase = "Recovering"
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rep)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// runningMember creates a member Pod as the StatefulSet controller (and,
// with proxy, Istio's injector) would, then plays the kubelet: Running,
// Ready for an hour, at ip.
func runningMember(t *testing.T, c client.Client, ns, fleet string, ordinal int, proxy bool, revision, ip string) {
	t.Helper()
	ctx := context.Background()
	p := memberPod(ns, fleet, ordinal, proxy)
	p.Labels[revisionLabel] = revision
	require.Eventually(t, func() bool { return c.Create(ctx, p) == nil }, 10*time.Second, 100*time.Millisecond, "creating %s", p.Name)
	p.Status = corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}},
	}
	if ip != "" { // no IP: a member whose /state is not played
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	require.NoError(t, c.Status().Update(ctx, p), "playing the kubelet for %s", p.Name)
}

// startMembers brings a created fleet to three running members: it
// reconciles until the members' StatefulSet exists, plays it at rev1,
// serves /state for member i at fmt.Sprintf(ipFormat, i+ipBase), runs the
// member with member(i, ip), and reconciles once more. It returns the
// /state servers by ordinal.
func (h *harness) startMembers(f *v1alpha1.CelldFleet, ipFormat string, ipBase int, member func(i int, ip string)) []*stateServer {
	t := h.t
	t.Helper()
	require.Eventually(t, func() bool {
		h.reconcile(f)
		return h.get(&appsv1.StatefulSet{}, f.Namespace, f.Name) == nil
	}, 30*time.Second, time.Second)
	playStatefulSet(t, h.env.Client, f.Namespace, f.Name, "rev1")
	servers := make([]*stateServer, 3)
	for i := range servers {
		ip := fmt.Sprintf(ipFormat, i+ipBase)
		servers[i] = serveState(t, ip)
		member(i, ip)
	}
	h.reconcile(f)
	return servers
}

// playStatefulSet plays the StatefulSet controller: it has observed the
// current template, which is revision.
func playStatefulSet(t *testing.T, c client.Client, ns, name, revision string) {
	t.Helper()
	ctx := context.Background()
	sts := &appsv1.StatefulSet{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sts))
	sts.Status.ObservedGeneration = sts.Generation
	sts.Status.Replicas = *sts.Spec.Replicas
	sts.Status.CurrentRevision, sts.Status.UpdateRevision = revision, revision
	require.NoError(t, c.Status().Update(ctx, sts), "playing the StatefulSet controller")
}

func condition(t *testing.T, h *harness, f *v1alpha1.CelldFleet, typ v1alpha1.ConditionType) *metav1.Condition {
	t.Helper()
	require.NoError(t, h.get(f, f.Namespace, f.Name))
	return meta.FindStatusCondition(f.Status.Conditions, string(typ))
}

// rejectIngressHosts installs a ValidatingAdmissionPolicy, as an edge
// team's admission policy would be, that refuses Ingresses in ns whose
// host starts with "rejected.", and waits until the API server enforces it.
func rejectIngressHosts(t *testing.T, env *testenv.Env, ns string) string {
	t.Helper()
	ctx := context.Background()
	const msg = "the edge admission policy refuses hosts under rejected."
	name := "reject-hosts-" + ns
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"ingresses"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.spec.rules) || !object.spec.rules.exists(r, has(r.host) && r.host.startsWith('rejected.'))",
				Message:    msg,
			}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, vap))
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, binding))
	t.Cleanup(func() {
		_ = env.Client.Delete(ctx, binding)
		_ = env.Client.Delete(ctx, vap)
	})
	probe := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec:       networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "rejected.example.com"}}},
	}
	require.Eventually(t, func() bool {
		err := env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil
	}, 30*time.Second, 200*time.Millisecond, "the API server enforces the admission policy")
	return msg
}

// testRejectedRoute: a route the API server refuses is the route's problem,
// reported in RoutingReady; the fleet itself carries on (template, members,
// /state) and the previous route, if any, stays.
func testRejectedRoute(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "rejected")
	msg := rejectIngressHosts(t, env, "rejected")
	serveState(t, "127.14.1.1")

	r := ingressRouting()
	r.Hostnames = []string{"rejected.example.com"}
	f := routingFleet("rejected", "edge", r)
	f.Spec.Replicas = ptr.To[int32](1)
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)

	_, err := h.r.Reconcile(ctx, reconcileRequest(f))
	require.NoError(t, err, "a rejected route is reported, not retried as an error")
	c := condition(t, h, f, v1alpha1.ConditionRoutingReady)
	assertRouting(t, c, metav1.ConditionFalse, v1alpha1.ReasonRouteRejected)
	assert.Contains(t, c.Message, msg, "the API server's answer is quoted")
	assert.Contains(t, c.Message, "edge-routing")
	assert.Error(t, h.get(&networkingv1.Ingress{}, "rejected", "edge-routing"))
	sts := &appsv1.StatefulSet{}
	require.NoError(t, h.get(sts, "rejected", "edge"), "the members are provisioned regardless")
	assert.False(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked)))

	// A member runs: /state is read while the route is rejected.
	playStatefulSet(t, env.Client, "rejected", "edge", "rev1")
	runningMember(t, env.Client, "rejected", "edge", 0, false, "rev1", "127.14.1.1")
	h.reconcile(f)
	require.NoError(t, h.get(f, "rejected", "edge"))
	require.Len(t, f.Status.Members, 1)
	require.NotNil(t, f.Status.Members[0].State)
	assert.True(t, f.Status.Members[0].State.Reachable, "members' /state is read: %+v", f.Status.Members[0].State)
	assert.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)), "Ready is about the members, not the route")
	assertRouting(t, meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionRoutingReady)), metav1.ConditionFalse, v1alpha1.ReasonRouteRejected)

	// An image bump rolls while the route is still rejected.
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":"registry.example/celld:2.0.0"}}`))))
	h.reconcile(f)
	require.NoError(t, h.get(sts, "rejected", "edge"))
	assert.Equal(t, "registry.example/celld:2.0.0", sts.Spec.Template.Spec.Containers[0].Image)
	playStatefulSet(t, env.Client, "rejected", "edge", "rev2")
	h.reconcile(f)
	member := &corev1.Pod{}
	err = h.get(member, "rejected", "edge-0")
	assert.True(t, err != nil || member.DeletionTimestamp != nil, "the outdated member is replaced")
	assertRouting(t, condition(t, h, f, v1alpha1.ConditionRoutingReady), metav1.ConditionFalse, v1alpha1.ReasonRouteRejected)

	// Fixed: the route is created. Rejected again: the last accepted route stays.
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"routing":{"hostnames":["ok.example.com"]}}}`))))
	assertRouting(t, routingCondition(t, h, f), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress)
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"routing":{"hostnames":["rejected.example.com"]}}}`))))
	assertRouting(t, routingCondition(t, h, f), metav1.ConditionFalse, v1alpha1.ReasonRouteRejected)
	ing := &networkingv1.Ingress{}
	require.NoError(t, h.get(ing, "rejected", "edge-routing"))
	assert.Equal(t, "ok.example.com", ing.Spec.Rules[0].Host, "the last accepted route stays in place")
}

func reconcileRequest(f *v1alpha1.CelldFleet) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f)}
}

// testCleanupFromObjects: what is removed is decided from the owned objects
// that exist, never from what status remembers: a wiped or restored status
// still gets exact cleanup.
func testCleanupFromObjects(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "cleanup")
	h := newHarness(t, env, true)

	t.Run("routing removed after status was wiped: route and policy deleted", func(t *testing.T) {
		f := routingFleet("cleanup", "tidy", ingressRouting())
		require.NoError(t, env.Client.Create(ctx, f))
		assertRouting(t, routingCondition(t, h, f), metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAddress)
		require.NoError(t, h.get(&networkingv1.Ingress{}, "cleanup", "tidy-routing"))
		require.NoError(t, h.get(&networkingv1.NetworkPolicy{}, "cleanup", "tidy-routing"))

		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"routing":null}}`))))
		f.Status = v1alpha1.CelldFleetStatus{}
		require.NoError(t, env.Client.Status().Update(ctx, f), "a failed reconcile or a restore wiped status")
		h.reconcile(f)
		assert.Error(t, h.get(&networkingv1.Ingress{}, "cleanup", "tidy-routing"), "the route is deleted")
		assert.Error(t, h.get(&networkingv1.NetworkPolicy{}, "cleanup", "tidy-routing"), "its policy no longer admits the edge on 8080")
		require.NoError(t, h.get(&networkingv1.NetworkPolicy{}, "cleanup", "tidy"), "the fleet policy stays")
		assert.Nil(t, condition(t, h, f, v1alpha1.ConditionRoutingReady))
	})

	t.Run("an error deleting the routing policy is returned", func(t *testing.T) {
		f := routingFleet("cleanup", "stuck", ingressRouting())
		require.NoError(t, env.Client.Create(ctx, f))
		routingCondition(t, h, f)
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"routing":null}}`))))

		// The same operator (one reconciler: one read-your-writes gate)
		// whose delete of the policy fails once.
		wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
		require.NoError(t, err)
		c := interceptor.NewClient(wc, interceptor.Funcs{
			Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
				if _, ok := o.(*unstructured.Unstructured); ok && o.GetName() == "stuck-routing" && o.GetObjectKind().GroupVersionKind().Kind == "NetworkPolicy" {
					return errors.New("injected: etcd unavailable")
				}
				return c.Delete(ctx, o, opts...)
			},
		})
		good, goodApplier := h.r.Client, h.r.Applier
		h.r.Client = c
		h.r.Applier = &apply.Applier{Client: c, FieldManager: names.Operator, HashAnnotation: HashAnnotation}
		res, err := h.r.Reconcile(ctx, reconcileRequest(f))
		h.r.Client, h.r.Applier = good, goodApplier
		require.NoError(t, err, "a failed step is reported in status and looked at again within the fleet's poll")
		assertBoundedLook(t, h, res)
		failed := condition(t, h, f, v1alpha1.ConditionReconciled)
		require.NotNil(t, failed)
		assert.Equal(t, metav1.ConditionFalse, failed.Status)
		assert.Contains(t, failed.Message, "injected: etcd unavailable")
		require.NoError(t, h.get(&networkingv1.NetworkPolicy{}, "cleanup", "stuck-routing"), "not deleted: the error was real")

		h.reconcile(f)
		assert.Error(t, h.get(&networkingv1.NetworkPolicy{}, "cleanup", "stuck-routing"), "the next reconcile finishes the cleanup")
	})

	t.Run("namespace left the ambient mesh, status restored from an old copy: the policy is deleted", func(t *testing.T) {
		createNamespace(t, env.Client, "cleanup-ambient")
		f := fleet("cleanup-ambient", "amb")
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		require.NoError(t, h.get(f, "cleanup-ambient", "amb"))
		old := f.Status.DeepCopy()
		require.Empty(t, old.Mesh)

		enroll(t, env.Client, "cleanup-ambient", "ambient")
		h.reconcile(f)
		require.NoError(t, h.get(policy(mesh.AuthorizationPolicyKind), "cleanup-ambient", "amb-mesh"))

		unenroll(t, env.Client, "cleanup-ambient")
		require.NoError(t, h.get(f, "cleanup-ambient", "amb"))
		f.Status = *old
		require.NoError(t, env.Client.Status().Update(ctx, f), "status restored from a copy taken before the fleet was ambient")
		h.reconcile(f)
		noMeshTrace(t, h, "cleanup-ambient", "amb", "the namespace left, no member captured")
	})
}

// testReadyNeedsProxy: a meshed fleet is not Ready while a member lacks the
// proxy it must run, even when that member's Pod is Ready and healthy.
func testReadyNeedsProxy(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "proxyready")
	f := fleet("proxyready", "px")
	f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	require.Eventually(t, func() bool {
		h.reconcile(f)
		return h.get(&appsv1.StatefulSet{}, "proxyready", "px") == nil
	}, 30*time.Second, time.Second)
	playStatefulSet(t, env.Client, "proxyready", "px", "rev1")
	for i := 0; i < 4; i++ {
		serveState(t, fmt.Sprintf("127.14.2.%d", i+1))
	}
	for i := 0; i < 3; i++ {
		runningMember(t, env.Client, "proxyready", "px", i, true, "rev1", fmt.Sprintf("127.14.2.%d", i+1))
	}
	h.reconcile(f)
	require.NotNil(t, condition(t, h, f, v1alpha1.ConditionReady))
	require.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)), "3 meshed, healthy members: Ready: %v", f.Status.Conditions)
	assert.Equal(t, "Meshed", f.Status.Mesh)

	// Scaled up behind a broken injector: the new member runs without a proxy.
	require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`))))
	h.reconcile(f)
	playStatefulSet(t, env.Client, "proxyready", "px", "rev1")
	runningMember(t, env.Client, "proxyready", "px", 3, false, "rev1", "127.14.2.4")
	h.reconcile(f)
	prov := condition(t, h, f, v1alpha1.ConditionProvisioning)
	require.NotNil(t, prov)
	assert.Equal(t, string(v1alpha1.ReasonProxyMissing), prov.Reason)
	ready := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionReady))
	require.NotNil(t, ready)
	assert.Equal(t, metav1.ConditionFalse, ready.Status, "Ready must not be True while px-3 lacks its proxy: %s", ready.Message)
	assert.Contains(t, ready.Message, "px-3")
}

// testFailedStep: a step that fails does not erase what is still true, says
// which step failed, and status never claims a spec the objects were not
// built from.
func testFailedStep(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "halfway")
	serveState(t, "127.14.3.1")

	t.Run("a failed StatefulSet apply keeps member facts and observedGeneration", func(t *testing.T) {
		f := fleet("halfway", "hw")
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, env.Client.Create(ctx, f))
		h := newHarness(t, env, true)
		h.reconcile(f)
		playStatefulSet(t, env.Client, "halfway", "hw", "rev1")
		runningMember(t, env.Client, "halfway", "hw", 0, false, "rev1", "127.14.3.1")
		h.reconcile(f)
		require.NoError(t, h.get(f, "halfway", "hw"))
		require.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReady)))
		gen := f.Generation
		require.Equal(t, gen, f.Status.ObservedGeneration)

		wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
		require.NoError(t, err)
		c := interceptor.NewClient(wc, interceptor.Funcs{
			Apply: func(ctx context.Context, c client.WithWatch, o runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
				// Server-side apply of unstructured objects: the configuration embeds one.
				if u, ok := o.(interface{ GetKind() string }); ok && u.GetKind() == "StatefulSet" {
					return errors.New("injected: etcd timeout")
				}
				return c.Apply(ctx, o, opts...)
			},
		})
		h.r.Client = c
		h.r.Applier = &apply.Applier{Client: c, FieldManager: names.Operator, HashAnnotation: HashAnnotation}
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":"registry.example/celld:2.0.0"}}`))))
		res, err := h.r.Reconcile(ctx, reconcileRequest(f))
		require.NoError(t, err, "a failed step is reported in status and looked at again within the fleet's poll")
		assertBoundedLook(t, h, res)

		require.NoError(t, h.get(f, "halfway", "hw"))
		assert.Equal(t, gen, f.Status.ObservedGeneration, "the new spec was not applied")
		require.Len(t, f.Status.Members, 1)
		require.NotNil(t, f.Status.Members[0].State)
		assert.True(t, f.Status.Members[0].State.Reachable, "the last known /state is kept: %+v", f.Status.Members[0].State)
		assert.NotEqual(t, PhaseDegraded, f.Status.Phase)
		failed := meta.FindStatusCondition(f.Status.Conditions, string(v1alpha1.ConditionReconciled))
		require.NotNil(t, failed, "a condition names the failed step")
		assert.Equal(t, metav1.ConditionFalse, failed.Status)
		assert.Equal(t, string(v1alpha1.ReasonStepFailed), failed.Reason)
		assert.Contains(t, failed.Message, "StatefulSet")
		assert.Contains(t, failed.Message, "injected: etcd timeout")
		assert.Equal(t, f.Generation, failed.ObservedGeneration)

		// Fixed: the step runs, the condition says so, status catches up.
		h = newHarness(t, env, true)
		h.reconcile(f)
		require.NoError(t, h.get(f, "halfway", "hw"))
		assert.Equal(t, f.Generation, f.Status.ObservedGeneration)
		assert.True(t, meta.IsStatusConditionTrue(f.Status.Conditions, string(v1alpha1.ConditionReconciled)))
	})

	t.Run("a spec changed during the reconcile is not claimed as observed", func(t *testing.T) {
		f := fleet("halfway", "swap")
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
		require.NoError(t, env.Client.Create(ctx, f))
		// The members' StatefulSet exists, so the pass below writes its
		// status (the pass that creates it leaves the status to the next,
		// membersAboutToAppear); without its finalizer that pass records
		// the opt-in again, with the patch the spec change rides on.
		newHarness(t, env, true).reconcile(f)
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f), f))
		require.True(t, controllerutil.RemoveFinalizer(f, DeclarationsFinalizer))
		require.NoError(t, env.Client.Update(ctx, f))
		gen := f.Generation
		h := newHarness(t, env, true)
		wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
		require.NoError(t, err)
		var changed atomic.Bool
		// The user changes the control plane namespace while the operator
		// records the opt-in: the fleet policy was already built from the
		// spec the reconcile started with.
		c := interceptor.NewClient(wc, interceptor.Funcs{
			Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
				if _, ok := o.(*v1alpha1.CelldFleet); ok && !changed.Swap(true) {
					require.NoError(t, env.Client.Patch(ctx, &v1alpha1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "halfway", Name: "swap"}},
						client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":{"istio":{"controlPlaneNamespace":"istio-canary"}}}}`))))
				}
				return c.Patch(ctx, o, p, opts...)
			},
		})
		h.r.Client = c
		h.r.Applier = &apply.Applier{Client: c, FieldManager: names.Operator, HashAnnotation: HashAnnotation}
		h.reconcile(f)
		require.True(t, changed.Load(), "the opt-in was recorded with a patch")
		require.NoError(t, h.get(f, "halfway", "swap"))
		require.Greater(t, f.Generation, gen)
		assert.Equal(t, gen, f.Status.ObservedGeneration, "the objects were built from generation %d", gen)
		np := &networkingv1.NetworkPolicy{}
		require.NoError(t, h.get(np, "halfway", "swap"))
		assert.True(t, egressToNamespace(np, "istio-system"))

		h.reconcile(f)
		require.NoError(t, h.get(f, "halfway", "swap"))
		assert.Equal(t, f.Generation, f.Status.ObservedGeneration)
		require.NoError(t, h.get(np, "halfway", "swap"))
		assert.True(t, egressToNamespace(np, "istio-canary"), "the next reconcile builds from the new spec")
	})
}

func egressToNamespace(np *networkingv1.NetworkPolicy, ns string) bool {
	for _, e := range np.Spec.Egress {
		for _, to := range e.To {
			if to.NamespaceSelector != nil && to.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == ns {
				return true
			}
		}
	}
	return false
}

// testDegradedFromMembers: Degraded (a fleet that lost members it had) is
// read from what the members show, not from a status that may have been
// restored from an old copy.
func testDegradedFromMembers(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "degraded")
	f := fleet("degraded", "dg")
	f.Spec.Replicas = ptr.To[int32](1)
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	h.reconcile(f)
	playStatefulSet(t, env.Client, "degraded", "dg", "rev1")
	// A member that is still coming up: created, not Ready, never restarted.
	p := memberPod("degraded", "dg", 0, false)
	p.Labels[revisionLabel] = "rev1"
	require.NoError(t, env.Client.Create(ctx, p))
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "celld", Image: "celld"}}}
	require.NoError(t, env.Client.Status().Update(ctx, p))

	require.NoError(t, h.get(f, "degraded", "dg"))
	f.Status.Phase = PhaseDegraded
	meta.SetStatusCondition(&f.Status.Conditions, metav1.Condition{Type: string(v1alpha1.ConditionReady), Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonMembersReady), Message: "from an old copy"})
	require.NoError(t, env.Client.Status().Update(ctx, f), "status restored from an old copy")
	h.reconcile(f)
	require.NoError(t, h.get(f, "degraded", "dg"))
	assert.Equal(t, PhaseProvisioning, f.Status.Phase, "a member still coming up is provisioning, whatever status said before")

	// The member's celld has restarted: it had run and lost it.
	require.NoError(t, h.get(p, "degraded", "dg-0"))
	p.Status.ContainerStatuses[0].RestartCount = 2
	require.NoError(t, env.Client.Status().Update(ctx, p))
	f.Status = v1alpha1.CelldFleetStatus{}
	require.NoError(t, env.Client.Status().Update(ctx, f), "status wiped")
	h.reconcile(f)
	require.NoError(t, h.get(f, "degraded", "dg"))
	assert.Equal(t, PhaseDegraded, f.Status.Phase, "a restarted member is a degraded fleet, whatever status said before")
}

// testCollisionNamesBothFleets: an object with one of a fleet's names that
// another fleet controls (left by a fleet created before admission refused
// such names) is reported naming both fleets, and never adopted.
func testCollisionNamesBothFleets(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	createNamespace(t, env.Client, "collide")
	b := fleet("collide", "b")
	require.NoError(t, env.Client.Create(ctx, b))
	taken := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "collide", Name: "a-peers", Labels: names.CommonLabels("b"),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "CelldFleet", Name: "b", UID: b.UID, Controller: ptr.To(true)}}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}},
	}
	require.NoError(t, env.Client.Create(ctx, taken))
	a := fleet("collide", "a")
	require.NoError(t, env.Client.Create(ctx, a))
	h := newHarness(t, env, true)
	h.reconcile(a)
	c := condition(t, h, a, v1alpha1.ConditionInfrastructureBlocked)
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonOwnershipConflict), c.Reason)
	assert.Contains(t, c.Message, "Service collide/a-peers")
	assert.Contains(t, c.Message, "controlled by CelldFleet b, not by a (uid", "both fleets are named")
	got := &corev1.Service{}
	require.NoError(t, h.get(got, "collide", "a-peers"))
	assert.Equal(t, b.UID, metav1.GetControllerOf(got).UID, "never adopted")
}

// testUnexplainedProxies: proxies the fleet did not ask for are explained
// in MeshReady, with the cause and the fix.
func testUnexplainedProxies(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "autoinject")
	h := newHarness(t, env, true)

	t.Run("injected by the namespace, never opted in", func(t *testing.T) {
		f := fleet("autoinject", "plain")
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		playStatefulSet(t, env.Client, "autoinject", "plain", "rev1")
		runningMember(t, env.Client, "autoinject", "plain", 0, true, "rev1", "")
		h.reconcile(f)
		c := condition(t, h, f, v1alpha1.ConditionMeshReady)
		require.NotNil(t, c, "injected proxies that cannot reach istiod are explained")
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonInjectedWithoutOptIn), c.Reason)
		assert.Contains(t, c.Message, "plain-0")
		assert.Contains(t, c.Message, "15012")
		assert.Contains(t, c.Message, "spec.mesh.istio")

		// The proxy is gone (the namespace stopped injecting): nothing to explain.
		require.NoError(t, env.Client.Delete(ctx, memberPod("autoinject", "plain", 0, true), client.GracePeriodSeconds(0)))
		runningMember(t, env.Client, "autoinject", "plain", 0, false, "rev1", "")
		h.reconcile(f)
		assert.Nil(t, condition(t, h, f, v1alpha1.ConditionMeshReady), "a plain fleet has no MeshReady")
	})

	t.Run("still injected after leaving", func(t *testing.T) {
		f := fleet("autoinject", "sticky")
		f.Spec.Replicas = ptr.To[int32](1)
		f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		playStatefulSet(t, env.Client, "autoinject", "sticky", "rev1")
		runningMember(t, env.Client, "autoinject", "sticky", 0, true, "rev1", "")
		h.reconcile(f)
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"mesh":null}}`))))
		h.reconcile(f)
		playStatefulSet(t, env.Client, "autoinject", "sticky", "rev2")
		// The replacement runs the opt-out template, and an injector that
		// ignores the opt-out injected it all the same.
		require.NoError(t, env.Client.Delete(ctx, memberPod("autoinject", "sticky", 0, true), client.GracePeriodSeconds(0)))
		runningMember(t, env.Client, "autoinject", "sticky", 0, true, "rev2", "")
		h.reconcile(f)
		c := condition(t, h, f, v1alpha1.ConditionMeshReady)
		require.NotNil(t, c)
		assert.Equal(t, "Leaving", f.Status.Mesh)
		assert.Equal(t, string(v1alpha1.ReasonProxyStillInjected), c.Reason, c.Message)
		assert.Contains(t, c.Message, "sticky-0")
		assert.Contains(t, c.Message, `sidecar.istio.io/inject: "false"`)
	})
}

// testAmbientSharedServiceAccount: in ambient the fleet's policy keeps the
// peer identities off 8080, which also refuses a client that runs as the
// fleet's ServiceAccount; the fleet says so.
func testAmbientSharedServiceAccount(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "sharedsa")
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "sharedsa", Name: "default"}})))
	enroll(t, env.Client, "sharedsa", "ambient")
	f := fleet("sharedsa", "amb")
	f.Spec.ServiceAccountName = "default"
	require.NoError(t, env.Client.Create(ctx, f))
	h := newHarness(t, env, true)
	h.reconcile(f)
	c := condition(t, h, f, v1alpha1.ConditionMeshReady)
	require.NotNil(t, c)
	assert.Equal(t, string(v1alpha1.ReasonAmbient), c.Reason, "nothing shares the ServiceAccount yet")

	checkout := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "sharedsa", Name: "checkout", Labels: map[string]string{labels.ClientOf: "amb"}},
		Spec:       corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	require.NoError(t, env.Client.Create(ctx, checkout))
	h.reconcile(f)
	c = condition(t, h, f, v1alpha1.ConditionMeshReady)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status, "the fleet is in the mesh all the same")
	assert.Equal(t, string(v1alpha1.ReasonAmbientSharedServiceAccount), c.Reason, c.Message)
	assert.Contains(t, c.Message, "checkout")
	assert.Contains(t, c.Message, "8080")
}

// testAmbientMemberMissing: a fleet in a STRICT ambient namespace stays
// relaxed while a member it wants is missing. Between a member's old Pod
// going and its replacement appearing, and for as long as the operator's
// cache lags behind that replacement, every member it sees is captured;
// tightening then refuses the replacement's plaintext to its peers until
// istio-cni captures it (the explorer's sidecars-leave-for-ambient: sidecars
// leaving for ambient, the last replacement not yet seen).
func testAmbientMemberMissing(t *testing.T, env *testenv.Env) {
	ctx := context.Background()
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "gap")
	f := fleet("gap", "g")
	f.Spec.Replicas = ptr.To[int32](2)
	f.Annotations = map[string]string{labels.IstioControlPlane: "istio-system"} // it ran sidecars before
	require.NoError(t, env.Client.Create(ctx, f))
	enroll(t, env.Client, "gap", "ambient")
	h := newHarness(t, env, true)
	h.reconcile(f)
	playStatefulSet(t, env.Client, "gap", "g", "rev1")
	capture := func(ordinal int) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"enabled"}}}`, labels.IstioAmbientRedirection)
		require.NoError(t, env.Client.Patch(ctx, memberPod("gap", "g", ordinal, false), client.RawPatch(types.MergePatchType, []byte(patch))))
	}
	relaxed := func() bool {
		t.Helper()
		err := h.get(policy(mesh.PeerAuthenticationKind), "gap", "g-mesh")
		require.True(t, err == nil || apierrors.IsNotFound(err), "reading the PeerAuthentication: %v", err)
		return err == nil
	}
	for m := range 2 {
		runningMember(t, env.Client, "gap", "g", m, false, "rev1", "")
		capture(m)
	}
	h.reconcile(f)
	require.False(t, relaxed(), "every member captured under STRICT: 8081 is not relaxed")

	// g-1 is replaced: its old Pod is gone, its replacement not created yet.
	require.NoError(t, env.Client.Delete(ctx, memberPod("gap", "g", 1, false), client.GracePeriodSeconds(0)))
	h.reconcile(f)
	assert.True(t, relaxed(), "g-1 is missing and its replacement starts uncaptured: 8081 stays PERMISSIVE for it")

	runningMember(t, env.Client, "gap", "g", 1, false, "rev2", "")
	h.reconcile(f)
	assert.True(t, relaxed(), "the replacement runs, not captured yet")
	capture(1)
	h.reconcile(f)
	assert.False(t, relaxed(), "every member captured again")
}
