// Package sail speaks the Sail Operator's sailoperator.io/v1 API (Istio,
// IstioCNI, ZTunnel) and builds the objects the mesh operator owns.
//
// The Sail Operator's Go module cannot be used here, so these are our own
// small structs: only the fields the operator sets or reads are declared,
// and the API server (with the Sail CRD schemas) stays the authority on the
// rest. Objects travel as unstructured through shared/apply, so these types
// need no scheme registration.
//
// (controller-gen must not mistake these for our own API types:)
// +kubebuilder:skip
package sail

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the Sail Operator's API group.
const Group = "sailoperator.io"

// GroupVersion is the Sail API version the operator speaks (ZTunnel is v1
// from Sail 1.28 on, Istio and IstioCNI earlier).
var GroupVersion = schema.GroupVersion{Group: Group, Version: "v1"}

// Kinds and their resource names, for GVKs and discovery.
const (
	KindIstio    = "Istio"
	KindIstioCNI = "IstioCNI"
	KindZTunnel  = "ZTunnel"

	ResourceIstios    = "istios"
	ResourceIstioCNIs = "istiocnis"
	ResourceZTunnels  = "ztunnels"
)

// Finalizer is set on every Sail CR by the Sail controller (not by us); a
// CR is only gone once that controller has uninstalled what it deployed.
const Finalizer = "sailoperator.io/sail-operator"

// Condition types the Sail controller sets.
const (
	ConditionReady      = "Ready"
	ConditionReconciled = "Reconciled"
)

// GVK returns the GroupVersionKind of a Sail kind.
func GVK(kind string) schema.GroupVersionKind { return GroupVersion.WithKind(kind) }

// Status is the part of every Sail CR's status the operator reads.
type Status struct {
	ObservedGeneration int64       `json:"observedGeneration,omitempty"`
	Conditions         []Condition `json:"conditions,omitempty"`
	State              string      `json:"state,omitempty"`
	// ActiveRevisionName is set on Istio only.
	ActiveRevisionName string `json:"activeRevisionName,omitempty"`
}

// Condition is Sail's condition shape (metav1.Condition-like, but Sail's own type).
type Condition struct {
	Type               string                 `json:"type"`
	Status             metav1.ConditionStatus `json:"status"`
	Reason             string                 `json:"reason,omitempty"`
	Message            string                 `json:"message,omitempty"`
	LastTransitionTime *metav1.Time           `json:"lastTransitionTime,omitempty"`
}

// UpdateStrategy of an Istio.
type UpdateStrategy struct {
	Type string `json:"type,omitempty"`
}

// IstioSpec is the subset of Istio.spec the operator sets.
type IstioSpec struct {
	Version        string          `json:"version,omitempty"`
	Namespace      string          `json:"namespace,omitempty"`
	Profile        string          `json:"profile,omitempty"`
	UpdateStrategy *UpdateStrategy `json:"updateStrategy,omitempty"`
	// Values are Helm values for istiod, passed through as-is.
	Values map[string]any `json:"values,omitempty"`
}

// Istio is sailoperator.io/v1 Istio (cluster-scoped): one istiod control plane.
type Istio struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              IstioSpec `json:"spec,omitempty"`
	Status            Status    `json:"status,omitzero"`
}

// ComponentSpec is the subset of IstioCNI.spec and ZTunnel.spec the operator sets.
type ComponentSpec struct {
	Version   string         `json:"version,omitempty"`
	Namespace string         `json:"namespace,omitempty"`
	Profile   string         `json:"profile,omitempty"`
	Values    map[string]any `json:"values,omitempty"`
}

// IstioCNI is sailoperator.io/v1 IstioCNI (cluster-scoped, name must be default).
type IstioCNI struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ComponentSpec `json:"spec,omitempty"`
	Status            Status        `json:"status,omitzero"`
}

// ZTunnel is sailoperator.io/v1 ZTunnel (cluster-scoped, name must be default).
type ZTunnel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ComponentSpec `json:"spec,omitempty"`
	Status            Status        `json:"status,omitzero"`
}

// DeepCopyObject copies through the unstructured form: these types are plain
// JSON data, and hand-written field copies would drift from the structs.
func (in *Istio) DeepCopyObject() runtime.Object { return deepCopy(in, &Istio{}) }

// DeepCopyObject implements runtime.Object.
func (in *IstioCNI) DeepCopyObject() runtime.Object { return deepCopy(in, &IstioCNI{}) }

// DeepCopyObject implements runtime.Object.
func (in *ZTunnel) DeepCopyObject() runtime.Object { return deepCopy(in, &ZTunnel{}) }

func deepCopy[T runtime.Object](in T, out T) runtime.Object {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(in)
	if err != nil {
		panic(err) // only JSON-compatible fields: cannot happen
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, out); err != nil {
		panic(err)
	}
	return out
}
