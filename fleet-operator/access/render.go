package access

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
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

// TableWidth is the terminal width the default table is made for.
const TableWidth = 120

// Table writes the report for people, narrow enough for a TableWidth
// terminal: per member, a row per caller and port with the rule that
// decided in short (members with the same verdicts shown once); class
// representatives are "(any)". WideTable has every layer's rule in full.
func (r *Report) Table(w io.Writer) error { return r.table(w, false) }

// WideTable is Table with the callers' full names and, per row, the
// NetworkPolicy and the Istio rule in words (kubectl celld access -o wide).
func (r *Report) WideTable(w io.Writer) error { return r.table(w, true) }

// DeepCopyObject makes a Report a runtime.Object, for kubectl's printers.
func (r *Report) DeepCopyObject() runtime.Object {
	raw, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	out := &Report{}
	if err := json.Unmarshal(raw, out); err != nil {
		panic(err)
	}
	return out
}

var _ runtime.Object = &Report{}

func (r *Report) table(w io.Writer, wide bool) error {
	var b strings.Builder
	// line writes one header line; the default table wraps it.
	line := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		if !wide {
			s = wrap(s, TableWidth, "  ")
		}
		b.WriteString(s + "\n")
	}
	line("Fleet %s/%s", r.Fleet.Namespace, r.Fleet.Name)
	var ms []string
	for _, m := range r.Members {
		s := m.Name + " (mesh: " + m.Mesh + ")"
		if !m.Live {
			s += " [not running]"
		}
		ms = append(ms, s)
	}
	line("Members: %s", strings.Join(ms, ", "))
	line("Operator: %s, Pods %s, ServiceAccount %s", r.Operator.Namespace, selectorText(r.Operator.PodLabels), r.Operator.ServiceAccount)
	line("Istio: %s", r.Istio.Note)
	for _, u := range r.Unreadable {
		line("Could not read: %s", u)
	}
	for _, n := range r.Notes {
		line("Note: %s", n)
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
		b.WriteString("\n")
		line("INGRESS to %s", strings.Join(groups[sig], ", "))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		if wide {
			fmt.Fprintln(tw, "PORT\tVERDICT\tCLASS\tCALLER\tNETWORKPOLICY\tISTIO")
		} else {
			fmt.Fprintln(tw, "PORT\tVERDICT\tCLASS\tCALLER\tDECIDED BY")
		}
		seen := map[string]bool{}
		for _, e := range rows[sig] {
			name := e.Caller.Name
			if e.Caller.Class == ClassMember && e.Caller.Live && len(groups[sig]) > 1 {
				name = "(other members)"
			}
			var line string
			if wide {
				port := strconv.Itoa(e.Port)
				if e.WirePort != e.Port {
					port += " (wire " + strconv.Itoa(e.WirePort) + ")"
				}
				line = fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\n", port, verdict(e.Allowed, e.Unknown), e.Caller.Class, name, networkRule(e.Network), e.Istio.Rule)
			} else {
				port := strconv.Itoa(e.Port)
				if e.WirePort != e.Port {
					port += " (HBONE)"
				}
				if !e.Caller.Live {
					name = shortRepresentative(e.Caller)
				}
				line = fmt.Sprintf("%s\t%s\t%s\t%s\t%s\n", port, verdict(e.Allowed, e.Unknown), e.Caller.Class, name, decidedBy(e, r.Fleet.Namespace))
			}
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
		b.WriteString("\n")
		line("EGRESS from %s", strings.Join(groups[sig], ", "))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		if wide {
			fmt.Fprintln(tw, "TARGET\tPORT\tVERDICT\tCLASS\tNETWORKPOLICY")
		} else {
			fmt.Fprintln(tw, "TARGET\tPORT\tVERDICT\tCLASS\tDECIDED BY")
		}
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
				if wide {
					port += fmt.Sprintf(" (wire %d)", e.WirePort)
				} else {
					port += " (HBONE)"
				}
			}
			rule := e.Network.Egress.Rule
			if e.Network.Egress.Allowed && !e.Network.Ingress.Allowed {
				rule = "target ingress " + e.Network.Ingress.Rule
			}
			if !wide {
				rule = egressDecidedBy(e, r.Fleet.Namespace)
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

// shortRepresentative names a class representative in the default table:
// the CLASS column already says who it stands for.
func shortRepresentative(c Caller) string {
	switch c.Name {
	case operatorWithSidecar:
		return "(any, with a sidecar)"
	case operatorWithoutMesh:
		return "(any, no mesh identity)"
	}
	return "(any)"
}

// decidedBy is the default table's rule column for an ingress row: the
// layer that denied (or could not be read), else the innermost layer that
// admitted: Istio's rule where the member is in the mesh, the NetworkPolicy
// rule otherwise.
func decidedBy(e Entry, ns string) string {
	n, i := e.Network, e.Istio
	switch {
	case n.Unknown:
		return "netpol: unreadable"
	case !n.Ingress.Allowed:
		return "netpol: no ingress rule admits"
	case !n.Egress.Allowed:
		return "netpol: no caller egress rule"
	case i.Applies:
		return istioShort(i, ns)
	}
	return netpolShort(n.Ingress, "ingress", ns)
}

func egressDecidedBy(e EgressEntry, ns string) string {
	n := e.Network
	switch {
	case n.Unknown:
		return "netpol: unreadable"
	case !n.Egress.Allowed:
		return "netpol: no egress rule admits"
	case !n.Ingress.Allowed:
		return "netpol: no target ingress rule"
	}
	return netpolShort(n.Egress, "egress", ns)
}

func netpolShort(d Direction, dir, ns string) string {
	if d.Policy == "" || d.Index < 0 {
		if strings.HasPrefix(d.Rule, "no NetworkPolicy selects") {
			return "netpol: none selects the Pod"
		}
		if strings.HasPrefix(d.Rule, "an address outside the cluster") {
			return "netpol: outside the cluster"
		}
		return "netpol: " + d.Rule
	}
	return fmt.Sprintf("netpol %s %s[%d]", strings.TrimPrefix(d.Policy, ns+"/"), dir, d.Index)
}

// istioWhyShort shortens the Istio layer's reasons for the default table.
var istioWhyShort = map[string]string{
	"plaintext rejected by STRICT mTLS":                               "STRICT rejects plaintext",
	"no ALLOW policy matched":                                         "no ALLOW rule matched",
	"no ALLOW policy applies":                                         "no ALLOW policy",
	"ztunnel accepts only mTLS (HBONE) on 15008":                      "15008 takes HBONE only",
	"HBONE tunnel accepted; the port inside is judged on its own row": "HBONE accepted",
	"Istio policies could not be read":                                "unreadable",
}

func istioShort(v IstioVerdict, ns string) string {
	switch {
	case v.Unknown:
		return "istio: unreadable"
	case v.Policy != "" && v.Index >= 0:
		action := "DENY"
		if v.Allowed {
			action = "ALLOW"
		}
		return fmt.Sprintf("istio %s %s rules[%d]", action, strings.TrimPrefix(v.Policy, ns+"/"), v.Index)
	case strings.HasPrefix(v.Rule, "kubelet probes"):
		return "istio: probes bypass ztunnel"
	}
	if s, ok := istioWhyShort[v.Rule]; ok {
		return "istio: " + s
	}
	if i := strings.LastIndex(v.Rule, "; "); i >= 0 {
		if s, ok := istioWhyShort[v.Rule[i+2:]]; ok {
			return "istio: " + s
		}
	}
	return "istio: " + v.Rule
}

// wrap breaks s at spaces so no line is longer than width, indenting the
// continuation lines; a word longer than a line stays whole.
func wrap(s string, width int, indent string) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	var b strings.Builder
	n := 0
	for i, word := range strings.Split(s, " ") {
		wl := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case n+1+wl > width:
			b.WriteString("\n" + indent)
			n = len(indent)
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += wl
	}
	return b.String()
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
