// Package argocd tests the Argo CD health checks shipped in argocd/ (Lua,
// run here by gopher-lua, the interpreter Argo CD embeds) against status
// the operators' own code computed: the golden files their
// TestArgoCDHealthFixtures write.
package argocd

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"

	_ "github.com/ericdev/fleetmesh/shared/golden" // registers -update
)

const root = "../.."

// The two checks: the script, and where the operator's fixtures are.
var kinds = []struct {
	group, kind, fixtures string
}{
	{"celld.eric.dev", "CelldFleet", "fleet-operator/internal/controller/testdata/argocd"},
	{"core.navique.com", "ServiceMesh", "mesh-operator/internal/controller/testdata/argocd"},
}

func scriptPath(group, kind string) string {
	return filepath.Join(root, "argocd", "resource_customizations", group, kind, "health.lua")
}

// health runs script on obj as Argo CD does (lua.VM.ExecuteHealthLua): obj
// is a global table, only the package, base and table libraries are open,
// and the script returns a table {status, message}.
func health(t *testing.T, script string, obj map[string]any) (status, message string) {
	t.Helper()
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		l.Push(l.NewFunction(lib.open))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	l.SetGlobal("obj", toLua(l, obj))
	if err := l.DoString(script); err != nil {
		t.Fatalf("the health script failed: %v", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the health script returned %s, not a table", l.Get(-1).Type())
	}
	s, _ := ret.RawGetString("status").(lua.LString)
	m, _ := ret.RawGetString("message").(lua.LString)
	return string(s), string(m)
}

// toLua converts decoded JSON as Argo CD's Lua VM does.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := l.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(l, e))
		}
		return t
	case []any:
		t := l.NewTable()
		for _, e := range v {
			t.Append(toLua(l, e))
		}
		return t
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case bool:
		return lua.LBool(v)
	}
	return lua.LNil
}

func readObject(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func readScript(t *testing.T, group, kind string) string {
	t.Helper()
	raw, err := os.ReadFile(scriptPath(group, kind))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// Argo CD's health statuses a script may return.
var argoStatuses = []string{"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}

// messages: what a fixture's message must say (the deciding reason).
var messages = map[string]string{
	"CelldFleet/degraded-destinationrule":             "MutualTLSDestinationRule",
	"CelldFleet/degraded-injected-without-opt-in":     "MeshReady: InjectedWithoutOptIn",
	"CelldFleet/degraded-istio-api-unavailable":       "IstioAPIUnavailable",
	"CelldFleet/degraded-member-restarted":            "Members are not healthy",
	"CelldFleet/degraded-member-unhealthy":            "Members are not healthy",
	"CelldFleet/degraded-members-refused":             `MembersRefused: 2 of 3 member(s) exist`,
	"CelldFleet/degraded-namespace-labels-refused":    "NamespaceDeclared: NamespaceLabelsRefused",
	"CelldFleet/degraded-networkpolicy-not-confirmed": "NetworkPolicyNotConfirmed",
	"CelldFleet/degraded-ownership-conflict":          "OwnershipConflict",
	"CelldFleet/degraded-resize-rejected":             "DisksResized: ResizeRejected",
	"CelldFleet/degraded-route-rejected":              "RoutingReady: RouteRejected",
	"CelldFleet/degraded-step-failed":                 "StepFailed",
	"CelldFleet/healthy":                              "MembersReady",
	"CelldFleet/healthy-meshed":                       "MembersReady",
	"CelldFleet/progressing-applying-template":        "ApplyingTemplate",
	"CelldFleet/progressing-awaiting-gateway":         "RoutingReady: AwaitingGateway",
	"CelldFleet/progressing-creating":                 "CreatingMembers",
	"CelldFleet/progressing-generation":               "observe generation 3",
	"CelldFleet/progressing-joining-mesh":             "ProxyMissing",
	"CelldFleet/progressing-rolling":                  "Rolling",
	"CelldFleet/suspended-maintenance-paused":         "MaintenancePaused",
	"CelldFleet/suspended-roll-paused":                "RollPaused",
	"ServiceMesh/degraded-ambient-networkpolicy":      "AmbientNetworkPolicy: NetworkPolicyBlocksAmbient",
	"ServiceMesh/degraded-blocked":                    "MaistraDetected",
	"ServiceMesh/degraded-deferred":                   "AmbiguousControlPlane",
	"ServiceMesh/degraded-enrollment-conflict":        "EnrollmentConflict: PolicyConflict",
	"ServiceMesh/degraded-enrollment-failed":          "EnrollmentFailed: EnrollmentStepFailed",
	"ServiceMesh/degraded-error":                      "ReconcileError",
	"ServiceMesh/degraded-foreign-peerauthentication": "ForeignPeerAuthentication",
	"ServiceMesh/degraded-license-locked":             "LicenseExpired",
	"ServiceMesh/degraded-license-unreadable":         "LicenseUnreadable",
	"ServiceMesh/degraded-precondition":               "PreconditionNotMet",
	"ServiceMesh/healthy":                             "ControlPlaneReady",
	"ServiceMesh/healthy-maintenance-window":          "ControlPlaneReady",
	"ServiceMesh/healthy-namespace-opted-out":         "ControlPlaneReady",
	"ServiceMesh/progressing-awaiting-cutover":        "MTLSCutover: AwaitingCutover",
	"ServiceMesh/progressing-control-plane":           "IstioNotReady",
	"ServiceMesh/progressing-deleting":                "WaitingForSidecarRelease",
	"ServiceMesh/progressing-generation":              "observe generation 5",
	"ServiceMesh/progressing-installing-sail":         "SailOperatorInstalling",
	"ServiceMesh/progressing-migrating":               "DataPlaneMigration: Migrating",
}

// TestHealthOfOperatorStatus: each fixture's name says the health Argo CD
// must show (healthy-*, progressing-*, degraded-*, suspended-*), and its
// message names the deciding reason. Every kind has each of Healthy,
// Progressing and Degraded.
func TestHealthOfOperatorStatus(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range kinds {
		script := readScript(t, k.group, k.kind)
		files, err := filepath.Glob(filepath.Join(root, k.fixtures, "*.golden.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no fixtures in %s (run TestArgoCDHealthFixtures there with -update): %v", k.fixtures, err)
		}
		statuses := map[string]int{}
		for _, f := range files {
			name := strings.TrimSuffix(filepath.Base(f), ".golden.yaml")
			key := k.kind + "/" + name
			seen[key] = true
			t.Run(key, func(t *testing.T) {
				obj := readObject(t, f)
				if obj["kind"] != k.kind {
					t.Fatalf("%s holds a %v", f, obj["kind"])
				}
				want := strings.ToUpper(name[:1]) + name[1:strings.IndexAny(name+"-", "-")]
				status, message := health(t, script, obj)
				statuses[status]++
				if status != want {
					t.Errorf("health %s (%s), want %s", status, message, want)
				}
				if message == "" {
					t.Errorf("no message")
				}
				if sub, ok := messages[key]; !ok {
					t.Errorf("no expected message for %s in the messages table", key)
				} else if !strings.Contains(message, sub) {
					t.Errorf("message %q does not say %q", message, sub)
				}
			})
		}
		for _, s := range []string{"Healthy", "Progressing", "Degraded"} {
			if statuses[s] == 0 {
				t.Errorf("%s: no fixture is %s", k.kind, s)
			}
		}
	}
	for key := range messages {
		if !seen[key] {
			t.Errorf("the messages table names %s, which has no fixture", key)
		}
	}
}

// The contract's edge cases, on objects the operators have not touched.
func TestHealthBeforeTheOperatorLooks(t *testing.T) {
	for _, k := range kinds {
		script := readScript(t, k.group, k.kind)
		for name, obj := range map[string]map[string]any{
			"no status":     {"metadata": map[string]any{"name": "x", "generation": 1.0}},
			"no conditions": {"metadata": map[string]any{"name": "x", "generation": 1.0}, "status": map[string]any{}},
			// A condition of an older generation says nothing of this one.
			"stale conditions": {"metadata": map[string]any{"name": "x", "generation": 2.0}, "status": map[string]any{"observedGeneration": 2.0,
				"conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Old", "observedGeneration": 1.0}}}},
		} {
			t.Run(k.kind+"/"+name, func(t *testing.T) {
				status, message := health(t, script, obj)
				if status != "Progressing" || message == "" {
					t.Errorf("health %s (%s), want Progressing", status, message)
				}
				if !slices.Contains(argoStatuses, status) {
					t.Errorf("%q is not an Argo CD health status", status)
				}
			})
		}
	}
}

// argocd/argocd-cm.yaml carries both scripts as Argo CD reads them
// (resource.customizations.health.GROUP_KIND), and docs/gitops.md shows that
// file as it is; -update rewrites the file from the scripts.
func TestConfigMapCarriesTheScripts(t *testing.T) {
	var b strings.Builder
	b.WriteString(`# Argo CD health checks for CelldFleet and ServiceMesh. Merge into argocd-cm:
#   kubectl -n argocd patch configmap argocd-cm --patch-file argocd/argocd-cm.yaml
# or, with the argo-cd Helm chart, copy the data keys to configs.cm.
# Generated from argocd/resource_customizations/*/*/health.lua (e2e/argocd, -update).
apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-cm
  labels:
    app.kubernetes.io/name: argocd-cm
    app.kubernetes.io/part-of: argocd
data:
`)
	for _, k := range kinds {
		b.WriteString("  resource.customizations.health." + k.group + "_" + k.kind + ": |\n")
		for _, line := range strings.Split(strings.TrimSuffix(readScript(t, k.group, k.kind), "\n"), "\n") {
			if line == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line + "\n")
		}
	}
	want := b.String()
	path := filepath.Join(root, "argocd", "argocd-cm.yaml")
	if f := flagUpdate(); f {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not the scripts as they are: rerun with -update", path)
	}
	// Argo CD reads back exactly the scripts.
	var cm struct {
		APIVersion, Kind string
		Metadata         map[string]any
		Data             map[string]string
	}
	if err := yaml.UnmarshalStrict(got, &cm); err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if cm.Data["resource.customizations.health."+k.group+"_"+k.kind] != readScript(t, k.group, k.kind) {
			t.Errorf("the ConfigMap's %s_%s is not health.lua", k.group, k.kind)
		}
	}
	docs, err := os.ReadFile(filepath.Join(root, "docs", "gitops.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docs), "```yaml\n"+want+"```\n") {
		t.Errorf("docs/gitops.md does not show argocd/argocd-cm.yaml as it is")
	}
}

func flagUpdate() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// Every condition type and reason a script names is one the kind's API
// declares (conditions.go), so a renamed reason cannot leave a check
// silently matching nothing.
func TestScriptsNameDeclaredConditions(t *testing.T) {
	apis := map[string]string{"CelldFleet": "fleet-operator/api/v1alpha1/conditions.go", "ServiceMesh": "mesh-operator/api/v1alpha1/conditions.go"}
	declared := regexp.MustCompile(`Condition(?:Type|Reason)\s*=\s*"(\w+)"`)
	named := regexp.MustCompile(`"([A-Z]\w+)"|\b([A-Z]\w+) = true`)
	// Words of the contract, not of the API.
	contract := []string{"Healthy", "Progressing", "Degraded", "Suspended", "True", "False"}
	for _, k := range kinds {
		src, err := os.ReadFile(filepath.Join(root, apis[k.kind]))
		if err != nil {
			t.Fatal(err)
		}
		known := map[string]bool{}
		for _, m := range declared.FindAllStringSubmatch(string(src), -1) {
			known[m[1]] = true
		}
		if k.kind == "CelldFleet" {
			known["Degraded"] = true // status.phase
		}
		var unknown []string
		for _, m := range named.FindAllStringSubmatch(readScript(t, k.group, k.kind), -1) {
			w := m[1] + m[2]
			if !known[w] && !slices.Contains(contract, w) {
				unknown = append(unknown, w)
			}
		}
		if len(unknown) > 0 {
			t.Errorf("%s's health.lua names %q, which %s does not declare", k.kind, unknown, apis[k.kind])
		}
	}
}
