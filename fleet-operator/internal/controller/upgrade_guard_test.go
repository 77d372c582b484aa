package controller

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// pin rewrites the pinned templates. It is deliberately not -update: the
// pins change only when a release is cut (docs/development.md), never as a
// side effect of refreshing golden files.
var pin = flag.Bool("pin", false, "pin the member Pod templates for the chart's release line (release procedure only)")

const (
	pinRoot       = "testdata/pod-templates"
	changelogPath = "../../../CHANGELOG.md"
	chartPath     = "../../../charts/fleet-operator/Chart.yaml"
	crdPath       = "../../config/crd/bases/celld.eric.dev_celldfleets.yaml"
	// restartsNotePath is what the chart's NOTES print on install/upgrade.
	restartsNotePath = "../../../" + restartsNote
	restartsNote     = "charts/fleet-operator/files/restarts-members.txt"
)

// templateCase is a representative fleet as a user writes it, and the
// mesh state of its namespace.
type templateCase struct {
	name     string
	manifest string
	// enrolled is the namespace's enrollment by the mesh operator (nil:
	// not enrolled).
	enrolled *contract.Enrollment
	// annotations are what the operator itself recorded on the fleet
	// earlier (the opt-in record of a fleet that left the mesh).
	annotations map[string]string
}

var templateCases = []templateCase{
	{name: "plain", manifest: `
spec:
  image: registry.example/celld:1.0.0
`},
	{name: "persistent", manifest: `
spec:
  image: registry.example/celld:1.0.0
  replicas: 3
  serviceAccountName: orders-runtime
  resources: {requests: {cpu: 500m}}
  env: [{name: LOG_LEVEL, value: debug}]
  podTemplate:
    labels: {team: payments}
    annotations: {example.com/owner: payments}
  scheduling:
    nodeSelector: {pool: stateful}
    tolerations: [{key: dedicated, operator: Equal, value: celld, effect: NoSchedule}]
    priorityClassName: high
    terminationGracePeriodSeconds: 120
  storage: {size: 10Gi, storageClassName: gp3, whenDeleted: Delete}
  objectStorage: {bucket: orders-snapshots, region: eu-west-1, prefix: prod/orders}
`},
	{name: "meshed", manifest: `
spec:
  image: registry.example/celld:1.0.0
  mesh:
    istio: {applicationAccess: Policies}
`},
	{name: "sidecar-enrolled", manifest: `
spec:
  image: registry.example/celld:1.0.0
`, enrolled: &contract.Enrollment{DataPlane: contract.Sidecar, MTLS: contract.MTLSStrict, Isolation: contract.IsolationNamespace, ControlPlane: "istio-system"}},
	{name: "ambient", manifest: `
spec:
  image: registry.example/celld:1.0.0
`, enrolled: &contract.Enrollment{DataPlane: contract.Ambient, MTLS: contract.MTLSStrict, Isolation: contract.IsolationNamespace, ControlPlane: "istio-system"}},
	{name: "routed", manifest: `
spec:
  image: registry.example/celld:1.0.0
  routing:
    hostnames: [orders.example.com]
    gateway: {name: public, namespace: gateways}
    source:
      namespace: gateways
      podLabels: {app: gateway}
`},
	{name: "paused", manifest: `
spec:
  image: registry.example/celld:1.0.0
  maintenance: {paused: true}
`},
	{name: "left", manifest: `
spec:
  image: registry.example/celld:1.0.0
`, annotations: map[string]string{labels.IstioControlPlane: "istio-system"}},
	{name: "disabled", manifest: `
spec:
  image: registry.example/celld:1.0.0
  mesh: {mode: disabled}
`},
}

// renderedTemplate is what the guard pins for one fleet: the member Pod
// template (a change restarts members) and the StatefulSet fields the API
// server refuses to change (a change makes every upgrade's apply fail).
type renderedTemplate struct {
	Immutable immutableFields        `json:"immutable"`
	Template  corev1.PodTemplateSpec `json:"template"`
}

type immutableFields struct {
	Selector            *metav1.LabelSelector          `json:"selector"`
	ServiceName         string                         `json:"serviceName"`
	PodManagementPolicy appsv1.PodManagementPolicyType `json:"podManagementPolicy"`
}

// TestPodTemplateStability guards upgrades: the fleet operator renders each
// representative fleet's member Pod template exactly as the release it
// upgrades from did, or the change is declared in CHANGELOG.md (and shown
// by the chart's NOTES), because every rendered change replaces every
// member of the fleets it touches once users upgrade.
func TestPodTemplateStability(t *testing.T) {
	line := releaseLine(t)
	schema := fleetSchema(t)
	rendered := map[string][]byte{}
	for _, c := range templateCases {
		rendered[c.name] = render(t, schema, c)
	}
	if *pin {
		dir := filepath.Join(pinRoot, line)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range rendered {
			if err := os.WriteFile(filepath.Join(dir, name+".yaml"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("pinned %d member templates for release line %s", len(rendered), line)
		return
	}

	pinned := newestPin(t)
	pins := map[string][]byte{}
	for _, c := range templateCases {
		b, err := os.ReadFile(filepath.Join(pinRoot, pinned, c.name+".yaml"))
		if err != nil {
			t.Fatalf("no pinned template for fleet %q in %s: a new representative fleet is pinned at the next release (go test -run TestPodTemplateStability -args -pin): %v", c.name, pinned, err)
		}
		pins[c.name] = b
	}
	for _, p := range templateVerdict(pinned, pins, rendered, restartDeclarations(t, changelogPath), readOptional(t, restartsNotePath)) {
		t.Error(p)
	}
}

// templateVerdict compares the rendered templates with the pinned ones of
// release line pinned and says what is wrong: an undeclared restart, a
// stale declaration, a chart note that does not repeat the declarations,
// or a change to immutable StatefulSet fields (never allowed).
func templateVerdict(pinned string, pins, rendered map[string][]byte, declared []restartDeclaration, note string) []string {
	var problems, changed []string
	var diffs strings.Builder
	for _, c := range templateCases {
		var old, now renderedTemplate
		if err := yaml.UnmarshalStrict(pins[c.name], &old); err != nil {
			return append(problems, fmt.Sprintf("reading pin %s/%s: %v", pinned, c.name, err))
		}
		if err := yaml.UnmarshalStrict(rendered[c.name], &now); err != nil {
			return append(problems, err.Error())
		}
		if d := cmp.Diff(old.Immutable, now.Immutable); d != "" {
			problems = append(problems, fmt.Sprintf("fleet %q: the StatefulSet's immutable fields differ from release line %s. The API server refuses this change, "+
				"so every reconcile after an upgrade would fail; it cannot be declared, only avoided (-pinned +now):\n%s", c.name, pinned, d))
		}
		if d := cmp.Diff(string(pins[c.name]), string(rendered[c.name])); d != "" {
			changed = append(changed, c.name)
			fmt.Fprintf(&diffs, "fleet %q (-%s +now):\n%s\n", c.name, pinned, d)
		}
	}
	if strings.TrimSpace(note) != noteText(declared) {
		problems = append(problems, fmt.Sprintf("%s must list the Unreleased \"Restarts members\" entries of CHANGELOG.md without their fingerprints, "+
			"so the chart's NOTES warn about the restart on upgrade; want:\n%s", restartsNote, noteText(declared)))
	}
	if len(changed) == 0 {
		for _, d := range declared {
			if d.fingerprint != "" {
				problems = append(problems, fmt.Sprintf("CHANGELOG.md declares a member restart (pod templates: %s), but the templates equal release line %s: remove the declaration", d.fingerprint, pinned))
			}
		}
		return problems
	}
	fp := fingerprint(rendered)
	if !slices.ContainsFunc(declared, func(d restartDeclaration) bool { return d.fingerprint == fp }) {
		problems = append(problems, fmt.Sprintf("This change to the member Pod template RESTARTS MEMBERS ON UPGRADE: every member of the fleets %s "+
			"(and of every fleet like them; a paused fleet once it is unpaused) is replaced, one at a time through the normal roll, when users upgrade the fleet "+
			"operator from release line %s.\n\n%s\nIf the restart is intended, declare it: in CHANGELOG.md under \"## Unreleased\" / "+
			"\"### Restarts members\" add the line\n\n  - <what changes, and which fleets restart> (pod templates: %s)\n\n"+
			"and the same line without the fingerprint to %s (the chart's NOTES print it on upgrade). "+
			"The fingerprint covers exactly this rendering; a further change needs a new declaration.",
			strings.Join(changed, ", "), pinned, diffs.String(), fp, restartsNote))
	}
	return problems
}

// render builds the fleet the way the API server would store it (CRD
// defaults applied) and renders its member template as the controller does.
func render(t *testing.T, schema *structuralschema.Structural, c templateCase, plant ...func(*appsv1.StatefulSet)) []byte {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(c.manifest), &obj); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	defaulting.Default(obj, schema)
	fleet := &v1alpha1.CelldFleet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj, fleet, true); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	fleet.Name, fleet.Namespace = c.name, "fleets"
	fleet.UID = "11111111-2222-3333-4444-555555555555"
	fleet.Annotations = c.annotations
	var state contract.State
	if c.enrolled != nil {
		sl, err := c.enrolled.StateLabels()
		if err != nil {
			t.Fatal(err)
		}
		var problems []contract.Problem
		if state, problems = contract.Parse(sl); len(problems) > 0 || !state.Enrolled {
			t.Fatalf("%s: enrollment labels %v read as %+v (%v)", c.name, sl, state, problems)
		}
	}
	sts := memberStatefulSet(fleet, mesh.IntentFor(fleet, state))
	for _, p := range plant {
		p(sts)
	}
	b, err := yaml.Marshal(renderedTemplate{
		Immutable: immutableFields{Selector: sts.Spec.Selector, ServiceName: sts.Spec.ServiceName, PodManagementPolicy: sts.Spec.PodManagementPolicy},
		Template:  sts.Spec.Template,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fleetSchema is the CelldFleet CRD's structural schema, for its defaults.
func fleetSchema(t *testing.T) *structuralschema.Structural {
	t.Helper()
	raw, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != v1alpha1.GroupVersion.Version {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			t.Fatal(err)
		}
		s, err := structuralschema.NewStructural(internal)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Fatalf("%s serves no version %s", crdPath, v1alpha1.GroupVersion.Version)
	return nil
}

// releaseLine is the chart's release line, e.g. "v0.1" for version 0.1.3.
func releaseLine(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(chartPath)
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	v, err := version.ParseSemantic(chart.Version)
	if err != nil {
		t.Fatalf("%s: %v", chartPath, err)
	}
	return fmt.Sprintf("v%d.%d", v.Major(), v.Minor())
}

// newestPin is the newest release line with pinned templates: what users
// upgrade from until the next release pins its own.
func newestPin(t *testing.T) string {
	t.Helper()
	entries, err := os.ReadDir(pinRoot)
	if err != nil {
		t.Fatalf("no pinned templates (%v): pin them with go test -run TestPodTemplateStability -pin", err)
	}
	var newest *version.Version
	name := ""
	for _, e := range entries {
		v, err := version.ParseGeneric(strings.TrimPrefix(e.Name(), "v") + ".0")
		if !e.IsDir() || err != nil {
			continue
		}
		if newest == nil || newest.LessThan(v) {
			newest, name = v, e.Name()
		}
	}
	if name == "" {
		t.Fatalf("no release line directory under %s", pinRoot)
	}
	return name
}

// restartDeclaration is one entry of CHANGELOG.md's Unreleased "Restarts members".
type restartDeclaration struct {
	text, fingerprint string
}

var fingerprintRE = regexp.MustCompile(`\s*\(pod templates: ([0-9a-f]{12})\)\s*$`)

func restartDeclarations(t *testing.T, path string) []restartDeclaration {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("CHANGELOG.md: %v", err)
	}
	var out []restartDeclaration
	section, sub := "", ""
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section, sub = strings.TrimSpace(line[3:]), ""
		case strings.HasPrefix(line, "### "):
			sub = strings.TrimSpace(line[4:])
		case section == "Unreleased" && sub == "Restarts members" && strings.HasPrefix(line, "- "):
			d := restartDeclaration{text: line}
			if m := fingerprintRE.FindStringSubmatch(line); m != nil {
				d.fingerprint, d.text = m[1], strings.TrimSpace(fingerprintRE.ReplaceAllString(line, ""))
			}
			out = append(out, d)
		}
	}
	return out
}

// noteText is what the chart's restart note must say for the declarations.
func noteText(ds []restartDeclaration) string {
	lines := make([]string, len(ds))
	for i, d := range ds {
		lines[i] = d.text
	}
	return strings.Join(lines, "\n")
}

func readOptional(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fingerprint names one rendering of all representative templates.
func fingerprint(rendered map[string][]byte) string {
	h := sha256.New()
	for _, c := range templateCases {
		fmt.Fprintf(h, "%s\n%s\n", c.name, rendered[c.name])
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// TestTemplateGuardCatchesPlantedChanges shows the guard at work on changes
// planted into the rendering: it fails an undeclared restart, a declaration
// for another rendering, a missing chart note, a stale declaration and any
// change to immutable fields, and passes once a restart is declared.
func TestTemplateGuardCatchesPlantedChanges(t *testing.T) {
	schema := fleetSchema(t)
	renderAll := func(plant ...func(*appsv1.StatefulSet)) map[string][]byte {
		out := map[string][]byte{}
		for _, c := range templateCases {
			out[c.name] = render(t, schema, c, plant...)
		}
		return out
	}
	pins := renderAll()
	label := func(s *appsv1.StatefulSet) { s.Spec.Template.Labels["example.com/planted"] = "x" }
	probe := func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].ReadinessProbe.PeriodSeconds++ }
	labelled, probed := renderAll(label), renderAll(probe)
	declare := func(fp string) []restartDeclaration {
		return []restartDeclaration{{text: "- Every fleet: a planted change", fingerprint: fp}}
	}
	const note = "- Every fleet: a planted change"

	for name, c := range map[string]struct {
		rendered map[string][]byte
		declared []restartDeclaration
		note     string
		problems int
		mention  []string // what the problems must say between them
	}{
		"unchanged":                   {rendered: pins},
		"undeclared label":            {rendered: labelled, problems: 1, mention: []string{"RESTARTS MEMBERS ON UPGRADE", "example.com/planted"}},
		"undeclared probe":            {rendered: probed, problems: 1, mention: []string{"RESTARTS MEMBERS ON UPGRADE", "periodSeconds"}},
		"declared":                    {rendered: labelled, declared: declare(fingerprint(labelled)), note: note},
		"declared for another change": {rendered: probed, declared: declare(fingerprint(labelled)), note: note, problems: 1, mention: []string{"pod templates: " + fingerprint(probed)}},
		"declared without chart note": {rendered: labelled, declared: declare(fingerprint(labelled)), problems: 1, mention: []string{"restarts-members.txt must list"}},
		"stale declaration":           {rendered: pins, declared: declare(fingerprint(labelled)), note: note, problems: 1, mention: []string{"remove the declaration"}},
		"note without declaration":    {rendered: pins, note: note, problems: 1, mention: []string{"restarts-members.txt must list"}},
		"immutable field, even if declared": {
			rendered: renderAll(func(s *appsv1.StatefulSet) { s.Spec.ServiceName += "-x" }),
			declared: declare(fingerprint(renderAll(func(s *appsv1.StatefulSet) { s.Spec.ServiceName += "-x" }))), note: note,
			problems: len(templateCases), mention: []string{"immutable fields differ"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := templateVerdict("v0.1", pins, c.rendered, c.declared, c.note)
			if len(got) != c.problems {
				t.Fatalf("want %d problem(s), got %d:\n%s", c.problems, len(got), strings.Join(got, "\n---\n"))
			}
			for _, w := range c.mention {
				if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, w) }) {
					t.Errorf("no problem mentions %q:\n%s", w, strings.Join(got, "\n---\n"))
				}
			}
		})
	}
}

// TestRestartDeclarationsAreReadFromUnreleasedOnly reads a CHANGELOG where
// released sections also list restarts: only Unreleased ones count.
func TestRestartDeclarationsAreReadFromUnreleasedOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "CHANGELOG.md")
	text := "# Changelog\n\n## Unreleased\n\n### Restarts members\n\n- Sidecar fleets: new probe (pod templates: 0123456789ab)\n- Disks: a note without fingerprint\n\n### Fleet operator\n\n- not a restart\n\n" +
		"## 0.1.0\n\n### Restarts members\n\n- old restart (pod templates: ba9876543210)\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got := restartDeclarations(t, path)
	want := []restartDeclaration{{text: "- Sidecar fleets: new probe", fingerprint: "0123456789ab"}, {text: "- Disks: a note without fingerprint"}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(restartDeclaration{})); d != "" {
		t.Error(d)
	}
}
