package mesh

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
)

// DestinationRuleKind is Istio's networking.istio.io/v1 DestinationRule,
// which the operator only ever lists.
var DestinationRuleKind = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule"}

// IstioMutual is the DestinationRule tls.mode that makes a sidecar
// originate Istio's mutual TLS whether or not the destination runs a proxy.
const IstioMutual = "ISTIO_MUTUAL"

// clusterDomain is the DNS suffix Istio's hostnames use for Kubernetes
// Services (host names in DestinationRules are matched against it).
const clusterDomain = "svc.cluster.local"

// DestinationRule is what the roll's hold needs of one DestinationRule.
type DestinationRule struct {
	Namespace, Name string
	// Host is spec.host as written (a short name is relative to Namespace).
	Host string
	// ExportTo is spec.exportTo; empty exports to every namespace.
	ExportTo []string
	// TLSMode is spec.trafficPolicy.tls.mode ("" when unset).
	TLSMode string
	// PortTLSModes are spec.trafficPolicy.portLevelSettings[].tls.mode by
	// port number, for the entries that set one.
	PortTLSModes map[int]string
}

// DestinationRuleFrom reads a DestinationRule object.
func DestinationRuleFrom(u *unstructured.Unstructured) DestinationRule {
	dr := DestinationRule{Namespace: u.GetNamespace(), Name: u.GetName()}
	dr.Host, _, _ = unstructured.NestedString(u.Object, "spec", "host")
	dr.ExportTo, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "exportTo")
	dr.TLSMode, _, _ = unstructured.NestedString(u.Object, "spec", "trafficPolicy", "tls", "mode")
	ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "trafficPolicy", "portLevelSettings")
	for _, p := range ports {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		number, found, _ := unstructured.NestedInt64(pm, "port", "number")
		mode, set, _ := unstructured.NestedString(pm, "tls", "mode")
		if found && set {
			if dr.PortTLSModes == nil {
				dr.PortTLSModes = map[int]string{}
			}
			dr.PortTLSModes[int(number)] = mode
		}
	}
	return dr
}

// Destination is one Service port of the fleet that sidecars call: its
// hostname as Istio names it, and the port.
type Destination struct {
	Host string
	Port int
}

// FleetDestinations are the fleet's Services as sidecars in its namespace
// call them: the application Service on 8080 and the peer Service on 8081.
func FleetDestinations(f *v1alpha1.CelldFleet) []Destination {
	return []Destination{
		{Host: fmt.Sprintf("%s.%s.%s", names.AppService(f.Name), f.Namespace, clusterDomain), Port: names.AppPort},
		{Host: fmt.Sprintf("%s.%s.%s", names.PeerService(f.Name), f.Namespace, clusterDomain), Port: names.PeerPort},
	}
}

// MutualTLSRule is a DestinationRule that forces ISTIO_MUTUAL toward one of
// the fleet's destinations.
type MutualTLSRule struct {
	Namespace, Name string
	// Toward is the destination ("host:port") it forces ISTIO_MUTUAL on.
	Toward []string
}

// MutualTLSRules returns the DestinationRules that make a sidecar in the
// fleet's namespace originate ISTIO_MUTUAL toward one of the fleet's
// destinations, sorted by namespace and name. It follows Istio's own choice
// of the DestinationRule for a caller and a host: the most specific host
// match among the rules of the caller's namespace (the fleet's, where the
// members and their clients run) that are visible there, and only if none
// matches, the most specific among the root namespace's rules exported to
// the caller's namespace. Rules of the same namespace with the same host are
// merged by Istio; any of them forcing ISTIO_MUTUAL counts. A port-level tls
// setting for the destination's port wins over the rule's own.
//
// Host names follow Istio: a name without a dot is relative to the rule's
// namespace (svc is svc.NS.svc.cluster.local); any other name is taken as
// written, so svc.ns matches nothing (Istio does not complete it); a
// leading "*." matches any name that ends in the rest, and "*" matches all.
// A workloadSelector is not looked at: a rule that selects some of the
// callers counts, the hold errs on the side of the members' traffic.
func MutualTLSRules(fleetNamespace, rootNamespace string, dests []Destination, rules []DestinationRule) []MutualTLSRule {
	found := map[string]*MutualTLSRule{}
	for _, d := range dests {
		for _, rule := range decidingRules(fleetNamespace, rootNamespace, d.Host, rules) {
			mode := rule.TLSMode
			if m, ok := rule.PortTLSModes[d.Port]; ok {
				mode = m
			}
			if mode != IstioMutual {
				continue
			}
			key := rule.Namespace + "/" + rule.Name
			if found[key] == nil {
				found[key] = &MutualTLSRule{Namespace: rule.Namespace, Name: rule.Name}
			}
			found[key].Toward = append(found[key].Toward, fmt.Sprintf("%s:%d", d.Host, d.Port))
		}
	}
	out := make([]MutualTLSRule, 0, len(found))
	for _, r := range found {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// decidingRules are the rules Istio applies to calls from the fleet's
// namespace to host: those of the first namespace (the caller's, then the
// root) with a visible rule matching host, narrowed to its most specific
// host.
func decidingRules(fleetNamespace, rootNamespace, host string, rules []DestinationRule) []DestinationRule {
	for _, ns := range []string{fleetNamespace, rootNamespace} {
		var visible []DestinationRule
		for _, r := range rules {
			if r.Namespace == ns && visibleFrom(r, fleetNamespace) {
				visible = append(visible, r)
			}
		}
		if best := mostSpecific(host, visible); len(best) > 0 {
			return best
		}
		if rootNamespace == fleetNamespace {
			break
		}
	}
	return nil
}

// visibleFrom reports whether Istio applies the rule to callers in ns: a
// rule is visible in its own namespace unless exportTo names only other
// namespaces (or "~", none), and elsewhere when exportTo is empty, has "*"
// or names ns.
func visibleFrom(r DestinationRule, ns string) bool {
	if len(r.ExportTo) == 0 || slices.Contains(r.ExportTo, "*") || slices.Contains(r.ExportTo, ns) {
		return true
	}
	return r.Namespace == ns && slices.Contains(r.ExportTo, ".")
}

// mostSpecific keeps the rules whose host is the most specific match for
// host: an exact name first, else the longest matching wildcard.
func mostSpecific(host string, rules []DestinationRule) []DestinationRule {
	best, bestLen, exact := []DestinationRule(nil), -1, false
	for _, r := range rules {
		h := resolveHost(r.Host, r.Namespace)
		var isExact bool
		switch {
		case h == host:
			isExact = true
		case h == "*":
		case strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]):
		default:
			continue
		}
		switch {
		case isExact && !exact, !isExact && !exact && len(h) > bestLen:
			best, bestLen, exact = []DestinationRule{r}, len(h), isExact
		case isExact == exact && (exact || len(h) == bestLen):
			best = append(best, r)
		}
	}
	return best
}

// resolveHost completes a short name (no dot) relative to the rule's
// namespace, as Istio does; other names are kept as written.
func resolveHost(h, namespace string) string {
	if h == "*" || strings.Contains(h, ".") {
		return h
	}
	return fmt.Sprintf("%s.%s.%s", h, namespace, clusterDomain)
}

// MutualTLSHoldMessage explains a roll into or out of the mesh held by
// rules that force ISTIO_MUTUAL toward the fleet, and what to do.
func MutualTLSHoldMessage(fleet *v1alpha1.CelldFleet, change string, rules []MutualTLSRule) string {
	var named []string
	for _, r := range rules {
		named = append(named, fmt.Sprintf("%s/%s (toward %s)", r.Namespace, r.Name, strings.Join(r.Toward, ", ")))
	}
	return fmt.Sprintf("The fleet is %s the mesh, and DestinationRule %s sets tls.mode %s for the fleet's Services. While members roll, "+
		"sidecars would open Istio mutual TLS toward members that run no proxy and accept only plaintext, and their calls would fail. "+
		"The roll is held before the first member is replaced: the members' StatefulSet is left as it is. Delete the DestinationRule "+
		"for the roll, or change it so that it no longer forces %s on the fleet's hosts (narrow its host or exportTo, or add DestinationRules "+
		"in namespace %s for the hosts named here without a tls mode, which leaves the choice to Istio's automatic mutual TLS). "+
		"The roll resumes once no such DestinationRule is left.",
		change, strings.Join(named, ", "), IstioMutual, IstioMutual, fleet.Namespace)
}
