package pacing

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// UpdateFilter drops the update events of T in which project(T), what the
// reconciler reads of it, did not change; every drop is counted under
// name. The projection is the one declaration of what is read: a new
// read belongs in it, or a change of that field alone would not wake the
// reconciler. An event of another type passes.
func UpdateFilter[T client.Object, P any](controller, name string, project func(T) P) predicate.Funcs {
	return DropUpdates(controller, name, func(before, after T) bool {
		return equality.Semantic.DeepEqual(project(before), project(after))
	})
}

// DropUpdates drops the update events of T for which drop is true, counted
// under name: for a filter that is more than one projection compared
// (an update that only adds the controller's own finalizer, say). An event
// of another type passes.
func DropUpdates[T client.Object](controller, name string, drop func(before, after T) bool) predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(T)
		after, ok2 := e.ObjectNew.(T)
		if !ok1 || !ok2 || !drop(before, after) {
			return true
		}
		droppedMetric.WithLabelValues(controller, name).Inc()
		return false
	}}
}

// CreateFilter drops the create events for which keep is false, counted
// under name; updates, deletes and generic events pass.
func CreateFilter(controller, name string, keep func(client.Object) bool) predicate.Funcs {
	return predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
		if keep(e.Object) {
			return true
		}
		droppedMetric.WithLabelValues(controller, name).Inc()
		return false
	}}
}
