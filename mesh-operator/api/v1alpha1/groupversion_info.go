// Package v1alpha1 is the core.navique.com/v1alpha1 API: ServiceMesh.
//
// +kubebuilder:object:generate=true
// +groupName=core.navique.com
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of ServiceMesh.
	GroupVersion = schema.GroupVersion{Group: "core.navique.com", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
