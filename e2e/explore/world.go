package explore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
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

	watched = []schema.GroupVersionResource{gvrPods, gvrNamespaces, gvrPVCs, gvrNetpols, gvrPAs, gvrAPs, gvrFleets, gvrZTunnels}
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
}

// recorder keeps every change of the watched resources, so the states the
// API server went through can be replayed in resourceVersion order.
type recorder struct {
	mu      sync.Mutex
	initial []event
	events  []event
	step    int
	lost    []string // watches that ended early
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
		for i := range list.Items {
			r.initial = append(r.initial, event{gvr: gvr, typ: watch.Added, obj: &list.Items[i]})
		}
		w, err := dyn.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			cancel()
			return nil, fmt.Errorf("watching %s: %w", gvr.Resource, err)
		}
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
						// A CRD removed by an action ends its watch: its
						// objects are gone with it, which the replay shows
						// as the CRD's absence.
						r.mu.Lock()
						r.lost = append(r.lost, gvr.Resource)
						r.mu.Unlock()
						return
					}
					u, isObj := ev.Object.(*unstructured.Unstructured)
					if !isObj || ev.Type == watch.Bookmark || ev.Type == watch.Error {
						continue
					}
					rv, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
					r.mu.Lock()
					r.events = append(r.events, event{rv: rv, gvr: gvr, typ: ev.Type, obj: u, step: r.step})
					r.mu.Unlock()
				}
			}
		}()
	}
	return r, nil
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
	s := &snapshot{objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{}}
	apply := func(e event) {
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
		s.rv, s.step, s.last = e.rv, e.step, fmt.Sprintf("%s %s %s/%s", e.typ, e.gvr.Resource, e.obj.GetNamespace(), e.obj.GetName())
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
	if !np.IsAllowed() {
		return verdict{false, fmt.Sprintf("NetworkPolicy denies :%d", wirePort)}
	}
	if !dstMeshed {
		return verdict{true, fmt.Sprintf("NetworkPolicy admits :%d; destination not meshed", wirePort)}
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
	return verdict{d.Allowed, fmt.Sprintf("NetworkPolicy admits :%d; istio (%s) %s", wirePort, mode, d.Why)}
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
