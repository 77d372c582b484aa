package controller

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/roll"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/golden"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestArgoCDHealthFixtures writes, as golden files, CelldFleets whose
// status computeStatus produced: one per state the Argo CD health check
// (argocd/resource_customizations/celld.eric.dev/CelldFleet/health.lua)
// tells apart. The e2e module's argocd test runs the check against these
// files, so a change in what the operator writes shows up there (rerun with
// -update, then review both diffs).
func TestArgoCDHealthFixtures(t *testing.T) {
	argoNow := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fixtures := map[string]struct {
		fleet func(*v1alpha1.CelldFleet)
		obs   func(*observed)
	}{
		"healthy": {},
		"healthy-meshed": {obs: func(o *observed) {
			o.mesh = mesh.State{Phase: mesh.Meshed}
			for i := range o.pods {
				o.pods[i].Spec.Containers = []corev1.Container{{Name: "celld"}, {Name: mesh.ProxyContainer}}
			}
		}},
		"progressing-creating": {obs: func(o *observed) { o.pods = o.pods[:2] }},
		"progressing-rolling": {obs: func(o *observed) {
			o.sts.Status.UpdateRevision = "r3"
			o.decision = roll.Decision{Outdated: 3, Replace: "shop-2"}
		}},
		"progressing-applying-template": {obs: func(o *observed) { o.stsSettling = true }},
		"progressing-joining-mesh":      {obs: func(o *observed) { o.mesh = mesh.State{Phase: mesh.Joining, MissingProxy: []string{"shop-1"}} }},
		"progressing-awaiting-gateway": {obs: func(o *observed) {
			o.routing = routingOutcome{readiness: &routing.Readiness{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAwaitingGateway, Message: "Gateway ingress/edge has not accepted the route yet."}}
		}},
		"degraded-member-restarted": {obs: func(o *observed) {
			o.pods[1] = member(1, "r2", false)
			o.pods[1].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "celld", RestartCount: 2}}
		}},
		"degraded-member-unhealthy": {obs: func(o *observed) {
			o.reports["shop-1"] = state.Result{Report: &state.Report{Healthy: false, Phase: "Recovering"}}
		}},
		"degraded-networkpolicy-not-confirmed": {obs: func(o *observed) {
			*o = *healthyFleet()
			o.blocked = &blockage{reason: v1alpha1.ReasonNetworkPolicyNotConfirmed, message: "The CNI has not confirmed NetworkPolicy enforcement: set networkPolicy.confirmEnforced in the chart."}
		}},
		"degraded-ownership-conflict": {obs: func(o *observed) {
			o.blocked = &blockage{reason: v1alpha1.ReasonOwnershipConflict, message: "Service apps/shop exists and is not owned by the fleet."}
		}},
		"degraded-istio-api-unavailable": {obs: func(o *observed) {
			o.blocked = &blockage{reason: v1alpha1.ReasonIstioAPIUnavailable, message: "spec.mesh.mode is enabled but the cluster serves no security.istio.io API."}
		}},
		"degraded-destinationrule": {obs: func(o *observed) {
			hold := &blockage{reason: v1alpha1.ReasonMutualTLSDestinationRule, message: "DestinationRule apps/mtls forces ISTIO_MUTUAL toward the fleet's Services."}
			o.blocked, o.mutualTLSHold, o.templateHeld = hold, hold, true
			o.mesh = mesh.State{Phase: mesh.Joining, Relaxed: true, Policies: true, IstiodEgress: true}
		}},
		"degraded-members-refused": {obs: func(o *observed) {
			o.pods = o.pods[:2]
			o.refusal = &memberRefusal{message: `create Pod shop-2 in StatefulSet shop failed error: pods "shop-2" is forbidden: violates PodSecurity "restricted:latest": runAsUser=0`}
		}},
		"degraded-step-failed": {
			fleet: func(f *v1alpha1.CelldFleet) {
				f.Status.Phase = PhaseRolling
				f.Status.ObservedGeneration = 1
			},
			obs: func(o *observed) {
				*o = observed{failed: &stepError{step: "applying the StatefulSet", err: errors.New("etcd is away")}, routing: routingOutcome{keep: true}}
			},
		},
		"degraded-resize-rejected": {
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Storage = &v1alpha1.Storage{} },
			obs:   func(o *observed) { o.diskResize = "StorageClass standard does not allow volume expansion." },
		},
		"degraded-route-rejected": {obs: func(o *observed) {
			o.routing = routingOutcome{readiness: &routing.Readiness{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonRouteRejected, Message: `HTTPRoute apps/shop: admission webhook "gw.example" denied the request`}}
		}},
		"degraded-injected-without-opt-in": {obs: func(o *observed) {
			o.mesh = mesh.State{Phase: mesh.NotMeshed, UnwantedProxy: []string{"shop-0"}}
		}},
		"degraded-namespace-labels-refused": {obs: func(o *observed) {
			o.declared = namespaceOutcome{reached: true, labels: map[string]string{labels.Mesh: labels.MeshEnabled},
				refused: errors.New(`namespaces "apps" is forbidden: ValidatingAdmissionPolicy 'no-labels' denied request`)}
		}},
		"suspended-maintenance-paused": {
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Maintenance.Paused = true },
			obs:   func(o *observed) { o.pausedChanges = true },
		},
		"suspended-roll-paused": {
			fleet: func(f *v1alpha1.CelldFleet) { f.Spec.Maintenance.Paused = true },
			obs: func(o *observed) {
				o.sts.Status.UpdateRevision = "r3"
				o.decision = roll.Decision{Outdated: 3, Waiting: "maintenance is paused"}
			},
		},
	}
	for name, fx := range fixtures {
		t.Run(name, func(t *testing.T) {
			f := statusFleet()
			f.APIVersion, f.Kind = v1alpha1.GroupVersion.String(), "CelldFleet"
			if fx.fleet != nil {
				fx.fleet(f)
			}
			obs := healthyFleet()
			if fx.obs != nil {
				fx.obs(obs)
			}
			f.Status = computeStatus(f, obs, argoNow)
			golden.AssertYAML(t, "argocd/"+name, f)
		})
	}
	t.Run("progressing-generation", func(t *testing.T) {
		f := statusFleet()
		f.APIVersion, f.Kind = v1alpha1.GroupVersion.String(), "CelldFleet"
		f.Status = computeStatus(f, healthyFleet(), argoNow)
		f.Generation++
		golden.AssertYAML(t, "argocd/progressing-generation", f)
	})
}
