package controller

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/detect"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/shared/golden"
)

// TestArgoCDHealthFixtures writes, as golden files, ServiceMeshes whose
// status the operator's own condition setters computed: one per state the
// Argo CD health check (argocd/resource_customizations/core.navique.com/
// ServiceMesh/health.lua) tells apart. The e2e module's argocd test runs
// the check against these files, so a change in what the operator writes
// shows up there (rerun with -update, then review both diffs).
func TestArgoCDHealthFixtures(t *testing.T) {
	ambient := v1alpha1.ServiceMeshSpec{DataPlane: v1alpha1.DataPlaneAmbient}
	ready := readiness{ready: true, reason: v1alpha1.ReasonSailResourcesReady, msg: "Istio default is Ready."}
	readyMesh := func(spec v1alpha1.ServiceMeshSpec) *status {
		st := newStatus(statusMesh(spec), statusNow)
		setControlPlaneConditions(st, detect.Plan{Action: detect.ActionApply}, ready, nil)
		setEnrollmentConditions(st, spec, enrollmentTally{})
		setEnrollmentFailedCondition(st, nil)
		return st
	}
	controlPlane := func(plan detect.Plan, rd readiness, err error) func() *status {
		return func() *status {
			st := newStatus(statusMesh(ambient), statusNow)
			setControlPlaneConditions(st, plan, rd, err)
			return st
		}
	}
	fixtures := map[string]func() *status{
		"healthy": func() *status { return readyMesh(ambient) },
		"progressing-control-plane": controlPlane(detect.Plan{Action: detect.ActionApply},
			readiness{reason: v1alpha1.ReasonIstioNotReady, msg: "Istio default is not Ready: istiod has 0 of 1 replicas available."}, nil),
		"progressing-installing-sail": controlPlane(detect.Plan{Action: detect.ActionInstallSail},
			readiness{reason: v1alpha1.ReasonSailOperatorInstalling, msg: "Installing the Sail Operator."}, nil),
		"degraded-blocked":      controlPlane(detect.Plan{BlockedReason: v1alpha1.ReasonMaistraDetected, BlockedMessage: "An OpenShift Service Mesh 2 (Maistra) control plane runs in istio-system."}, readiness{}, nil),
		"degraded-deferred":     controlPlane(detect.Plan{Deferred: true, BlockedReason: v1alpha1.ReasonAmbiguousControlPlane, BlockedMessage: "Two Istio control planes run: istio-system, istio-canary."}, readiness{}, nil),
		"degraded-precondition": controlPlane(detect.Plan{Action: detect.ActionApply, PreconditionReason: v1alpha1.ReasonCiliumAmbient, PreconditionMessage: "Cilium runs with kube-proxy replacement and socket load balancing, which ambient does not support."}, ready, nil),
		"degraded-error":        controlPlane(detect.Plan{Action: detect.ActionApply}, readiness{}, errors.New(`applying Istio default: the server could not find the requested resource`)),
		"degraded-license-locked": func() *status {
			st := newStatus(statusMesh(ambient), statusNow)
			setLicenseRefusedConditions(st, licenseCheck{refusal: &license.Error{Reason: license.ReasonExpired, Message: "the license expired on 2025-12-31"}}, false)
			return st
		},
		"degraded-license-unreadable": func() *status {
			st := newStatus(statusMesh(ambient), statusNow)
			setLicenseUnreadableConditions(st, `reading Secret mesh-system/mesh-license: secrets "mesh-license" is forbidden`)
			return st
		},
		"degraded-enrollment-failed": func() *status {
			st := readyMesh(ambient)
			setEnrollmentFailedCondition(st, errors.New(`labelling namespace shop: admission webhook "policy.example" denied the request`))
			return st
		},
		"degraded-enrollment-conflict": func() *status {
			st := readyMesh(ambient)
			setEnrollmentConflictCondition(st, enrollmentTally{conflicts: []string{"AuthorizationPolicy shop/mesh-isolation"}})
			return st
		},
		"degraded-ambient-networkpolicy": func() *status {
			st := readyMesh(ambient)
			setAmbientNetworkPolicyCondition(st, ambient, enrollmentTally{ambientBlocked: []string{"shop: NetworkPolicy shop/default-deny admits neither HBONE (TCP 15008) nor 169.254.7.127"}})
			return st
		},
		"degraded-foreign-peerauthentication": func() *status {
			st := readyMesh(ambient)
			setMTLSCutoverCondition(st, ambient, enrollmentTally{foreign: []string{"PeerAuthentication shop/legacy (PERMISSIVE)"}})
			return st
		},
		"progressing-awaiting-cutover": func() *status {
			st := readyMesh(ambient)
			setMTLSCutoverCondition(st, ambient, enrollmentTally{waiting: []string{"shop (Pod web-1)"}, ownWaiting: true})
			return st
		},
		"progressing-migrating": func() *status {
			st := readyMesh(ambient)
			setDataPlaneMigrationCondition(st, ambient, enrollmentTally{migrating: []string{"shop: 2 of 5 Pods on ambient"}})
			return st
		},
		"healthy-maintenance-window": func() *status {
			st := readyMesh(ambient)
			setMTLSCutoverCondition(st, ambient, enrollmentTally{heldPermissive: []string{"shop (Maintenance)"}})
			return st
		},
		"healthy-namespace-opted-out": func() *status {
			st := readyMesh(ambient)
			setOptOutCondition(st, []string{"legacy"})
			return st
		},
		"progressing-deleting": func() *status {
			st := readyMesh(ambient)
			st.next.Phase = PhaseDeleting
			st.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting, "The ServiceMesh is being deleted.")
			st.summarize(v1alpha1.ReasonWaitingForSidecarRelease, "Pods of namespaces that left the mesh still run istiod's sidecar: shop/web-1.")
			return st
		},
	}
	for name, mk := range fixtures {
		t.Run(name, func(t *testing.T) {
			st := mk()
			m := statusMesh(ambient)
			m.APIVersion, m.Kind = v1alpha1.GroupVersion.String(), "ServiceMesh"
			m.Status = *st.next
			golden.AssertYAML(t, "argocd/"+name, m)
		})
	}
	// The spec changed after the last status: the operator has not looked yet.
	t.Run("progressing-generation", func(t *testing.T) {
		m := statusMesh(ambient)
		m.APIVersion, m.Kind = v1alpha1.GroupVersion.String(), "ServiceMesh"
		m.Status = *readyMesh(ambient).next
		m.Generation++
		golden.AssertYAML(t, "argocd/progressing-generation", m)
	})
}
