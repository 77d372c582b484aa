package explore

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// What the recorder watches: everything the invariants judge.
var (
	gvrPods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrNamespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvrPVCs       = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	gvrNetpols    = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	gvrPAs        = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
	gvrAPs        = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	gvrFleets     = schema.GroupVersionResource{Group: "celld.eric.dev", Version: "v1alpha1", Resource: "celldfleets"}
	gvrZTunnels   = schema.GroupVersionResource{Group: "sailoperator.io", Version: "v1", Resource: "ztunnels"}
	gvrMeshes     = schema.GroupVersionResource{Group: "core.navique.com", Version: "v1alpha1", Resource: "servicemeshes"}

	gvrCRDs = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

	watched = []schema.GroupVersionResource{gvrPods, gvrNamespaces, gvrPVCs, gvrNetpols, gvrPAs, gvrAPs, gvrFleets, gvrZTunnels, gvrMeshes, gvrCRDs}
)

// hbonePort is where ztunnel delivers ambient traffic to a captured Pod.
const hbonePort = 15008

type event struct {
	rv  int64
	gvr schema.GroupVersionResource
	typ watch.EventType
	obj *unstructured.Unstructured
	// step is the index of the last action started when the event came.
	step int
	// at is when the recorder saw it.
	at time.Time
	// listed: found by a list after a watch ended, so recorded at the
	// list's resourceVersion, not at the change's own.
	listed bool
}

// recorder keeps every change of the watched resources, so the states the
// API server went through can be replayed in resourceVersion order.
type recorder struct {
	mu      sync.Mutex
	initial []event
	events  []event
	step    int
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startRecorder(ctx context.Context, dyn dynamic.Interface) (*recorder, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &recorder{cancel: cancel}
	for _, gvr := range watched {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("listing %s: %w", gvr.Resource, err)
		}
		known := map[string]*unstructured.Unstructured{}
		for i := range list.Items {
			r.initial = append(r.initial, event{gvr: gvr, typ: watch.Added, obj: &list.Items[i]})
			known[key(&list.Items[i])] = &list.Items[i]
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.follow(ctx, dyn, gvr, list.GetResourceVersion(), known)
		}()
	}
	return r, nil
}

// Events the recorder adds when a watched resource stops or starts being
// served (an action removed or restored its CRD): the replay shows the
// resource absent in between.
const (
	resourceLost  watch.EventType = "LOST"
	resourceFound watch.EventType = "FOUND"
)

func key(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

// follow records gvr's changes from rv on. When its watch ends, the
// resource is listed again: what changed meanwhile is recorded at the
// list's resourceVersion; a resource no longer served is recorded as lost
// and listed again every second until it is back.
func (r *recorder) follow(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, rv string, known map[string]*unstructured.Unstructured) {
	record := func(e event) {
		r.mu.Lock()
		e.step, e.at = r.step, time.Now()
		r.events = append(r.events, e)
		r.mu.Unlock()
	}
	for ctx.Err() == nil {
		if w, err := dyn.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: rv}); err == nil {
			for ev := range w.ResultChan() {
				u, isObj := ev.Object.(*unstructured.Unstructured)
				if !isObj || ev.Type == watch.Bookmark || ev.Type == watch.Error {
					continue
				}
				n, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
				rv = u.GetResourceVersion()
				if ev.Type == watch.Deleted {
					delete(known, key(u))
				} else {
					known[key(u)] = u
				}
				record(event{rv: n, gvr: gvr, typ: ev.Type, obj: u})
			}
			w.Stop()
		}
		if ctx.Err() != nil {
			return
		}
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
				r.lose(ctx, dyn, gvr, known, record)
				continue
			}
			time.Sleep(time.Second)
			continue
		}
		rv = list.GetResourceVersion()
		r.resync(gvr, list, known, record)
	}
}

// lose records gvr as no longer served and waits until it is served again.
func (r *recorder) lose(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, known map[string]*unstructured.Unstructured, record func(event)) {
	// The state the loss is placed at: the cluster's resourceVersion now.
	if ns, err := dyn.Resource(gvrNamespaces).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
		n, _ := strconv.ParseInt(ns.GetResourceVersion(), 10, 64)
		record(event{rv: n, gvr: gvr, typ: resourceLost, obj: &unstructured.Unstructured{}})
	}
	clear(known)
	for ctx.Err() == nil {
		time.Sleep(time.Second)
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		n, _ := strconv.ParseInt(list.GetResourceVersion(), 10, 64)
		record(event{rv: n, gvr: gvr, typ: resourceFound, obj: &unstructured.Unstructured{}})
		r.resync(gvr, list, known, record)
		return
	}
}

// resync records, at the list's resourceVersion, what a list shows that
// differs from what was known.
func (r *recorder) resync(gvr schema.GroupVersionResource, list *unstructured.UnstructuredList, known map[string]*unstructured.Unstructured, record func(event)) {
	n, _ := strconv.ParseInt(list.GetResourceVersion(), 10, 64)
	listed := map[string]bool{}
	for i := range list.Items {
		u := &list.Items[i]
		listed[key(u)] = true
		if old := known[key(u)]; old == nil || old.GetResourceVersion() != u.GetResourceVersion() {
			known[key(u)] = u
			record(event{rv: n, gvr: gvr, typ: watch.Modified, obj: u, listed: true})
		}
	}
	for k, u := range known {
		if !listed[k] {
			delete(known, k)
			record(event{rv: n, gvr: gvr, typ: watch.Deleted, obj: u, listed: true})
		}
	}
}

// previous is the version of events[i]'s object seen before it (nil if
// none); the caller holds mu.
func (r *recorder) previous(i int) *unstructured.Unstructured {
	e := r.events[i]
	same := func(o event) bool {
		return o.gvr == e.gvr && o.obj.GetNamespace() == e.obj.GetNamespace() && o.obj.GetName() == e.obj.GetName()
	}
	for j := i - 1; j >= 0; j-- {
		if same(r.events[j]) {
			return r.events[j].obj
		}
	}
	for _, o := range r.initial {
		if same(o) {
			return o.obj
		}
	}
	return nil
}

func (r *recorder) setStep(i int) {
	r.mu.Lock()
	r.step = i
	r.mu.Unlock()
}

func (r *recorder) stop() { r.cancel(); r.wg.Wait() }

// replay calls check on the initial state and on the state after each
// recorded event, in resourceVersion order.
func (r *recorder) replay(check func(*snapshot)) int {
	r.mu.Lock()
	evs := append([]event(nil), r.events...)
	r.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].rv < evs[j].rv })
	s := &snapshot{objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{},
		absent: map[schema.GroupVersionResource]bool{}, restored: map[schema.GroupVersionResource]time.Time{}}
	apply := func(e event) {
		if s.objs[e.gvr] == nil {
			s.objs[e.gvr] = map[string]*unstructured.Unstructured{}
		}
		// A CRD being deleted takes its objects one by one before the
		// resource stops being served: from its deletion on, the resource
		// counts as absent.
		if e.gvr == gvrCRDs {
			for _, g := range watched {
				if e.obj.GetName() == g.Resource+"."+g.Group && (e.typ == watch.Deleted || e.obj.GetDeletionTimestamp() != nil) {
					s.absent[g] = true
				}
			}
		}
		switch e.typ {
		case resourceLost:
			s.objs[e.gvr] = map[string]*unstructured.Unstructured{}
			s.absent[e.gvr] = true
		case resourceFound:
			delete(s.absent, e.gvr)
			s.restored[e.gvr] = e.at
		case watch.Deleted:
			delete(s.objs[e.gvr], key(e.obj))
		default:
			s.objs[e.gvr][key(e.obj)] = e.obj
		}
	}
	for _, e := range r.initial {
		apply(e)
	}
	check(s)
	for _, e := range evs {
		apply(e)
		s.rv, s.step, s.at, s.last = e.rv, e.step, e.at, fmt.Sprintf("%s %s %s/%s", e.typ, e.gvr.Resource, e.obj.GetNamespace(), e.obj.GetName())
		if e.listed {
			s.last += " (found by a relist)"
		}
		check(s)
	}
	return len(evs) + 1
}

// snapshot is the watched part of the cluster at one resourceVersion.
type snapshot struct {
	rv   int64
	step int
	last string // the event that led to this state
	objs map[schema.GroupVersionResource]map[string]*unstructured.Unstructured
	// absent: resources not served at this state (their CRD removed).
	absent map[schema.GroupVersionResource]bool
	// restored: when a resource absent before was served again.
	restored map[schema.GroupVersionResource]time.Time
	// at: when the event leading to this state was seen.
	at time.Time
}

// istioGrace is how long after Istio's API is back the operators may take
// to apply their policies again (they learn of it on their next
// reconcile); forbidden connections are judged again after it, and at rest
// always.
const istioGrace = 30 * time.Second

// istioPoliciesMissing: Istio's policies are gone with its API, or it has
// only just come back.
func (s *snapshot) istioPoliciesMissing() bool {
	back, ok := s.restored[gvrAPs]
	return s.absent[gvrAPs] || (ok && s.at.Sub(back) < istioGrace)
}

// serviceMesh is the cluster's ServiceMesh, nil when there is none.
func (s *snapshot) serviceMesh() *meshv1.ServiceMesh {
	u := s.objs[gvrMeshes]["/"+meshv1.SingletonName]
	if u == nil {
		return nil
	}
	m := &meshv1.ServiceMesh{}
	if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, m) != nil {
		return nil
	}
	return m
}

// meshPart is a copy of what releasedWhileHeld compares (namespaces, Istio
// policies, the ServiceMesh): replay changes the snapshot in place.
func (s *snapshot) meshPart() *snapshot {
	out := &snapshot{rv: s.rv, step: s.step, last: s.last, at: s.at, objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{},
		absent: maps.Clone(s.absent), restored: maps.Clone(s.restored)}
	for _, gvr := range []schema.GroupVersionResource{gvrNamespaces, gvrPAs, gvrAPs, gvrMeshes, gvrNetpols, gvrFleets} {
		out.objs[gvr] = maps.Clone(s.objs[gvr])
	}
	return out
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

func (s *snapshot) nsLabels(name string) map[string]string {
	if u := s.objs[gvrNamespaces]["/"+name]; u != nil {
		return u.GetLabels()
	}
	return map[string]string{labels.NamespaceName: name}
}

func (s *snapshot) fleets(namespace string) []fleetv1.CelldFleet {
	var out []fleetv1.CelldFleet
	for _, u := range s.in(gvrFleets, namespace) {
		f := fleetv1.CelldFleet{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &f) == nil {
			out = append(out, f)
		}
	}
	return out
}

// pods are the namespace's Pods that take part in traffic: running, with an
// address, not being deleted.
func (s *snapshot) pods(namespace string) []corev1.Pod {
	var out []corev1.Pod
	for _, u := range s.in(gvrPods, namespace) {
		p := corev1.Pod{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) != nil {
			continue
		}
		if podmesh.Running(&p) && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out
}

// caller is the source of a connection: a live Pod, or the fleet operator
// (a process in the bed, modelled as the Pod its chart would run: in the
// mesh with a sidecar, as docs/install.md asks under STRICT mTLS).
type caller struct {
	name, namespace string
	labels          map[string]string
	serviceAccount  string
	meshed          bool
}

func (c caller) String() string { return c.namespace + "/" + c.name }

func podCaller(p *corev1.Pod, ambient bool) caller {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	dp := podmesh.DataPlaneSidecar
	if ambient {
		dp = podmesh.DataPlaneAmbient
	}
	return caller{name: p.Name, namespace: p.Namespace, labels: p.Labels, serviceAccount: sa, meshed: podmesh.MeshedIn(dp, p)}
}

// verdict is what both layers decide about one connection: the
// NetworkPolicies (cyclonus, as a conformant CNI would) and the Istio
// policies (shared/authzeval, as the proxy or ztunnel would).
type verdict struct {
	allowed bool
	why     string
	// hbone: the NetworkPolicies decided on HBONE (15008), the tunnel of a
	// meshed caller to a captured member, not on the port itself.
	hbone bool
}

// judge decides a TCP connection from src to port of the live Pod dst.
// ambient: ztunnel is up, so a redirected Pod is captured.
func (s *snapshot) judge(src caller, dst *corev1.Pod, port int, ambient bool) verdict {
	var policies []*networkingv1.NetworkPolicy
	for _, ns := range uniq(src.namespace, dst.Namespace) {
		for _, u := range s.in(gvrNetpols, ns) {
			np := &networkingv1.NetworkPolicy{}
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, np) == nil {
				policies = append(policies, np)
			}
		}
	}
	dp := podmesh.DataPlaneSidecar
	if ambient {
		dp = podmesh.DataPlaneAmbient
	}
	dstMeshed := podmesh.MeshedIn(dp, dst)
	dstCaptured := dstMeshed && podmesh.Of(dst) == podmesh.Ambient
	wirePort := port
	if src.meshed && dstCaptured {
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
	hbone := wirePort == hbonePort
	if !np.IsAllowed() {
		return verdict{false, fmt.Sprintf("NetworkPolicy denies :%d", wirePort), hbone}
	}
	if !dstMeshed {
		return verdict{true, fmt.Sprintf("NetworkPolicy admits :%d; destination not meshed", wirePort), hbone}
	}
	var aps []authzeval.Policy
	for _, ap := range s.in(gvrAPs, dst.Namespace) {
		aps = append(aps, authzeval.FromUnstructured(&ap, dst.Labels))
	}
	req := authzeval.Request{MTLS: src.meshed, Port: port}
	if src.meshed {
		req.Principal, req.Namespace = fmt.Sprintf("cluster.local/ns/%s/sa/%s", src.namespace, src.serviceAccount), src.namespace
	}
	mode := authzeval.MTLSMode(s.in(gvrPAs, dst.Namespace), dst.Labels, port)
	d := authzeval.Evaluate(mode, aps, req)
	return verdict{d.Allowed, fmt.Sprintf("NetworkPolicy admits :%d; istio (%s) %s", wirePort, mode, d.Why), hbone}
}

func uniq(values ...string) []string {
	var out []string
	for _, v := range values {
		dup := false
		for _, o := range out {
			dup = dup || o == v
		}
		if !dup {
			out = append(out, v)
		}
	}
	return out
}

// describe is one line of a state, for the trace printed with a violation:
// the event that led to it and, in namespace ns, each Pod (P: runs a
// proxy, C: redirected to ztunnel, T: terminating, ~: not running with an
// address yet), the Istio policies, the namespace's data plane and mTLS
// labels, and whether a ZTunnel exists.
func (s *snapshot) describe(ns string) string {
	var pods []string
	for _, u := range s.in(gvrPods, ns) {
		p := &corev1.Pod{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p) != nil {
			continue
		}
		flags := ""
		for _, f := range []struct {
			on bool
			c  string
		}{{podmesh.HasProxy(p), "P"}, {podmesh.Redirected(p), "C"}, {p.DeletionTimestamp != nil, "T"},
			{p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "", "~"}} {
			if f.on {
				flags += f.c
			}
		}
		uid := string(p.UID)
		pods = append(pods, fmt.Sprintf("%s[%s]%s", p.Name, uid[max(0, len(uid)-4):], flags))
	}
	names := func(gvr schema.GroupVersionResource) []string {
		var out []string
		for _, u := range s.in(gvr, ns) {
			out = append(out, u.GetName())
		}
		return out
	}
	nl := s.nsLabels(ns)
	return fmt.Sprintf("rv %d step %d %s | pods %v | PA %v AP %v | ns %s=%q %s=%q | ztunnel %v",
		s.rv, s.step, s.last, pods, names(gvrPAs), names(gvrAPs),
		labels.IstioDataPlaneMode, nl[labels.IstioDataPlaneMode], labels.MeshMTLS, nl[labels.MeshMTLS], len(s.objs[gvrZTunnels]) > 0)
}
