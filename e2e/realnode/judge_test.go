//go:build realnode

package realnode

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// clusterState is one observed state of what decides a member's ingress:
// every Pod, NetworkPolicy and namespace's labels, as the watches saw them
// after one event.
type clusterState struct {
	pods       map[string]*corev1.Pod
	policies   map[string]*networkingv1.NetworkPolicy
	namespaces map[string]map[string]string
}

// denial is a (caller, port) the reference table denies on every member.
type denial struct {
	Caller caller
	Port   int
}

// placeholder addresses for a caller or member without a Pod IP in a state:
// the fleet's policies have no ipBlock ingress peer outside ambient, so the
// address decides nothing there.
const callerPlaceholderIP, memberPlaceholderIP = "10.244.0.250", "10.244.0.251"

// judgeState evaluates one state with cyclonus (the NetworkPolicy engine the
// project judges with, as a conformant CNI would) and returns a line for
// every member port open to a caller the reference denies.
func judgeState(s clusterState, ns, fleet string, denied []denial) []string {
	var policies []*networkingv1.NetworkPolicy
	for _, p := range s.policies {
		policies = append(policies, p)
	}
	engine := matcher.BuildNetworkPolicies(false, policies)
	nsLabels := func(name string) map[string]string {
		if l, ok := s.namespaces[name]; ok {
			return l
		}
		return map[string]string{"kubernetes.io/metadata.name": name}
	}
	var out []string
	for _, m := range s.pods {
		if m.Namespace != ns || m.Labels["app.kubernetes.io/instance"] != fleet || m.Labels["app.kubernetes.io/name"] != "celld" {
			continue
		}
		dstIP := m.Status.PodIP
		if dstIP == "" {
			dstIP = memberPlaceholderIP
		}
		for _, d := range denied {
			srcIP, srcLabels := callerPlaceholderIP, d.Caller.Labels
			for _, p := range s.pods {
				if p.Namespace == d.Caller.NS && strings.HasPrefix(p.Name, d.Caller.Name+"-") && p.Status.PodIP != "" {
					srcIP = p.Status.PodIP
				}
			}
			v := engine.IsTrafficAllowed(&matcher.Traffic{
				Source: &matcher.TrafficPeer{IP: srcIP, Internal: &matcher.InternalPeer{
					Namespace: d.Caller.NS, NamespaceLabels: nsLabels(d.Caller.NS), PodLabels: srcLabels}},
				Destination: &matcher.TrafficPeer{IP: dstIP, Internal: &matcher.InternalPeer{
					Namespace: m.Namespace, NamespaceLabels: nsLabels(m.Namespace), PodLabels: m.Labels}},
				ResolvedPort: d.Port,
				Protocol:     corev1.ProtocolTCP,
			})
			if v.IsAllowed() {
				out = append(out, fmt.Sprintf("%s/%s -> %s:%d is open, the reference table denies it", d.Caller.NS, d.Caller.Name, m.Name, d.Port))
			}
		}
	}
	sort.Strings(out)
	return out
}

// deniedByReference: the (caller, port) pairs the packet table denied on
// every member.
func deniedByReference(callers []caller, ref []row) []denial {
	open := map[string]bool{}
	seen := map[string]bool{}
	for _, r := range ref {
		k := fmt.Sprintf("%s|%d", r.Caller, r.Port)
		seen[k] = true
		if r.Packet {
			open[k] = true
		}
	}
	var out []denial
	for _, c := range callers {
		for _, port := range []int{8080, 8081} {
			k := fmt.Sprintf("%s/%s|%d", c.NS, c.Name, port)
			if seen[k] && !open[k] {
				out = append(out, denial{Caller: c, Port: port})
			}
		}
	}
	return out
}

// stateWatch watches every Pod, NetworkPolicy and Namespace while a spec
// changes things and judges every state it observes (each event once the
// three caches are synced), as the local e2e judges its recorded states.
type stateWatch struct {
	ns, fleet string
	denied    []denial

	mu         sync.Mutex
	synced     bool
	state      clusterState
	states     int
	violations []string
	seen       map[string]bool
	cancel     context.CancelFunc
	done       chan struct{}
}

// watchStates starts judging; Stop ends it and fails t on any violation.
// denied empty means: what cyclonus denies in the first synced state (the
// settled policy before the change, whose shape a packet table confirmed).
func watchStates(t *testing.T, e *env, ns, fleet string, callers []caller, denied []denial) *stateWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &stateWatch{ns: ns, fleet: fleet, denied: denied, cancel: cancel, done: make(chan struct{}), seen: map[string]bool{},
		state: clusterState{pods: map[string]*corev1.Pod{}, policies: map[string]*networkingv1.NetworkPolicy{}, namespaces: map[string]map[string]string{}}}
	factory := informers.NewSharedInformerFactory(e.cs, 0)
	key := func(o metav1.Object) string { return o.GetNamespace() + "/" + o.GetName() }
	handler := func(apply func(obj any, deleted bool)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.observe(func() { apply(obj, false) }) },
			UpdateFunc: func(_, obj any) { w.observe(func() { apply(obj, false) }) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				w.observe(func() { apply(obj, true) })
			},
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(handler(func(obj any, deleted bool) {
		if p, ok := obj.(*corev1.Pod); ok {
			if deleted {
				delete(w.state.pods, key(p))
			} else {
				w.state.pods[key(p)] = p
			}
		}
	}))
	_, _ = factory.Networking().V1().NetworkPolicies().Informer().AddEventHandler(handler(func(obj any, deleted bool) {
		if p, ok := obj.(*networkingv1.NetworkPolicy); ok {
			if deleted {
				delete(w.state.policies, key(p))
			} else {
				w.state.policies[key(p)] = p
			}
		}
	}))
	_, _ = factory.Core().V1().Namespaces().Informer().AddEventHandler(handler(func(obj any, deleted bool) {
		if n, ok := obj.(*corev1.Namespace); ok {
			if deleted {
				delete(w.state.namespaces, n.Name)
			} else {
				w.state.namespaces[n.Name] = n.Labels
			}
		}
	}))
	factory.Start(ctx.Done())
	synced := factory.WaitForCacheSync(ctx.Done())
	for typ, ok := range synced {
		if !ok {
			cancel()
			t.Fatalf("state watch: %v did not sync", typ)
		}
	}
	// The caches are synced, their handlers not necessarily yet: the
	// first judged state is the caches' own content (the first run judged
	// the roll against a state with Pods and no policy yet, so its
	// baseline denied nothing).
	w.mu.Lock()
	for _, obj := range factory.Core().V1().Pods().Informer().GetStore().List() {
		p := obj.(*corev1.Pod)
		w.state.pods[key(p)] = p
	}
	for _, obj := range factory.Networking().V1().NetworkPolicies().Informer().GetStore().List() {
		p := obj.(*networkingv1.NetworkPolicy)
		w.state.policies[key(p)] = p
	}
	for _, obj := range factory.Core().V1().Namespaces().Informer().GetStore().List() {
		n := obj.(*corev1.Namespace)
		w.state.namespaces[n.Name] = n.Labels
	}
	if len(w.denied) == 0 {
		w.denied = baselineDenials(w.state, ns, fleet, callers)
	}
	w.synced = true
	w.judgeLocked()
	w.mu.Unlock()
	if len(w.denied) == 0 {
		cancel()
		t.Fatalf("state watch of %s/%s: the reference denies nothing, so no state could be judged wrong", ns, fleet)
	}
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		close(w.done)
	}()
	return w
}

// baselineDenials: each (caller, port) cyclonus denies on every member in
// state s.
func baselineDenials(s clusterState, ns, fleet string, callers []caller) []denial {
	var out []denial
	for _, c := range callers {
		for _, port := range []int{8080, 8081} {
			d := denial{Caller: c, Port: port}
			if len(judgeState(s, ns, fleet, []denial{d})) == 0 {
				out = append(out, d)
			}
		}
	}
	return out
}

func (w *stateWatch) observe(apply func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	apply()
	if w.synced {
		w.judgeLocked()
	}
}

func (w *stateWatch) judgeLocked() {
	w.states++
	for _, v := range judgeState(w.state, w.ns, w.fleet, w.denied) {
		if !w.seen[v] {
			w.seen[v] = true
			w.violations = append(w.violations, fmt.Sprintf("state %d (%s): %s", w.states, time.Now().UTC().Format("15:04:05.000"), v))
		}
	}
}

// Stop ends the watch and fails t on every violation seen.
func (w *stateWatch) Stop(t *testing.T, what string) {
	t.Helper()
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var ds []string
	for _, d := range w.denied {
		ds = append(ds, fmt.Sprintf("%s/%s:%d", d.Caller.NS, d.Caller.Name, d.Port))
	}
	if len(w.violations) > 0 {
		t.Errorf("%s: %d observed state(s) opened a member port the reference table denies:\n  %s", what, len(w.violations), strings.Join(w.violations, "\n  "))
	}
	t.Logf("%s: judged %d observed states of %s/%s against %d denied (caller, port) pairs [%s]: %d violation(s)",
		what, w.states, w.ns, w.fleet, len(w.denied), strings.Join(ds, " "), len(w.violations))
}

// TestJudgeStateCatchesAnOpening: the judge is not blind. A fleet policy
// admitting 8080 from clients only denies a stranger; the same state with
// the rule's peer widened to every Pod of the namespace (a planted opening)
// is caught, and so is a state with no policy at all.
func TestJudgeStateCatchesAnOpening(t *testing.T) {
	member := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f-0",
		Labels: map[string]string{"app.kubernetes.io/instance": "f", "app.kubernetes.io/name": "celld"}}, Status: corev1.PodStatus{PodIP: "10.244.0.5"}}
	tcp := corev1.ProtocolTCP
	policy := func(from metav1.LabelSelector) *networkingv1.NetworkPolicy {
		port := intstr.FromInt32(8080)
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "f"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "f"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
					From: []networkingv1.NetworkPolicyPeer{{PodSelector: &from}}}}}}
	}
	clients := metav1.LabelSelector{MatchLabels: map[string]string{"celld.eric.dev/client-of": "f"}}
	stranger := caller{NS: "ns", Name: "stranger"}
	denied := []denial{{Caller: stranger, Port: 8080}, {Caller: stranger, Port: 8081}}
	state := func(ps ...*networkingv1.NetworkPolicy) clusterState {
		s := clusterState{pods: map[string]*corev1.Pod{"ns/f-0": member}, policies: map[string]*networkingv1.NetworkPolicy{}, namespaces: map[string]map[string]string{}}
		for _, p := range ps {
			s.policies[p.Namespace+"/"+p.Name] = p
		}
		return s
	}
	if v := judgeState(state(policy(clients)), "ns", "f", denied); len(v) != 0 {
		t.Errorf("the fleet's policy: %v", v)
	}
	if v := judgeState(state(policy(metav1.LabelSelector{})), "ns", "f", denied); len(v) != 1 || !strings.Contains(v[0], "stranger -> f-0:8080") {
		t.Errorf("a rule widened to every Pod of the namespace: %v; want the stranger on 8080 caught", v)
	}
	if v := judgeState(state(), "ns", "f", denied); len(v) != 2 {
		t.Errorf("no policy at all: %v; want both ports caught", v)
	}
	if got := baselineDenials(state(policy(clients)), "ns", "f", []caller{stranger, {NS: "ns", Name: "client", Labels: clients.MatchLabels}}); len(got) != 3 {
		t.Errorf("baseline: %+v; want the stranger on both ports and the client on 8081", got)
	}
}
