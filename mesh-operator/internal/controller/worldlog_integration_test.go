//go:build integration

package controller

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// Resources a transition test watches.
var (
	gvrNamespaces     = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	gvrPods           = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrDeployments    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	gvrPeerAuths      = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"}
	gvrAuthzPolicies  = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}
	gvrServiceMeshes  = schema.GroupVersionResource{Group: "core.navique.com", Version: "v1alpha1", Resource: "servicemeshes"}
	gvrZTunnels       = schema.GroupVersionResource{Group: "sailoperator.io", Version: "v1", Resource: "ztunnels"}
	gvrIstioCNIs      = schema.GroupVersionResource{Group: "sailoperator.io", Version: "v1", Resource: "istiocnis"}
	gvrIstios         = schema.GroupVersionResource{Group: "sailoperator.io", Version: "v1", Resource: "istios"}
	transitionWatched = []schema.GroupVersionResource{gvrNamespaces, gvrPods, gvrDeployments, gvrPeerAuths, gvrAuthzPolicies, gvrServiceMeshes}
)

// worldLog records every change of the watched resources from the moment
// it starts, so that a test can replay the cluster as it was after each
// write (each resourceVersion, which one etcd orders globally) and judge
// every intermediate state, not only the end state.
type worldLog struct {
	t       *testing.T
	mu      sync.Mutex
	initial []logEvent
	events  []logEvent
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type logEvent struct {
	rv  int64
	gvr schema.GroupVersionResource
	typ watch.EventType
	obj *unstructured.Unstructured
}

func rvOf(u *unstructured.Unstructured) int64 {
	n, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
	return n
}

// startWorldLog lists each resource and watches it from the list's version.
func startWorldLog(t *testing.T, cfg *rest.Config, gvrs ...schema.GroupVersionResource) *worldLog {
	t.Helper()
	dc, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	l := &worldLog{t: t, cancel: cancel}
	for _, gvr := range gvrs {
		list, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
		require.NoError(t, err, gvr.String())
		for i := range list.Items {
			l.initial = append(l.initial, logEvent{rv: 0, gvr: gvr, typ: watch.Added, obj: &list.Items[i]})
		}
		w, err := dc.Resource(gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		require.NoError(t, err, gvr.String())
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
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
					l.mu.Lock()
					l.events = append(l.events, logEvent{rv: rvOf(u), gvr: gvr, typ: ev.Type, obj: u})
					l.mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(l.stop)
	return l
}

func (l *worldLog) stop() {
	l.cancel()
	l.wg.Wait()
}

// world is the cluster at one resourceVersion, as far as it is watched.
type world struct {
	rv   int64
	objs map[schema.GroupVersionResource]map[string]*unstructured.Unstructured
}

func key(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

// replay calls check on the state after every recorded change, in the
// order of the changes. Events are given a moment to arrive first.
func (l *worldLog) replay(check func(w *world)) int {
	time.Sleep(300 * time.Millisecond)
	l.mu.Lock()
	evs := append([]logEvent(nil), l.events...)
	l.mu.Unlock()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].rv < evs[j].rv })
	w := &world{objs: map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{}}
	apply := func(e logEvent) {
		m := w.objs[e.gvr]
		if m == nil {
			m = map[string]*unstructured.Unstructured{}
			w.objs[e.gvr] = m
		}
		if e.typ == watch.Deleted {
			delete(m, key(e.obj))
			return
		}
		m[key(e.obj)] = e.obj
	}
	for _, e := range l.initial {
		apply(e)
	}
	check(w)
	n := 1
	for _, e := range evs {
		apply(e)
		w.rv = e.rv
		check(w)
		n++
	}
	return n
}

// in lists the objects of a resource in one namespace ("" for cluster-scoped).
func (w *world) in(gvr schema.GroupVersionResource, namespace string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, u := range w.objs[gvr] {
		if u.GetNamespace() == namespace {
			out = append(out, *u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func (w *world) get(gvr schema.GroupVersionResource, namespace, name string) *unstructured.Unstructured {
	return w.objs[gvr][namespace+"/"+name]
}

// pods are the running Pods of a namespace.
func (w *world) pods(namespace string) []corev1.Pod {
	var out []corev1.Pod
	for _, u := range w.in(gvrPods, namespace) {
		p := corev1.Pod{}
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p) == nil && podmesh.Running(&p) {
			out = append(out, p)
		}
	}
	return out
}

// nsLabels are a namespace's labels (nil when it does not exist).
func (w *world) nsLabels(name string) map[string]string {
	u := w.get(gvrNamespaces, "", name)
	if u == nil {
		return nil
	}
	return u.GetLabels()
}

// paMode is the mode of the operator's mesh-mtls ("" without one).
func (w *world) paMode(namespace string) string {
	u := w.get(gvrPeerAuths, namespace, enroll.PeerAuthenticationName)
	if u == nil {
		return ""
	}
	m, _, _ := unstructured.NestedString(u.Object, "spec", "mtls", "mode")
	return m
}

// judge decides with shared/authzeval whether a request reaches a workload
// with podLabels in namespace, under the live PeerAuthentications and
// AuthorizationPolicies of that namespace.
func (w *world) judge(namespace string, podLabels map[string]string, req authzeval.Request) authzeval.Decision {
	mode := authzeval.MTLSMode(w.in(gvrPeerAuths, namespace), podLabels, req.Port)
	var pols []authzeval.Policy
	for _, u := range w.in(gvrAuthzPolicies, namespace) {
		pols = append(pols, authzeval.FromUnstructured(&u, podLabels))
	}
	return authzeval.Evaluate(mode, pols, req)
}

// caller is the request a Pod makes: mTLS with its identity when it is
// meshed in the data plane that runs, plaintext otherwise.
func caller(p *corev1.Pod, dp podmesh.DataPlane, port int) authzeval.Request {
	if !podmesh.MeshedIn(dp, p) {
		return authzeval.Request{Port: port}
	}
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return authzeval.Request{MTLS: true, Principal: fmt.Sprintf("cluster.local/ns/%s/sa/%s", p.Namespace, sa), Namespace: p.Namespace, Port: port}
}

// violations collects what went wrong at which state, reported once.
type violations struct {
	t    *testing.T
	seen map[string]bool
	list []string
}

func (v *violations) add(w *world, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if v.seen == nil {
		v.seen = map[string]bool{}
	}
	if v.seen[msg] {
		return
	}
	v.seen[msg] = true
	v.list = append(v.list, fmt.Sprintf("at resourceVersion %d: %s", w.rv, msg))
}

func (v *violations) assertNone(states int) {
	v.t.Helper()
	v.t.Logf("judged %d observed states", states)
	if len(v.list) > 0 {
		v.t.Fatalf("%d violations in the observed states:\n%s", len(v.list), joinLines(v.list))
	}
}

func joinLines(l []string) string {
	out := ""
	for _, s := range l {
		out += "  " + s + "\n"
	}
	return out
}
