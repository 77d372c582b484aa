package access

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// JSON writes the report as indented JSON (the documented -o json form).
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Filter keeps the ingress entries from the caller named from (NS/POD, or
// a class name) and to the member and port named to (POD, POD:PORT or
// :PORT); an empty argument keeps everything. Egress entries are kept
// for the members kept, only when from is empty.
func (r *Report) Filter(from, to string) (*Report, error) {
	member, port := to, 0
	if i := strings.LastIndex(to, ":"); i >= 0 {
		n, err := strconv.Atoi(to[i+1:])
		if err != nil {
			return nil, fmt.Errorf("--to %q: want POD, POD:PORT or :PORT", to)
		}
		member, port = to[:i], n
	}
	if member != "" && !slices.ContainsFunc(r.Members, func(m Member) bool { return m.Name == member }) {
		return nil, fmt.Errorf("--to %q: %s is not a member Pod of %s/%s", to, member, r.Fleet.Namespace, r.Fleet.Name)
	}
	out := *r
	// Empty lists, not null: the schema promises arrays.
	out.Ingress, out.Egress = []Entry{}, []EgressEntry{}
	for _, e := range r.Ingress {
		if (member == "" || e.Member == member) && (port == 0 || e.Port == port) && (from == "" || e.Caller.Name == from || e.Caller.Class == from) {
			out.Ingress = append(out.Ingress, e)
		}
	}
	if from != "" && len(out.Ingress) == 0 {
		return nil, fmt.Errorf("--from %q: no such caller (a Pod as NAMESPACE/NAME, which must exist, or a class: %s)", from, strings.Join(Classes(), ", "))
	}
	if from == "" && port == 0 {
		for _, e := range r.Egress {
			if member == "" || e.Member == member {
				out.Egress = append(out.Egress, e)
			}
		}
	}
	return &out, nil
}

// Classes are the caller classes, in report order.
func Classes() []string {
	return []string{ClassMember, ClassOperator, ClassOperatorNS, ClassClient, ClassPlaintextClient, ClassNamespace,
		ClassRoutingSource, ClassRoutingNS, ClassOtherMeshed, ClassOtherPlain, ClassExternal, ClassProbe}
}

// Violations are the allowed (or unknown) ingress entries on port whose
// caller class is not among allowed: "fail if anything outside the fleet
// reaches 8081" is Violations(8081, member, operator).
func (r *Report) Violations(port int, allowed ...string) []Entry {
	var out []Entry
	for _, e := range r.Ingress {
		if e.Port == port && (e.Allowed || e.Unknown) && !slices.Contains(allowed, e.Caller.Class) {
			out = append(out, e)
		}
	}
	return out
}

func verdict(allowed, unknown bool) string {
	switch {
	case unknown:
		return "unknown"
	case allowed:
		return "allow"
	}
	return "deny"
}

// networkRule is the NetworkPolicy column: the side that denied, or the
// rule that admitted on the destination (with the caller's egress rule when
// one had to admit too).
func networkRule(v NetworkVerdict) string {
	switch {
	case v.Unknown:
		return "NetworkPolicies could not be read"
	case !v.Ingress.Allowed:
		return v.Ingress.Rule
	case !v.Egress.Allowed:
		return "caller egress " + v.Egress.Rule
	case v.Egress.Policy != "":
		return v.Ingress.Rule + "; caller egress " + v.Egress.Rule
	}
	return v.Ingress.Rule
}

// Table writes the report for people: per member, a row per caller and
// port, members with the same verdicts shown once.
func (r *Report) Table(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Fleet %s/%s\n", r.Fleet.Namespace, r.Fleet.Name)
	var ms []string
	for _, m := range r.Members {
		s := m.Name + " (mesh: " + m.Mesh + ")"
		if !m.Live {
			s += " [not running]"
		}
		ms = append(ms, s)
	}
	fmt.Fprintf(&b, "Members: %s\n", strings.Join(ms, ", "))
	fmt.Fprintf(&b, "Operator: %s, Pods %s, ServiceAccount %s\n", r.Operator.Namespace, selectorText(r.Operator.PodLabels), r.Operator.ServiceAccount)
	fmt.Fprintf(&b, "Istio: %s\n", r.Istio.Note)
	for _, u := range r.Unreadable {
		fmt.Fprintf(&b, "Could not read: %s\n", u)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}

	groups, order := map[string][]string{}, []string{}
	rows := map[string][]Entry{}
	for _, m := range r.Members {
		var es []Entry
		for _, e := range r.Ingress {
			if e.Member == m.Name {
				es = append(es, e)
			}
		}
		if len(es) == 0 {
			continue
		}
		sig := signature(es)
		if _, ok := groups[sig]; !ok {
			order = append(order, sig)
			rows[sig] = es
		}
		groups[sig] = append(groups[sig], m.Name)
	}
	for _, sig := range order {
		fmt.Fprintf(&b, "\nINGRESS to %s\n", strings.Join(groups[sig], ", "))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PORT\tVERDICT\tCLASS\tCALLER\tNETWORKPOLICY\tISTIO")
		seen := map[string]bool{}
		for _, e := range rows[sig] {
			port := strconv.Itoa(e.Port)
			if e.WirePort != e.Port {
				port += " (wire " + strconv.Itoa(e.WirePort) + ")"
			}
			name := e.Caller.Name
			if e.Caller.Class == ClassMember && e.Caller.Live && len(groups[sig]) > 1 {
				name = "(other members)"
			}
			line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\n", port, verdict(e.Allowed, e.Unknown), e.Caller.Class, name, networkRule(e.Network), e.Istio.Rule)
			if !seen[line] { // other members judged alike show once
				seen[line] = true
				fmt.Fprint(tw, line)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	groups, order = map[string][]string{}, nil
	erows := map[string][]EgressEntry{}
	for _, m := range r.Members {
		var es []EgressEntry
		for _, e := range r.Egress {
			if e.Member == m.Name {
				es = append(es, e)
			}
		}
		if len(es) == 0 {
			continue
		}
		sig := egressSignature(es)
		if _, ok := groups[sig]; !ok {
			order = append(order, sig)
			erows[sig] = es
		}
		groups[sig] = append(groups[sig], m.Name)
	}
	for _, sig := range order {
		fmt.Fprintf(&b, "\nEGRESS from %s\n", strings.Join(groups[sig], ", "))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TARGET\tPORT\tVERDICT\tCLASS\tNETWORKPOLICY")
		for _, e := range erows[sig] {
			name := e.Target.Name
			if e.Target.Namespace != "" && strings.HasPrefix(name, "(") && e.Target.Class != TargetOther {
				name += " in " + e.Target.Namespace
			}
			if e.Target.Class == TargetPeer && len(groups[sig]) > 1 {
				name = "(another member)"
			}
			port := fmt.Sprintf("%s %d", e.Protocol, e.Port)
			if e.WirePort != e.Port {
				port += fmt.Sprintf(" (wire %d)", e.WirePort)
			}
			rule := e.Network.Egress.Rule
			if e.Network.Egress.Allowed && !e.Network.Ingress.Allowed {
				rule = "target ingress " + e.Network.Ingress.Rule
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, port, verdict(e.Allowed, e.Unknown), e.Target.Class, rule)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// signature of a member's rows without the member's own name and with
// other members' names left out, so members judged alike group together.
func signature(es []Entry) string {
	var b strings.Builder
	for _, e := range es {
		name := e.Caller.Name
		if e.Caller.Class == ClassMember && e.Caller.Live {
			name = "member:" + strconv.FormatBool(e.Caller.Meshed)
		}
		fmt.Fprintf(&b, "%d|%d|%s|%s|%t|%t|%s|%s\n", e.Port, e.WirePort, e.Caller.Class, name, e.Allowed, e.Unknown, networkRule(e.Network), e.Istio.Rule)
	}
	return b.String()
}

func egressSignature(es []EgressEntry) string {
	var b strings.Builder
	for _, e := range es {
		name := e.Target.Name
		if e.Target.Class == TargetPeer {
			name = ""
		}
		fmt.Fprintf(&b, "%s|%s|%d|%d|%s|%t|%s|%s\n", e.Target.Class, name, e.Port, e.WirePort, e.Protocol, e.Allowed, e.Network.Egress.Rule, e.Network.Ingress.Rule)
	}
	return b.String()
}

func selectorText(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}
