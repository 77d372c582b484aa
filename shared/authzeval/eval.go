// Package authzeval is a small evaluator of Istio's inbound decision for one
// workload: the namespace's PeerAuthentication mode, then its
// AuthorizationPolicies in Istio's order (any matching DENY denies; with no
// ALLOW policy the request is allowed; otherwise an ALLOW must match). It
// understands the L4 subset the operators write: principals, namespaces
// (and their not- forms) and destination ports, with Istio's prefix/suffix
// "*" wildcards, and matchLabels workload selectors. Tests of both
// operators use it to show what a policy set admits; it lives in shared so
// the end-to-end specs can judge the live policies of both operators
// together.
package authzeval

import (
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Request is one inbound connection to the workload.
type Request struct {
	// MTLS: the client presented a mesh identity. Plaintext requests have
	// no principal and no namespace as far as authorization is concerned.
	MTLS bool
	// Principal is the peer's identity, cluster.local/ns/<ns>/sa/<sa>.
	Principal string
	// Namespace is the peer's namespace (from its identity).
	Namespace string
	Port      int
}

// Policy is an AuthorizationPolicy as the evaluator reads it.
type Policy struct {
	// Name identifies the policy in explanations (namespace/name).
	Name   string
	Action string // ALLOW (default) or DENY
	Rules  []Rule
	// Selects says whether the policy applies to the workload evaluated
	// (a namespace-wide policy always does).
	Selects bool
}

// Rule: any From and any To must match (an empty list matches anything).
type Rule struct {
	From []Source
	To   []int // ports; empty: any
}

// Source: every field that is set must match.
type Source struct {
	Principals, NotPrincipals, Namespaces, NotNamespaces []string
}

// Decision is the outcome and the step that made it: Policy and Rule name
// the policy and the index of its rule that decided (Rule -1 when no rule
// did: STRICT refused plaintext, or nothing matched).
type Decision struct {
	Allowed bool
	Why     string
	Policy  string
	Rule    int
}

// Evaluate decides a request under the namespace's mTLS mode ("STRICT" or
// "PERMISSIVE") and the policies that apply to the workload.
func Evaluate(mtlsMode string, policies []Policy, req Request) Decision {
	if !req.MTLS {
		if mtlsMode == "STRICT" {
			return Decision{Why: "plaintext rejected by STRICT mTLS", Rule: -1}
		}
		req.Principal, req.Namespace = "", ""
	}
	for _, p := range policies {
		if p.Selects && p.Action == "DENY" {
			if i := p.match(req); i >= 0 {
				return Decision{Why: "matched a DENY policy", Policy: p.Name, Rule: i}
			}
		}
	}
	anyAllow := false
	for _, p := range policies {
		if !p.Selects || p.Action == "DENY" {
			continue
		}
		anyAllow = true
		if i := p.match(req); i >= 0 {
			return Decision{Allowed: true, Why: "matched an ALLOW policy", Policy: p.Name, Rule: i}
		}
	}
	if !anyAllow {
		return Decision{Allowed: true, Why: "no ALLOW policy applies", Rule: -1}
	}
	return Decision{Why: "no ALLOW policy matched", Rule: -1}
}

// match is the index of the first rule matching req, or -1.
func (p Policy) match(req Request) int {
	for i, r := range p.Rules {
		if r.matches(req) {
			return i
		}
	}
	return -1
}

func (r Rule) matches(req Request) bool {
	if len(r.To) > 0 && !slices.Contains(r.To, req.Port) {
		return false
	}
	if len(r.From) == 0 {
		return true
	}
	for _, s := range r.From {
		if s.matches(req) {
			return true
		}
	}
	return false
}

func (s Source) matches(req Request) bool {
	return in(s.Principals, req.Principal, true) && !in(s.NotPrincipals, req.Principal, false) &&
		in(s.Namespaces, req.Namespace, true) && !in(s.NotNamespaces, req.Namespace, false)
}

// in reports whether v matches one of the patterns; an unset field gives
// ifEmpty. An empty value (plaintext) matches no pattern, not even "*":
// Istio's "*" means "any authenticated identity".
func in(patterns []string, v string, ifEmpty bool) bool {
	if len(patterns) == 0 {
		return ifEmpty
	}
	if v == "" {
		return false
	}
	for _, p := range patterns {
		switch {
		case p == "*":
			return true
		case strings.HasPrefix(p, "*") && strings.HasSuffix(v, p[1:]):
			return true
		case strings.HasSuffix(p, "*") && strings.HasPrefix(v, p[:len(p)-1]):
			return true
		case p == v:
			return true
		}
	}
	return false
}

// FromUnstructured reads an AuthorizationPolicy object for a workload with
// podLabels (only the L4 fields above; a rule using anything else is kept
// but, being L7, is not modelled). Selects is true when the policy has no
// selector or its matchLabels are all among podLabels.
func FromUnstructured(u *unstructured.Unstructured, podLabels map[string]string) Policy {
	spec, _ := u.Object["spec"].(map[string]any)
	p := Policy{Name: u.GetNamespace() + "/" + u.GetName(), Action: "ALLOW"}
	if a, ok := spec["action"].(string); ok && a != "" {
		p.Action = a
	}
	matchLabels, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	p.Selects = subset(matchLabels, podLabels)
	rules, _ := spec["rules"].([]any)
	for _, r := range rules {
		rm, _ := r.(map[string]any)
		var rule Rule
		froms, _ := rm["from"].([]any)
		for _, f := range froms {
			src, _ := f.(map[string]any)["source"].(map[string]any)
			rule.From = append(rule.From, Source{Principals: strs(src["principals"]), NotPrincipals: strs(src["notPrincipals"]),
				Namespaces: strs(src["namespaces"]), NotNamespaces: strs(src["notNamespaces"])})
		}
		tos, _ := rm["to"].([]any)
		for _, t := range tos {
			op, _ := t.(map[string]any)["operation"].(map[string]any)
			for _, port := range strs(op["ports"]) {
				if n, err := strconv.Atoi(port); err == nil {
					rule.To = append(rule.To, n)
				}
			}
		}
		p.Rules = append(p.Rules, rule)
	}
	return p
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// MTLSMode is the mTLS mode ("STRICT", "PERMISSIVE" or "DISABLE") a workload
// with podLabels enforces on port (see MTLSInForce, sidecar rules).
func MTLSMode(peerAuthentications []unstructured.Unstructured, podLabels map[string]string, port int) string {
	return MTLSInForce(peerAuthentications, podLabels, port, false).Mode
}

// ModeInForce is the mTLS mode a workload enforces on a port and the
// PeerAuthentication (namespace/name) that set it; Source is empty when no
// policy did and Istio's default (PERMISSIVE) holds. PortLevel says the
// mode came from that policy's portLevelMtls.
type ModeInForce struct {
	Mode      string
	Source    string
	PortLevel bool
}

// MTLSInForce is the mTLS mode a workload with podLabels enforces on port,
// from the PeerAuthentications of its namespace: a workload-selector policy's
// portLevelMtls for the port wins over its mtls.mode, which wins over the
// namespace-wide policy's mode; UNSET or absent inherits, and with nothing
// set Istio's default is PERMISSIVE (the mesh-wide root-namespace policy is
// not modelled). Where several namespace-wide policies exist, or several
// selector policies match the workload, Istio applies only the oldest of
// each (by creation time, then name). ambient: ztunnel enforces the
// workload, and it ignores DISABLE (it always accepts mTLS and, unless
// STRICT, plaintext), so DISABLE reads as PERMISSIVE there.
func MTLSInForce(peerAuthentications []unstructured.Unstructured, podLabels map[string]string, port int, ambient bool) ModeInForce {
	out := ModeInForce{Mode: "PERMISSIVE"}
	set := func(m string, pa *unstructured.Unstructured, portLevel bool) {
		if m != "" && m != "UNSET" {
			out = ModeInForce{Mode: m, Source: pa.GetNamespace() + "/" + pa.GetName(), PortLevel: portLevel}
		}
	}
	var namespaceWide, workload *unstructured.Unstructured
	for i := range peerAuthentications {
		pa := &peerAuthentications[i]
		spec, _ := pa.Object["spec"].(map[string]any)
		if _, hasSelector := spec["selector"]; !hasSelector {
			if namespaceWide == nil || olderThan(pa, namespaceWide) {
				namespaceWide = pa
			}
			continue
		}
		matchLabels, found, _ := unstructured.NestedStringMap(pa.Object, "spec", "selector", "matchLabels")
		if found && subset(matchLabels, podLabels) && (workload == nil || olderThan(pa, workload)) {
			workload = pa
		}
	}
	if namespaceWide != nil {
		m, _, _ := unstructured.NestedString(namespaceWide.Object, "spec", "mtls", "mode")
		set(m, namespaceWide, false)
	}
	if workload != nil {
		m, _, _ := unstructured.NestedString(workload.Object, "spec", "mtls", "mode")
		set(m, workload, false)
		m, _, _ = unstructured.NestedString(workload.Object, "spec", "portLevelMtls", strconv.Itoa(port), "mode")
		set(m, workload, true)
	}
	if ambient && out.Mode == "DISABLE" {
		out.Mode = "PERMISSIVE"
	}
	return out
}

// olderThan orders PeerAuthentications as Istio picks among rivals: by
// creation time, then by name.
func olderThan(a, b *unstructured.Unstructured) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

func subset(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
