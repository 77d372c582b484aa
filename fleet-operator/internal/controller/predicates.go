package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/pacing"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// The fleet controller's event filters. Each drops the events in which
// nothing the reconciler reads changed, and is declared as the projection
// of what it reads (metaFacts, memberFacts, ...): a new read belongs in the
// projection, or a change of that field alone would not wake the fleet.
// Every drop is counted (fleetmesh_pacing_dropped_events_total); the
// rules are in docs/pacing.md, the tests in predicates_test.go.

// statusOnlyDropped drops the update events of a fleet in which only its
// status (and so its resourceVersion and managedFields) changed. The
// operator writes that status itself, and each write came back as a
// reconcile that found nothing to do: about six per fleet while its
// members start. Spec (generation), labels, annotations, finalizers and
// deletion still wake the fleet. A status that someone else rewrote is
// corrected at the fleet's next look (at most the /state interval) or at
// its next event; status reports, it never steers.
//
// The update that adds the operator's own finalizer is dropped too: the
// pass that added it goes on to apply the fleet's objects, and the pass
// the update woke found nothing new.
var statusOnlyDropped = pacing.DropUpdates(controllerName, "fleet-status-only", func(before, after *v1alpha1.CelldFleet) bool {
	return onlyStatusChanged(before, after) || declarationsFinalizerAdded(before, after)
})

// declarationsFinalizerAdded reports an update that only added
// DeclarationsFinalizer (besides status).
func declarationsFinalizerAdded(before, after client.Object) bool {
	if controllerutil.ContainsFinalizer(before, DeclarationsFinalizer) || !controllerutil.ContainsFinalizer(after, DeclarationsFinalizer) {
		return false
	}
	withOurs := before.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(withOurs, DeclarationsFinalizer)
	return onlyStatusChanged(withOurs, after)
}

// ownCreatesDropped drops the create events of the fleets' owned objects:
// the operator made the object (the pass that made it is still running or
// just ended, and the gate holds the fleet's next pass until the cache
// shows it), or an informer just started and listed it (every fleet is
// then woken by its own create event). Updates and deletes still wake the
// fleet. The routing objects keep their create event: they are the owned
// objects a spec change deletes again, and finding them reads the cache
// without confirming a miss (removeOwned), so a route removed from the
// spec right after its creation is deleted when its create event brings
// the fleet back, not at the fleet's next look.
var ownCreatesDropped = pacing.CreateFilter(controllerName, "owned-creates", func(o client.Object) bool {
	c := metav1.GetControllerOf(o)
	return c != nil && o.GetName() == names.Routing(c.Name)
})

// countersOnlyDropped drops the updates of a member StatefulSet in which
// only status counters changed (replicas, readyReplicas,
// availableReplicas and the like): the StatefulSet controller writes one
// as it creates each member and as each turns ready, and that member's own
// Pod event wakes the fleet already.
var countersOnlyDropped = pacing.UpdateFilter(controllerName, "statefulset-counters", statefulSetFactsOf)

// statefulSetFacts is what the reconciler reads of the members'
// StatefulSet besides its spec: the status fields the roll decides from.
type statefulSetFacts struct {
	Meta                            metaFacts
	ObservedGeneration              int64
	CurrentRevision, UpdateRevision string
}

func statefulSetFactsOf(s *appsv1.StatefulSet) statefulSetFacts {
	return statefulSetFacts{Meta: metaFactsOf(s), ObservedGeneration: s.Status.ObservedGeneration,
		CurrentRevision: s.Status.CurrentRevision, UpdateRevision: s.Status.UpdateRevision}
}

// unreadPodChangesDropped drops the updates of a member Pod that change
// nothing the fleet reads of it (memberFacts): the scheduler's
// PodScheduled condition and binding, container states, host IP and the
// like: a pass they woke found nothing new. While fleets start, that is
// one of the three updates each member goes through.
var unreadPodChangesDropped = pacing.UpdateFilter(controllerName, "member-pod-unread", memberFactsOf)

// namespaceLabelsOnly: of a namespace, the fleets read its labels (the
// mesh contract: enrollment, state, edges).
var namespaceLabelsOnly = pacing.UpdateFilter(controllerName, "namespace-labels", func(ns *corev1.Namespace) any { return ns.Labels })

// memberFacts is everything the reconciler reads of a member Pod: what
// status, the roll, the mesh state and the /state reads are computed
// from. A new read of a Pod field belongs here too, or an update of that
// field alone would not wake the fleet (TestUnreadPodChangesDropped).
type memberFacts struct {
	Labels, Annotations map[string]string
	Terminating         bool
	Phase               corev1.PodPhase
	IP                  string
	Ready               *corev1.PodCondition
	Restarts            map[string]int32
	Proxy               bool
}

func memberFactsOf(p *corev1.Pod) memberFacts {
	f := memberFacts{
		Labels: p.Labels, Annotations: p.Annotations, Terminating: p.DeletionTimestamp != nil,
		Phase: p.Status.Phase, IP: p.Status.PodIP, Ready: readyCondition(p), Proxy: podmesh.HasProxy(p),
	}
	for _, c := range p.Status.ContainerStatuses {
		if f.Restarts == nil {
			f.Restarts = map[string]int32{}
		}
		f.Restarts[c.Name] = c.RestartCount
	}
	return f
}

// metaFacts is the metadata anyone acts on: spec (generation), labels,
// annotations, finalizers, deletion and owners. An update that changes
// none of it changed only status (and resourceVersion, managedFields).
type metaFacts struct {
	Generation  int64
	Labels      map[string]string
	Annotations map[string]string
	Finalizers  []string
	Deletion    *metav1.Time
	Owners      []metav1.OwnerReference
}

func metaFactsOf(o client.Object) metaFacts {
	return metaFacts{Generation: o.GetGeneration(), Labels: o.GetLabels(), Annotations: o.GetAnnotations(), Finalizers: o.GetFinalizers(),
		Deletion: o.GetDeletionTimestamp(), Owners: o.GetOwnerReferences()}
}

// onlyStatusChanged reports an update that changed neither spec
// (generation) nor the metadata anyone acts on.
func onlyStatusChanged(before, after client.Object) bool {
	return equality.Semantic.DeepEqual(metaFactsOf(before), metaFactsOf(after))
}
