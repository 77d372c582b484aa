package controller

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/ericdev/fleetmesh/shared/pacing"
)

// The ServiceMesh controller's event filters, each the projection of what
// the reconcile reads of the object; every drop is counted
// (fleetmesh_pacing_dropped_events_total; docs/pacing.md).

// namespaceFacts: of a namespace, the reconcile reads its labels
// (enrollment requests, opt-outs, declared edges) and its generation.
var namespaceFacts = pacing.UpdateFilter(meshControllerName, "namespace-labels-generation", func(ns *corev1.Namespace) namespaceRead {
	return namespaceRead{Labels: ns.Labels, Generation: ns.Generation}
})

type namespaceRead struct {
	Labels     map[string]string
	Generation int64
}

// networkPolicyFacts: a NetworkPolicy's spec (generation) may hold or
// release an ambient enrollment; its status and metadata do not.
var networkPolicyFacts = pacing.UpdateFilter(meshControllerName, "networkpolicy-generation", func(np *networkingv1.NetworkPolicy) int64 { return np.Generation })

// meshControllerName names the ServiceMesh controller's pacing metrics.
const meshControllerName = "servicemesh"
