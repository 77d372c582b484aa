// Package v1alpha1 is the core.navique.com/v1alpha1 API: ServiceMesh.
//
// +kubebuilder:object:generate=true
// +groupName=core.navique.com
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of ServiceMesh.
	GroupVersion = schema.GroupVersion{Group: "core.navique.com", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ServiceMesh{}, &ServiceMeshList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
