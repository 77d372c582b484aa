package controller

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/pacing"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// TestOnlyStatusChanged: the fleet's own status writes wake no reconcile;
// every change a user or another controller makes to what the operator reads
// does.
func TestOnlyStatusChanged(t *testing.T) {
	base := func() *v1alpha1.CelldFleet {
		return &v1alpha1.CelldFleet{ObjectMeta: metav1.ObjectMeta{
			Name: "f", Generation: 2, ResourceVersion: "10",
			Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "x"}, Finalizers: []string{"celld.eric.dev/declarations"},
		}}
	}
	for _, tc := range []struct {
		name   string
		change func(f *v1alpha1.CelldFleet)
		only   bool
	}{
		{"status and resourceVersion", func(f *v1alpha1.CelldFleet) {
			f.ResourceVersion = "11"
			f.Status.Phase = PhaseReady
			f.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "fleet-operator", Subresource: "status"}}
		}, true},
		{"nothing (a resync)", func(*v1alpha1.CelldFleet) {}, true},
		{"spec", func(f *v1alpha1.CelldFleet) { f.Generation = 3 }, false},
		{"a label", func(f *v1alpha1.CelldFleet) { f.Labels["team"] = "b" }, false},
		{"an annotation added", func(f *v1alpha1.CelldFleet) { f.Annotations["poke"] = "1" }, false},
		{"annotations removed", func(f *v1alpha1.CelldFleet) { f.Annotations = nil }, false},
		{"a finalizer", func(f *v1alpha1.CelldFleet) { f.Finalizers = nil }, false},
		{"deletion", func(f *v1alpha1.CelldFleet) { f.DeletionTimestamp = ptr.To(metav1.Now()) }, false},
		{"owner references", func(f *v1alpha1.CelldFleet) { f.OwnerReferences = []metav1.OwnerReference{{Name: "x"}} }, false},
	} {
		after := base()
		tc.change(after)
		assert.Equal(t, tc.only, onlyStatusChanged(base(), after), tc.name)
	}
}

// TestFleetUpdatesThatWake: of a fleet's updates, its own status writes and
// the operator adding its own finalizer wake no reconcile (the pass that
// added it goes on); anyone else's finalizer, ours removed, and every
// change onlyStatusChanged lets through do.
func TestFleetUpdatesThatWake(t *testing.T) {
	base := func() *v1alpha1.CelldFleet {
		return &v1alpha1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Name: "f", Generation: 2, ResourceVersion: "10", Finalizers: []string{"example.com/backup"}}}
	}
	for _, tc := range []struct {
		name   string
		change func(f *v1alpha1.CelldFleet)
		wakes  bool
	}{
		{"status", func(f *v1alpha1.CelldFleet) { f.ResourceVersion = "11"; f.Status.Phase = PhaseReady }, false},
		{"our finalizer added", func(f *v1alpha1.CelldFleet) {
			f.ResourceVersion = "11"
			f.Finalizers = append(f.Finalizers, DeclarationsFinalizer)
		}, false},
		{"our finalizer added with a new spec", func(f *v1alpha1.CelldFleet) {
			f.Finalizers = append(f.Finalizers, DeclarationsFinalizer)
			f.Generation = 3
		}, true},
		{"our finalizer added while another is removed", func(f *v1alpha1.CelldFleet) { f.Finalizers = []string{DeclarationsFinalizer} }, true},
		{"someone else's finalizer added", func(f *v1alpha1.CelldFleet) { f.Finalizers = append(f.Finalizers, "example.com/audit") }, true},
		{"a finalizer removed", func(f *v1alpha1.CelldFleet) { f.Finalizers = nil }, true},
	} {
		after := base()
		tc.change(after)
		assert.Equal(t, tc.wakes, statusOnlyDropped.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: after}), tc.name)
	}
	// Our finalizer removed (the fleet being deleted) wakes it.
	before := base()
	before.Finalizers = append(before.Finalizers, DeclarationsFinalizer)
	assert.True(t, statusOnlyDropped.Update(event.UpdateEvent{ObjectOld: before, ObjectNew: base()}), "our finalizer removed")
}

// TestStatefulSetCountersWakeNoReconcile: of a member StatefulSet's status,
// only what the operator reads wakes the fleet.
func TestStatefulSetCountersWakeNoReconcile(t *testing.T) {
	base := func() *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "f", Generation: 2, Annotations: map[string]string{HashAnnotation: "h1"}},
			Status:     appsv1.StatefulSetStatus{ObservedGeneration: 2, CurrentRevision: "f-1", UpdateRevision: "f-1", Replicas: 1},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(s *appsv1.StatefulSet)
		wakes  bool
	}{
		{"a member created", func(s *appsv1.StatefulSet) { s.Status.Replicas = 2 }, false},
		{"members ready", func(s *appsv1.StatefulSet) { s.Status.ReadyReplicas, s.Status.AvailableReplicas = 2, 2 }, false},
		{"observed the new generation", func(s *appsv1.StatefulSet) { s.Status.ObservedGeneration = 3 }, true},
		{"a new update revision", func(s *appsv1.StatefulSet) { s.Status.UpdateRevision = "f-2" }, true},
		{"the roll finished", func(s *appsv1.StatefulSet) { s.Status.CurrentRevision = "f-0" }, true},
		{"spec", func(s *appsv1.StatefulSet) { s.Generation = 3 }, true},
		{"someone edited the hash", func(s *appsv1.StatefulSet) { s.Annotations[HashAnnotation] = "x" }, true},
	} {
		after := base()
		tc.change(after)
		assert.Equal(t, tc.wakes, countersOnlyDropped.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: after}), tc.name)
	}
}

// TestUnreadPodChangesDropped: of a member Pod, the changes the fleet reads
// wake it, and the updates the scheduler and the kubelet make on the way
// that change none of those do not.
func TestUnreadPodChangesDropped(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "f-0", Labels: map[string]string{revisionLabel: "f-1"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "celld"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.9", Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: since},
			}, ContainerStatuses: []corev1.ContainerStatus{{Name: "celld"}}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(p *corev1.Pod)
		wakes  bool
	}{
		{"bound to a node", func(p *corev1.Pod) { p.Spec.NodeName, p.Status.HostIP = "n1", "127.0.0.1" }, false},
		{"not schedulable", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, false},
		{"a container started", func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{StartedAt: since}
		}, false},
		{"ready", func(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionTrue }, true},
		{"ready again, later", func(p *corev1.Pod) {
			p.Status.Conditions[1].LastTransitionTime = metav1.NewTime(since.Add(time.Minute))
		}, true},
		{"phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, true},
		{"IP", func(p *corev1.Pod) { p.Status.PodIP = "127.0.0.10" }, true},
		{"restarted", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = 1 }, true},
		{"revision", func(p *corev1.Pod) { p.Labels[revisionLabel] = "f-2" }, true},
		{"an annotation (ztunnel's capture)", func(p *corev1.Pod) { p.Annotations = map[string]string{labels.IstioAmbientRedirection: "enabled"} }, true},
		{"terminating", func(p *corev1.Pod) { p.DeletionTimestamp = &since }, true},
		{"a proxy", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: podmesh.ProxyContainer})
		}, true},
	} {
		after := base()
		tc.change(after)
		assert.Equal(t, tc.wakes, unreadPodChangesDropped.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: after}), tc.name)
	}
}

// TestOwnCreatesDropped: the create events of a fleet's owned objects wake
// no reconcile (the operator made them, and the gate holds the fleet's
// next pass until the cache shows them; or an informer just listed them),
// except the routing objects', which a spec change may delete again right
// after. Objects without a controller are not the fleet's. Updates and
// deletes of owned objects still wake the fleet. Every drop is counted.
func TestOwnCreatesDropped(t *testing.T) {
	f := &v1alpha1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop", UID: "u1"}}
	owned := func(obj client.Object, name string) client.Object {
		obj.SetNamespace("ns")
		obj.SetName(name)
		obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "CelldFleet", Name: f.Name, UID: f.UID, Controller: ptr.To(true)}})
		return obj
	}
	route := &unstructured.Unstructured{}
	route.SetGroupVersionKind(routing.HTTPRouteGVK)
	dropped := func() float64 { return testutil.ToFloat64(pacing.Dropped(controllerName, "owned-creates")) }
	before := dropped()
	for _, tc := range []struct {
		name  string
		obj   client.Object
		wakes bool
	}{
		{"the members' StatefulSet", owned(&appsv1.StatefulSet{}, names.StatefulSet(f.Name)), false},
		{"a Service", owned(&corev1.Service{}, f.Name), false},
		{"the ServiceAccount", owned(&corev1.ServiceAccount{}, names.ServiceAccount(f.Name)), false},
		{"the NetworkPolicy", owned(&networkingv1.NetworkPolicy{}, f.Name), false},
		{"the Ingress (a routing object)", owned(&networkingv1.Ingress{}, names.Routing(f.Name)), true},
		{"the HTTPRoute (a routing object)", owned(route, names.Routing(f.Name)), true},
		{"an object with the routing name but no controller", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: names.Routing(f.Name)}}, false},
	} {
		assert.Equal(t, tc.wakes, ownCreatesDropped.Create(event.CreateEvent{Object: tc.obj}), tc.name)
		assert.True(t, ownCreatesDropped.Update(event.UpdateEvent{ObjectOld: tc.obj, ObjectNew: tc.obj}), "%s: updates pass", tc.name)
		assert.True(t, ownCreatesDropped.Delete(event.DeleteEvent{Object: tc.obj}), "%s: deletes pass", tc.name)
	}
	assert.Equal(t, 5.0, dropped()-before, "each dropped create is counted")
}

// TestNamespaceLabelsOnly: of a namespace, its labels wake the fleets in
// it; its status and annotations do not.
func TestNamespaceLabelsOnly(t *testing.T) {
	base := func() *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}
	}
	relabelled := base()
	relabelled.Labels[labels.Mesh] = labels.MeshDisabled
	annotated := base()
	annotated.Annotations = map[string]string{"note": "x"}
	assert.True(t, namespaceLabelsOnly.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: relabelled}))
	assert.False(t, namespaceLabelsOnly.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: annotated}))
}
