package controller

import (
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
)

// status builds the next status of one reconcile.
type status struct {
	gen  int64
	now  time.Time
	next *v1alpha1.ServiceMeshStatus
	// warnReason/warnMessage become a Warning event when they are new.
	warnReason, warnMessage string
	// oldDataPlane says what keeps the old data plane's components during
	// a dataPlane migration ("" when nothing does).
	oldDataPlane string
	// sailPaused are the Sail CRs this reconcile left alone for
	// reconcile-paused (Kind/name); merged into status.pausedObjects.
	sailPaused []string
}

// sailKinds are the kinds whose paused entries the control-plane
// reconcile reports (the enrollment reports the others).
var sailKinds = []string{sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel}

// mergeSailPaused replaces the Sail entries of status.pausedObjects with
// what this reconcile found, keeping the enrollment's entries.
func (s *status) mergeSailPaused() {
	var out []string
	for _, p := range s.next.PausedObjects {
		kind, _, _ := strings.Cut(p, "/")
		if !slices.Contains(sailKinds, kind) {
			out = append(out, p)
		}
	}
	out = append(out, s.sailPaused...)
	sort.Strings(out)
	s.next.PausedObjects = out
}

func newStatus(mesh *v1alpha1.ServiceMesh, now time.Time) *status {
	next := mesh.Status.DeepCopy()
	next.ObservedGeneration = mesh.Generation
	return &status{gen: mesh.Generation, now: now, next: next}
}

// set writes a condition; meta.SetStatusCondition keeps LastTransitionTime
// when the status did not flip, so an unchanged reconcile writes nothing.
func (s *status) set(t v1alpha1.ConditionType, st metav1.ConditionStatus, reason v1alpha1.ConditionReason, msg string) {
	meta.SetStatusCondition(&s.next.Conditions, metav1.Condition{Type: string(t), Status: st, Reason: string(reason), Message: msg,
		ObservedGeneration: s.gen, LastTransitionTime: metav1.NewTime(s.now)})
}

func (s *status) warn(reason v1alpha1.ConditionReason, msg string) {
	s.warnReason, s.warnMessage = string(reason), msg
}

// forgetControlPlane drops what a refused or locked mesh did not observe,
// so no one acts on a stale ControlPlaneReady.
func (s *status) forgetControlPlane() {
	for _, t := range []v1alpha1.ConditionType{v1alpha1.ConditionControlPlaneReady, v1alpha1.ConditionPreconditionNotMet, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
		meta.RemoveStatusCondition(&s.next.Conditions, string(t))
	}
	s.next.ControlPlane = nil
	s.next.Detected = nil
	s.next.SailOperator = nil
	s.next.Provider = ""
}

// summarize sets Reconciling and Stalled (kstatus) from the phase.
func (s *status) summarize(reason v1alpha1.ConditionReason, msg string) {
	switch s.next.Phase {
	case PhaseProgressing, PhaseDeleting:
		s.set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
		s.set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonNotStalled, "")
	case PhaseBlocked, PhaseDeferred, PhaseError:
		s.set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonNotReconciling, "")
		s.set(v1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	default:
		s.set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonNotReconciling, "")
		s.set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonNotStalled, "")
	}
}
