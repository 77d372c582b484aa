package sail

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

// Object is one of Istio, IstioCNI, ZTunnel.
type Object interface {
	client.Object
	// SailStatus returns the status block the Sail controller writes.
	SailStatus() Status
}

// SailStatus implements Object.
func (in *Istio) SailStatus() Status { return in.Status }

// SailStatus implements Object.
func (in *IstioCNI) SailStatus() Status { return in.Status }

// SailStatus implements Object.
func (in *ZTunnel) SailStatus() Status { return in.Status }

// FromUnstructured converts a live Sail CR to its typed form.
func FromUnstructured(u *unstructured.Unstructured) (Object, error) {
	var out Object
	switch u.GetKind() {
	case KindIstio:
		out = &Istio{}
	case KindIstioCNI:
		out = &IstioCNI{}
	case KindZTunnel:
		out = &ZTunnel{}
	default:
		return nil, fmt.Errorf("not a Sail kind the operator knows: %s", u.GetKind())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return out, nil
}

// Readiness is what a Sail CR says about its component.
type Readiness struct {
	Ready bool
	// Reason is a ControlPlaneReady reason; Message says what is awaited.
	Reason  v1alpha1.ConditionReason
	Message string
}

// readinessState is what ReadinessOf found, before it is named per kind.
type readinessState int

const (
	stateMissing readinessState = iota
	stateDeleting
	stateProgressing
	stateReady
	stateNotReady
)

// reasons names each state per kind, from the API's vocabulary (so every
// reason has its troubleshooting row).
var reasons = map[string][5]v1alpha1.ConditionReason{
	KindIstio: {v1alpha1.ReasonIstioMissing, v1alpha1.ReasonIstioDeleting, v1alpha1.ReasonIstioProgressing,
		v1alpha1.ReasonIstioReady, v1alpha1.ReasonIstioNotReady},
	KindIstioCNI: {v1alpha1.ReasonIstioCNIMissing, v1alpha1.ReasonIstioCNIDeleting, v1alpha1.ReasonIstioCNIProgressing,
		v1alpha1.ReasonIstioCNIReady, v1alpha1.ReasonIstioCNINotReady},
	KindZTunnel: {v1alpha1.ReasonZTunnelMissing, v1alpha1.ReasonZTunnelDeleting, v1alpha1.ReasonZTunnelProgressing,
		v1alpha1.ReasonZTunnelReady, v1alpha1.ReasonZTunnelNotReady},
}

func reasonOf(kind string, s readinessState) v1alpha1.ConditionReason {
	if r, ok := reasons[kind]; ok {
		return r[s]
	}
	// Only the three Sail kinds are judged; a caller passing another kind
	// is a programming error, which this keeps visible in status.
	return v1alpha1.ConditionReason(kind + [...]string{"Missing", "Deleting", "Progressing", "Ready", "NotReady"}[s])
}

// ReadinessOf judges a live Sail CR (nil: it does not exist). Ready needs the
// Sail controller's Ready condition True for the current generation: a Ready
// left over from before our last change says nothing about the change.
func ReadinessOf(kind, name string, obj Object) Readiness {
	id := kind + " " + name
	if obj == nil {
		return Readiness{Reason: reasonOf(kind, stateMissing), Message: id + " does not exist."}
	}
	if obj.GetDeletionTimestamp() != nil {
		return Readiness{Reason: reasonOf(kind, stateDeleting), Message: id + " is being deleted."}
	}
	st := obj.SailStatus()
	if st.ObservedGeneration < obj.GetGeneration() {
		return Readiness{Reason: reasonOf(kind, stateProgressing),
			Message: fmt.Sprintf("%s: the Sail Operator has not processed generation %d yet (observed %d); is the Sail Operator running?", id, obj.GetGeneration(), st.ObservedGeneration)}
	}
	for _, c := range st.Conditions {
		if c.Type != ConditionReady {
			continue
		}
		if c.Status == "True" {
			return Readiness{Ready: true, Reason: reasonOf(kind, stateReady), Message: id + " is Ready."}
		}
		msg := fmt.Sprintf("%s is not Ready", id)
		if c.Reason != "" {
			msg += " (" + c.Reason + ")"
		}
		if c.Message != "" {
			msg += ": " + c.Message
		}
		return Readiness{Reason: reasonOf(kind, stateNotReady), Message: msg + "."}
	}
	return Readiness{Reason: reasonOf(kind, stateNotReady), Message: id + " has no Ready condition yet."}
}
