//go:build e2e

package specs

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cnifake"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/injector"
	"github.com/ericdev/fleetmesh/e2e/sailfake"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

const (
	migrateNS     = "e2e-migrate"
	migrateEdgeNS = "e2e-migrate-edge"
	migrateOther  = "e2e-migrate-other"
)

var (
	gvrNamespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvrPods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrNetpols    = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	gvrPAs        = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
	gvrAPs        = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	gvrZTunnels   = schema.GroupVersionResource{Group: "sailoperator.io", Version: "v1", Resource: "ztunnels"}
)

// TestOperatorsMigrateDataPlane runs both operators through a dataPlane
// migration ambient→sidecar→ambient with a fleet that has a routing edge.
// istio-cni is played by the test (Pods of ambient-labelled namespaces
// without a proxy are redirected while ztunnel exists), the sidecar
// injector by the test webhook, Sail by sailfake. Every state the API server
// went through is replayed and the mesh operator's guarantees are judged on
// it with shared/authzeval and cyclonus (see below).
func TestOperatorsMigrateDataPlane(t *testing.T) {
	ctx := context.Background()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	inj, err := injector.Start(ctx, bed.Cluster.REST)
	require.NoError(t, err)
	defer inj.Stop(ctx)
	stopSail, err := sailfake.Serve(ctx, bed.Cluster.REST, k8s, root)
	require.NoError(t, err)
	defer stopSail()

	for _, ns := range []string{migrateNS, migrateEdgeNS, migrateOther} {
		l := map[string]string{}
		if ns != migrateNS {
			l[labels.Mesh] = labels.MeshEnabled // enrolled by hand, as in TestOperatorsTogether
		}
		require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: l}}))
	}
	f := persistentFleet(migrateNS, "ledger")
	f.Spec.Mesh = &fleetv1.Mesh{Mode: fleetv1.MeshEnabled}
	f.Spec.Routing = &fleetv1.Routing{
		Hostnames: []string{"ledger.example.com"},
		Ingress:   &fleetv1.IngressRouting{ClassName: "nginx"},
		Source:    fleetv1.RoutingSource{Namespace: migrateEdgeNS, PodLabels: map[string]fleetv1.LabelValue{"app": "edge-proxy"}},
	}
	require.NoError(t, k8s.Create(ctx, f))
	waitFleet(t, f, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
		return meta.IsStatusConditionTrue(f.Status.Conditions, string(fleetv1.ConditionReady)), "not Ready"
	})

	// The fleet's callers as real Pods: a labelled client beside it and the
	// routing source in the edge namespace. Their operator, played by
	// rollWorkloads, rolls them as docs/servicemesh.md tells users to once
	// their namespace is labelled for sidecar injection.
	workloads := []*corev1.Pod{
		graphPod(migrateNS, "web", "default", map[string]string{"app": "web", labels.ClientOf: f.Name}),
		graphPod(migrateEdgeNS, "edge-proxy", "default", map[string]string{"app": "edge-proxy"}),
	}
	for _, p := range workloads {
		require.NoError(t, k8s.Create(ctx, p.DeepCopy()))
	}

	cniCtx, stopCNI := context.WithCancel(ctx)
	cniDone, rollDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(cniDone); cnifake.Play(cniCtx, k8s, migrateNS, migrateEdgeNS) }()
	defer func() { stopCNI(); <-cniDone; <-rollDone }()
	go func() { defer close(rollDone); rollWorkloads(cniCtx, t, workloads) }()

	sm := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Spec: meshv1.ServiceMeshSpec{Mode: meshv1.ModeManaged, DataPlane: meshv1.DataPlaneAmbient, Isolation: meshv1.IsolationNamespace}}
	require.NoError(t, k8s.Create(ctx, sm))
	defer func() {
		_ = k8s.Delete(ctx, &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}})
		waitTrue(t, 3*time.Minute, func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Name: "cluster"}, &meshv1.ServiceMesh{})
			return client.IgnoreNotFound(err) == nil && err != nil, "ServiceMesh still there"
		})
		_ = k8s.Delete(ctx, f)
	}()
	settled := func(dp string, fleetMesh string) func() (bool, string) {
		return func() (bool, string) {
			l := nsLabels(t, migrateNS)
			fl := getFleet(t, f)
			ok := l[labels.MeshDataPlane] == dp && l[labels.MeshMTLS] == "strict" && fl.Status.Mesh == fleetMesh &&
				meta.IsStatusConditionTrue(fl.Status.Conditions, string(fleetv1.ConditionReady))
			return ok, fmt.Sprintf("labels %v; fleet mesh=%q; mesh %s", l, fl.Status.Mesh, meshSummary(t))
		}
	}
	waitTrue(t, 3*time.Minute, settled("ambient", "Ambient"))

	rec := startRecorder(t, gvrNamespaces, gvrPods, gvrNetpols, gvrPAs, gvrAPs, gvrZTunnels)
	setDataPlane := func(dp meshv1.DataPlane) {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			m := &meshv1.ServiceMesh{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: "cluster"}, m); err != nil {
				return err
			}
			m.Spec.DataPlane = dp
			return k8s.Update(ctx, m)
		}))
	}
	setDataPlane(meshv1.DataPlaneSidecar)
	waitTrue(t, 4*time.Minute, settled("sidecar", "Meshed"))
	waitTrue(t, time.Minute, func() (bool, string) {
		return rec.latestCount(gvrZTunnels) == 0, "ztunnel still there: " + meshSummary(t)
	})
	setDataPlane(meshv1.DataPlaneAmbient)
	waitTrue(t, 4*time.Minute, settled("ambient", "Ambient"))
	waitTrue(t, 2*time.Minute, func() (bool, string) {
		for _, p := range memberPods(t, f) {
			if podmesh.HasProxy(&p) {
				return false, "member " + p.Name + " still has its sidecar"
			}
		}
		return true, ""
	})

	// What the mesh operator guarantees through the migration, judged on
	// every recorded state while both operators work: a member is never
	// refused for speaking plaintext (STRICT only once every member is
	// meshed), ztunnel never goes while it still captures a member, the
	// state label never says sidecar while ztunnel still delivers there,
	// and an undeclared namespace never gets past isolation.
	foreign := caller{name: "shop-1", namespace: migrateOther, serviceAccount: "fleet-operator", meshed: true,
		labels: map[string]string{"app": "edge-proxy", "app.kubernetes.io/name": "fleet-operator"}}
	// The fleet operator as its chart deploys it into a STRICT mesh: with a
	// sidecar, so it has an identity (as in TestOperatorsTogether).
	operator := caller{name: "fleet-operator", namespace: harness.FleetNamespace, serviceAccount: argValue(bed.Fleet.Args, "--operator-service-account"), meshed: true,
		labels: map[string]string{"app.kubernetes.io/name": "fleet-operator", "app.kubernetes.io/instance": "fleet-operator"}}
	lookalike := map[string]string{"app": "edge-proxy", labels.ClientOf: f.Name, "app.kubernetes.io/name": "fleet-operator"}
	forbidden := []struct {
		src  caller
		port int
		why  string
	}{
		{caller{name: "fleet-operator", namespace: harness.FleetNamespace, serviceAccount: operator.serviceAccount, labels: operator.labels}, 8080, "the operator only reads /state"},
		{caller{name: "prometheus-0", namespace: harness.FleetNamespace, serviceAccount: "prometheus", labels: map[string]string{"app": "prometheus"}}, 8081, "other Pods of the operator's namespace"},
		{caller{name: "batch-1", namespace: migrateEdgeNS, serviceAccount: "default", labels: map[string]string{"app": "batch"}}, 8080, "only the routing source's Pods of the edge namespace"},
		{caller{name: "batch-2", namespace: migrateNS, serviceAccount: "default", labels: map[string]string{"app": "batch"}}, 8080, "same namespace but not labelled a client"},
		{caller{name: "legacy-2", namespace: migrateOther, serviceAccount: "default", labels: lookalike}, 8080, "another namespace with every label"},
	}
	var wrong []string
	seen := map[string]bool{}
	report := func(s *snapshot, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if !seen[msg] {
			seen[msg] = true
			wrong = append(wrong, fmt.Sprintf("rv %d: %s", s.rv, msg))
		}
	}
	// istio-cni captures a Pod created in an ambient namespace before its
	// application starts; the test's player marks it a moment later, so a
	// Pod born into an ambient namespace while ztunnel runs counts as
	// captured until its mark says otherwise.
	known, bornCaptured := map[types.UID]bool{}, map[types.UID]bool{}
	states := rec.replay(func(s *snapshot) {
		up := s.count(gvrZTunnels) > 0
		for _, ns := range []string{migrateNS, migrateEdgeNS} {
			ambientNS := s.nsLabels(ns)[labels.IstioDataPlaneMode] == "ambient"
			for _, u := range s.in(gvrPods, ns) {
				if !known[u.GetUID()] {
					known[u.GetUID()] = true
					p := corev1.Pod{}
					_ = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
					bornCaptured[u.GetUID()] = up && ambientNS && !podmesh.HasProxy(&p)
				}
				if _, marked := u.GetAnnotations()[labels.IstioAmbientRedirection]; marked {
					bornCaptured[u.GetUID()] = false
				}
			}
		}
		if s.nsLabels(migrateNS)[labels.MeshState] != labels.MeshStateEnrolled {
			return
		}
		members := s.members(migrateNS, f.Name)
		for i := range members {
			m := &members[i]
			meshed := meshedNow(m, up) || (bornCaptured[m.UID] && up)
			if mode := authzeval.MTLSMode(s.in(gvrPAs, migrateNS), m.Labels, 8081); mode == "STRICT" && !meshed {
				report(s, "%s is STRICT while member %s is not meshed", migrateNS, m.Name)
			}
			if podmesh.Redirected(m) && !up {
				report(s, "member %s is redirected but ztunnel is gone", m.Name)
			}
			if podmesh.Redirected(m) && up && s.nsLabels(migrateNS)[labels.MeshDataPlane] == "sidecar" {
				report(s, "mesh-dataplane says sidecar while member %s is still redirected", m.Name)
			}
			captured := !podmesh.HasProxy(m) && meshed
			for _, port := range []int{8080, 8081} {
				if v := s.judge(foreign, m, port, captured, meshed); v.allowed() || (meshed && v.istio) {
					report(s, "undeclared namespace reaches %s:%d: %s", m.Name, port, v.why)
				}
			}
			// The together-spec's forbidden rows, whatever the caller's
			// meshing at this state.
			for _, f := range forbidden {
				for _, meshedSrc := range []bool{true, false} {
					src := f.src
					src.meshed = meshedSrc
					if v := s.judge(src, m, f.port, captured, meshed); v.allowed() {
						report(s, "forbidden: %s (meshed %t) reaches %s:%d (%s): %s", src, meshedSrc, m.Name, f.port, f.why, v.why)
					}
				}
			}
			for k := range members {
				if k != i {
					src := &members[k]
					peer := caller{name: src.Name, namespace: migrateNS, labels: src.Labels, serviceAccount: src.Spec.ServiceAccountName,
						meshed: meshedNow(src, up) || (bornCaptured[src.UID] && up)}
					if v := s.judge(peer, m, 8080, captured, meshed); v.allowed() {
						report(s, "forbidden: member %s reaches %s:8080 (members are not clients of their own fleet): %s", src.Name, m.Name, v.why)
					}
				}
			}
			// The access table's required rows hold at every step: the
			// peers (each as meshed as it is at this state) and the
			// operator's /state reads on 8081.
			for k := range members {
				if k == i {
					continue
				}
				src := &members[k]
				peer := caller{name: src.Name, namespace: migrateNS, labels: src.Labels, serviceAccount: src.Spec.ServiceAccountName,
					meshed: meshedNow(src, up) || (bornCaptured[src.UID] && up)}
				if v := s.judge(peer, m, 8081, captured, meshed); !v.allowed() {
					report(s, "peer %s cannot reach %s:8081: %s", src.Name, m.Name, v.why)
				}
			}
			if v := s.judge(operator, m, 8081, captured, meshed); !v.allowed() {
				report(s, "the operator cannot read %s's /state: %s", m.Name, v.why)
			}
			// The labelled client and the routing source reach the
			// application port, each as meshed as it is at this state
			// (while the user rolls one, its replacement is judged once
			// it runs).
			for _, ns := range []string{migrateNS, migrateEdgeNS} {
				for _, u := range s.in(gvrPods, ns) {
					w := corev1.Pod{}
					if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &w) != nil || !isWorkload(&w) ||
						!podmesh.Running(&w) || w.Status.PodIP == "" {
						continue
					}
					src := caller{name: w.Name, namespace: ns, labels: w.Labels, serviceAccount: w.Spec.ServiceAccountName,
						meshed: meshedNow(&w, up) || (bornCaptured[w.UID] && up)}
					if v := s.judge(src, m, 8080, captured, meshed); !v.allowed() {
						report(s, "%s (meshed %t) cannot reach %s:8080: %s", src, src.meshed, m.Name, v.why)
					}
					if v := s.judge(src, m, 8081, captured, meshed); v.allowed() {
						report(s, "forbidden: %s (meshed %t) reaches the peer port of %s: %s", src, src.meshed, m.Name, v.why)
					}
				}
			}
		}
	})
	t.Logf("judged %d observed states", states)
	if len(wrong) > 0 {
		t.Fatalf("the migration broke a guarantee:\n  %s", strings.Join(wrong, "\n  "))
	}
}

// isWorkload: one of the fleet's callers rollWorkloads keeps (the client
// or the routing source, whatever generation).
func isWorkload(p *corev1.Pod) bool {
	return p.Labels["app"] == "web" || p.Labels["app"] == "edge-proxy"
}

// rollWorkloads plays the callers' own operator: once a workload's
// namespace is labelled for sidecar injection and the workload runs no
// proxy, it is replaced by a new generation (which the injector then
// gives a sidecar), the rollout docs/servicemesh.md asks users for.
// Ambient needs no roll.
func rollWorkloads(ctx context.Context, t *testing.T, workloads []*corev1.Pod) {
	gen := map[string]int{}
	for ctx.Err() == nil {
		for _, want := range workloads {
			ns := &corev1.Namespace{}
			if k8s.Get(ctx, client.ObjectKey{Name: want.Namespace}, ns) != nil {
				continue
			}
			injecting := ns.Labels[labels.IstioInjection] == "enabled" || ns.Labels[labels.IstioRevision] != ""
			name := fmt.Sprintf("%s-%d", want.Name, gen[want.Name])
			if gen[want.Name] == 0 {
				name = want.Name
			}
			live := &corev1.Pod{}
			if k8s.Get(ctx, client.ObjectKey{Namespace: want.Namespace, Name: name}, live) != nil || !injecting || podmesh.HasProxy(live) {
				continue
			}
			gen[want.Name]++
			next := want.DeepCopy()
			next.Name = fmt.Sprintf("%s-%d", want.Name, gen[want.Name])
			// The test injector serves Pods that carry Istio's per-Pod
			// label (Istio's own would follow the namespace label alone).
			next.Labels[labels.IstioInject] = "true"
			if err := k8s.Create(ctx, next); err != nil {
				t.Logf("rolling %s: %v", name, err)
				continue
			}
			// The new generation is up before the old one goes, as a
			// Deployment's surge would have it.
			_ = waitPodIP(ctx, next)
			_ = k8s.Delete(ctx, live)
			t.Logf("rolled %s/%s into %s for the sidecar", want.Namespace, name, next.Name)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func waitPodIP(ctx context.Context, p *corev1.Pod) error {
	for ctx.Err() == nil {
		got := &corev1.Pod{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(p), got) == nil && got.Status.PodIP != "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ctx.Err()
}

// meshedNow: the Pod speaks mTLS at this state (a proxy, or redirection
// while ztunnel runs).
func meshedNow(p *corev1.Pod, ztunnelUp bool) bool {
	return podmesh.HasProxy(p) || (podmesh.Redirected(p) && ztunnelUp)
}

// recorder keeps every change of the watched resources so that the states
// the API server went through can be replayed in resourceVersion order.
type recorder struct {
	mu      sync.Mutex
	initial []recEvent
	events  []recEvent
	latest  map[schema.GroupVersionResource]map[string]bool
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

type recEvent struct {
	rv  int64
	gvr schema.GroupVersionResource
	typ watch.EventType
	obj *unstructured.Unstructured
}

func startRecorder(t *testing.T, gvrs ...schema.GroupVersionResource) *recorder {
	t.Helper()
	dc, err := dynamic.NewForConfig(bed.Cluster.REST)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{stop: cancel, latest: map[schema.GroupVersionResource]map[string]bool{}}
	for _, gvr := range gvrs {
		list, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
		require.NoError(t, err, gvr.String())
		r.latest[gvr] = map[string]bool{}
		for i := range list.Items {
			r.initial = append(r.initial, recEvent{gvr: gvr, typ: watch.Added, obj: &list.Items[i]})
			r.latest[gvr][list.Items[i].GetNamespace()+"/"+list.Items[i].GetName()] = true
		}
		w, err := dc.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		require.NoError(t, err, gvr.String())
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					u, ok := ev.Object.(*unstructured.Unstructured)
					if !ok || ev.Type == watch.Bookmark || ev.Type == watch.Error {
						continue
					}
					rv, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
					r.mu.Lock()
					r.events = append(r.events, recEvent{rv: rv, gvr: gvr, typ: ev.Type, obj: u})
					k := u.GetNamespace() + "/" + u.GetName()
					if ev.Type == watch.Deleted {
						delete(r.latest[gvr], k)
					} else {
						r.latest[gvr][k] = true
					}
					r.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); r.wg.Wait() })
	return r
}

func (r *recorder) latestCount(gvr schema.GroupVersionResource) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.latest[gvr])
}

// snapshot is the watched part of the cluster at one resourceVersion.
type snapshot struct {
	rv   int64
	objs map[schema.GroupVersionResource]map[string]*unstructured.Unstructured
}

func (r *recorder) replay(check func(*snapshot)) int {
	time.Sleep(500 * time.Millisecond)
	r.mu.Lock()
	evs := append([]recEvent(nil), r.events...)
	r.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].rv < evs[j].rv })
	s := &snapshot{objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{}}
	apply := func(e recEvent) {
		if s.objs[e.gvr] == nil {
			s.objs[e.gvr] = map[string]*unstructured.Unstructured{}
		}
		k := e.obj.GetNamespace() + "/" + e.obj.GetName()
		if e.typ == watch.Deleted {
			delete(s.objs[e.gvr], k)
			return
		}
		s.objs[e.gvr][k] = e.obj
	}
	for _, e := range r.initial {
		apply(e)
	}
	check(s)
	for _, e := range evs {
		apply(e)
		s.rv = e.rv
		check(s)
	}
	return len(evs) + 1
}

func (s *snapshot) in(gvr schema.GroupVersionResource, namespace string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, u := range s.objs[gvr] {
		if u.GetNamespace() == namespace {
			out = append(out, *u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func (s *snapshot) count(gvr schema.GroupVersionResource) int {
	n := 0
	for _, u := range s.objs[gvr] {
		if u.GetDeletionTimestamp() == nil {
			n++
		}
	}
	return n
}

func (s *snapshot) nsLabels(name string) map[string]string {
	if u := s.objs[gvrNamespaces]["/"+name]; u != nil {
		return u.GetLabels()
	}
	return map[string]string{labels.NamespaceName: name}
}

// members are the fleet's running member Pods.
func (s *snapshot) members(namespace, fleet string) []corev1.Pod {
	var out []corev1.Pod
	for _, u := range s.in(gvrPods, namespace) {
		p := corev1.Pod{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil {
			continue
		}
		if p.Labels["app.kubernetes.io/instance"] == fleet && podmesh.Running(&p) && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out
}

// judge is verdict_test.go's judge on a recorded state, given whether the
// destination is captured by ztunnel (dstAmbient: meshed callers arrive on
// HBONE) and meshed at all; a destination that is not enforces no Istio
// policy.
func (s *snapshot) judge(src caller, dst *corev1.Pod, port int, dstAmbient, dstMeshed bool) verdict {
	var policies []*networkingv1.NetworkPolicy
	for _, ns := range uniq(src.namespace, dst.Namespace) {
		for _, u := range s.in(gvrNetpols, ns) {
			np := &networkingv1.NetworkPolicy{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, np) == nil {
				policies = append(policies, np)
			}
		}
	}
	wirePort := port
	if src.meshed && dstAmbient {
		wirePort = hbonePort
	}
	np := matcher.BuildNetworkPolicies(false, policies).IsTrafficAllowed(&matcher.Traffic{
		Source: &matcher.TrafficPeer{IP: "127.250.0.1", Internal: &matcher.InternalPeer{
			Namespace: src.namespace, NamespaceLabels: s.nsLabels(src.namespace), PodLabels: src.labels}},
		Destination: &matcher.TrafficPeer{IP: dst.Status.PodIP, Internal: &matcher.InternalPeer{
			Namespace: dst.Namespace, NamespaceLabels: s.nsLabels(dst.Namespace), PodLabels: dst.Labels}},
		ResolvedPort: wirePort,
		Protocol:     corev1.ProtocolTCP,
	})
	if !dstMeshed {
		return verdict{network: np.IsAllowed(), istio: true,
			why: fmt.Sprintf("network policy on :%d %v; istio: destination not meshed, nothing enforced", wirePort, np.IsAllowed())}
	}
	var aps []authzeval.Policy
	for _, ap := range s.in(gvrAPs, dst.Namespace) {
		aps = append(aps, authzeval.FromUnstructured(&ap, dst.Labels))
	}
	req := authzeval.Request{MTLS: src.meshed, Port: port}
	if src.meshed {
		req.Principal, req.Namespace = src.principal(), src.namespace
	}
	mode := authzeval.MTLSMode(s.in(gvrPAs, dst.Namespace), dst.Labels, port)
	istio := authzeval.Evaluate(mode, aps, req)
	return verdict{network: np.IsAllowed(), istio: istio.Allowed,
		why: fmt.Sprintf("network policy on :%d %v; istio (%s) %s", wirePort, np.IsAllowed(), mode, istio.Why)}
}
