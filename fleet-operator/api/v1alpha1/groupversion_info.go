// Package v1alpha1 is the celld.eric.dev/v1alpha1 API: CelldFleet.
//
// +kubebuilder:object:generate=true
// +groupName=celld.eric.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of CelldFleet.
	GroupVersion = schema.GroupVersion{Group: "celld.eric.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
