package explore

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// Hand-built worlds for the judge's tests: no API server, the objects the
// recorder would have replayed.

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func testWorld() world {
	return world{app: "x1-app", edge: "x1-edge", other: "x1-other",
		operator: caller{name: "fleet-operator", namespace: harness.FleetNamespace, serviceAccount: "fleet-operator", meshed: true,
			labels: map[string]string{labels.Name: "fleet-operator", labels.Instance: "fleet-operator"}}}
}

// typed is an object the recorder would have seen, with its resource.
type typed struct {
	gvr schema.GroupVersionResource
	obj any
}

// state is the snapshot of the given objects at t0+sec, led to by event.
func state(t *testing.T, sec int, event string, objs ...typed) *snapshot {
	t.Helper()
	s := &snapshot{at: t0.Add(time.Duration(sec) * time.Second), last: event, step: 1,
		objs:   map[schema.GroupVersionResource]map[string]*unstructured.Unstructured{},
		absent: map[schema.GroupVersionResource]bool{}, restored: map[schema.GroupVersionResource]time.Time{}}
	for _, o := range objs {
		u, ok := o.obj.(*unstructured.Unstructured)
		if !ok {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.obj)
			if err != nil {
				t.Fatal(err)
			}
			u = &unstructured.Unstructured{Object: m}
		}
		if s.objs[o.gvr] == nil {
			s.objs[o.gvr] = map[string]*unstructured.Unstructured{}
		}
		s.objs[o.gvr][key(u)] = u
	}
	return s
}

func fleet(name string, replicas int32) typed {
	return typed{gvrFleets, &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "x1-app", Name: name, UID: types.UID("uid-fleet-" + name)},
		Spec: fleetv1.CelldFleetSpec{Replicas: &replicas, Image: "registry.example/celld:1.0.0"}}}
}

// running is a Pod running with an address and Ready, as kwok makes them.
func running(ns, name string, l map[string]string, mutate ...func(*corev1.Pod)) typed {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("127.1.0.%d", len(name)+len(ns)),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	for _, m := range mutate {
		m(p)
	}
	return typed{gvrPods, p}
}

func member(f string, ordinal int, mutate ...func(*corev1.Pod)) typed {
	return running("x1-app", fmt.Sprintf("%s-%d", f, ordinal), map[string]string{labels.Instance: f, labels.Fleet: f}, mutate...)
}

func pending(p *corev1.Pod) {
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
}

func terminating(p *corev1.Pod) {
	p.DeletionTimestamp = &metav1.Time{Time: t0}
}

func notReady(p *corev1.Pod) {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
}

func captured(p *corev1.Pod) {
	p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"}
}

func uid(u string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.UID = types.UID(u) } }

// fleetPolicy is a fleet NetworkPolicy as the operator means it: labelled
// clients on 8080, peers and the operator on 8081, plus extra rules.
func fleetPolicy(f string, extra ...networkingv1.NetworkPolicyIngressRule) typed {
	port := func(n int) []networkingv1.NetworkPolicyPort {
		p := intstr.FromInt32(int32(n))
		tcp := corev1.ProtocolTCP
		return []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "x1-app", Name: f, Labels: map[string]string{labels.Instance: f}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labels.Instance: f}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: append([]networkingv1.NetworkPolicyIngressRule{
				{Ports: port(8080), From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.ClientOf: f}}}}},
				{Ports: port(8081), From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.Instance: f}}},
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.NamespaceName: harness.FleetNamespace}},
						PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.Name: "fleet-operator"}}}}},
			}, extra...),
		}}
	return typed{gvrNetpols, np}
}

// ruleOn admits port from every Pod of the namespace (from nil: from anywhere).
func ruleOn(n int, fromNamespace bool) networkingv1.NetworkPolicyIngressRule {
	p := intstr.FromInt32(int32(n))
	tcp := corev1.ProtocolTCP
	r := networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}}}
	if fromNamespace {
		r.From = []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
	}
	return r
}

// callers are the Pods of a sequence's world: a labelled client of a and
// an unlabelled Pod.
func callers(mutate ...func(*corev1.Pod)) []typed {
	return []typed{
		running("x1-app", clientPod("a"), map[string]string{"app": "web", labels.ClientOf: "a"}, mutate...),
		running("x1-app", bystanderPod, map[string]string{"app": "batch"}, mutate...),
	}
}

// judgeStates runs check over the states in order, then at rest on the last.
func judgeStates(states ...*snapshot) []string {
	j := newJudgement(testWorld())
	for i, s := range states {
		j.check(s, i+1)
	}
	j.atRest = true
	j.check(states[len(states)-1], len(states)+1)
	return append(append(append(append(j.violations, j.missing()...), j.strictAtRest(j.last)...), j.honestAtRest(j.last)...), j.membersAtRest(j.last)...)
}

func objs(groups ...[]typed) []typed {
	var out []typed
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}
