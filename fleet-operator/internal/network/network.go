// Package network builds the networking objects every CelldFleet owns: the
// ClusterIP application Service, the headless peer Service and the fleet's
// NetworkPolicy.
//
// The builders are pure: they read the fleet and the operator-wide Params and
// return complete desired objects, ready for server-side apply. They never
// talk to the API server, so the reconciler decides when to apply and tests
// can pin the output with golden files.
package network

import (
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
)

// Params is what the builders need beyond the fleet itself: facts about the
// operator's own deployment, which come from its flags. Mesh settings
// (istiod egress) and similar operator-wide inputs belong here as they are
// added, so call sites keep passing one value.
type Params struct {
	// OperatorNamespace is the namespace the operator's Pods run in. The
	// NetworkPolicy admits the operator's /state reads on the peer port only
	// from this namespace.
	OperatorNamespace string
	// OperatorPodLabels select the operator's Pods inside OperatorNamespace.
	// It must not be empty: an empty selector would admit every Pod of the
	// operator namespace to the members' peer port.
	OperatorPodLabels map[string]string
	// HBONE admits TCP 15008 from every source already admitted on 8080 or
	// 8081: in an ambient mesh traffic arrives through ztunnel's HBONE
	// tunnel, and the fleet's AuthorizationPolicy restricts ports instead.
	HBONE bool
	// IstiodNamespaces open egress to the istiod Pods there on TCP 15012,
	// where sidecars fetch configuration and certificates: the control
	// plane the fleet uses now, and any other one a running proxy was
	// injected for (mesh.IstiodNamespaces).
	IstiodNamespaces []string
}

// Validate reports Params from which no safe NetworkPolicy can be built. The
// operator's flags are validated at start-up as well; the builder checks
// again because the cost of a mistake here is a policy that admits far more
// than it should.
func (p Params) Validate() error {
	if p.OperatorNamespace == "" {
		return fmt.Errorf("network params: the operator namespace is empty; the peer-port rule could not name the operator's namespace")
	}
	if errs := validation.IsDNS1123Label(p.OperatorNamespace); len(errs) > 0 {
		return fmt.Errorf("network params: operator namespace %q is not a namespace name: %v", p.OperatorNamespace, errs)
	}
	for _, ns := range p.IstiodNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("network params: istiod namespace %q is not a namespace name: %v", ns, errs)
		}
	}
	if len(p.OperatorPodLabels) == 0 {
		return fmt.Errorf("network params: the operator Pod labels are empty; an empty selector would admit every Pod in namespace %q to the members' peer port", p.OperatorNamespace)
	}
	// Sorted so that the first reported problem does not depend on map order.
	for _, k := range slices.Sorted(maps.Keys(p.OperatorPodLabels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("network params: operator Pod label key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(p.OperatorPodLabels[k]); len(errs) > 0 {
			return fmt.Errorf("network params: operator Pod label %s=%q: %v", k, p.OperatorPodLabels[k], errs)
		}
	}
	return nil
}

// objectMeta is the metadata every object of the fleet carries: its name in
// the fleet's namespace, the common labels and a controller reference, so
// garbage collection removes it with the fleet and ownership can be checked
// before the reconciler touches an object with our name.
func objectMeta(fleet *v1alpha1.CelldFleet, name string) metav1.ObjectMeta {
	return names.ObjectMeta(fleet, name)
}
