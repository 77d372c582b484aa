package apply

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// OwnedMeta is the metadata of an object an operator builds for owner: in
// owner's namespace, with owner as its controller (garbage collection
// removes it with owner, and Apply's ownership check refuses to touch an
// object of that name that another owner controls).
func OwnedMeta(owner metav1.Object, ownerKind schema.GroupVersionKind, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       owner.GetNamespace(),
		Labels:          labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, ownerKind)},
	}
}
