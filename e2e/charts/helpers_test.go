package charts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// Chart names, which are also the operators' names.
const (
	fleetChart = "fleet-operator"
	meshChart  = "mesh-operator"
)

// repoRoot is the repository root (the directory holding go.work).
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// helmBin is bin/helm; its absence is a setup error (run `make tools`), not
// a reason to skip.
func helmBin(t testing.TB) string {
	t.Helper()
	dir, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.RequireBinaries(dir, "helm"); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "helm")
}

func chartDir(t testing.TB, chart string) string {
	return filepath.Join(repoRoot(t), "charts", chart)
}

// values is a Helm values document; tests write it to a file (-f) rather than
// using --set, so types are exactly what the test says.
type values map[string]any

// writeValues stores v as a values file and returns its path.
func writeValues(t testing.TB, v values) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runHelm runs bin/helm and returns stdout, and an error carrying stderr.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBin(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// release identifies one rendering of a chart.
type release struct {
	chart, name, namespace string
}

// templateYAML renders the chart with helm template and returns the YAML.
func templateYAML(t testing.TB, r release, v values, extra ...string) (string, error) {
	t.Helper()
	args := []string{"template", r.name, chartDir(t, r.chart), "--namespace", r.namespace}
	if v != nil {
		args = append(args, "--values", writeValues(t, v))
	}
	return runHelm(t, append(args, extra...)...)
}

// render renders the chart and decodes every object; a failure fails the test.
func render(t testing.TB, r release, v values, extra ...string) manifest {
	t.Helper()
	out, err := templateYAML(t, r, v, extra...)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatalf("decoding the rendered %s chart: %v\n%s", r.chart, err, out)
	}
	return m
}

// manifest is the list of rendered objects.
type manifest []*unstructured.Unstructured

func decodeManifest(s string) (manifest, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var m manifest
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("%w in document:\n%s", err, doc)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
			return nil, fmt.Errorf("object without kind or apiVersion:\n%s", doc)
		}
		m = append(m, obj)
	}
}

// all returns the objects of one kind.
func (m manifest) all(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// find returns the object of kind, namespace and name, or nil.
func (m manifest) find(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range m {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

// kinds lists "Kind namespace/name" of every object, for failure messages.
func (m manifest) String() string {
	var lines []string
	for _, o := range m {
		lines = append(lines, fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName()))
	}
	return strings.Join(lines, "\n")
}

// typed converts the object of kind/namespace/name into out, failing the
// test when it is missing.
func typed[T any](t testing.TB, m manifest, kind, namespace, name string) *T {
	t.Helper()
	o := m.find(kind, namespace, name)
	if o == nil {
		t.Fatalf("no %s %s/%s rendered; objects:\n%s", kind, namespace, name, m)
	}
	return convert[T](t, o)
}

func convert[T any](t testing.TB, o *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return out
}

func deployment(t testing.TB, m manifest, namespace, name string) *appsv1.Deployment {
	t.Helper()
	return typed[appsv1.Deployment](t, m, "Deployment", namespace, name)
}

func pdb(t testing.TB, m manifest, namespace, name string) *policyv1.PodDisruptionBudget {
	t.Helper()
	return typed[policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", namespace, name)
}

func service(t testing.TB, m manifest, namespace, name string) *corev1.Service {
	t.Helper()
	return typed[corev1.Service](t, m, "Service", namespace, name)
}

// roles returns every Role and ClusterRole with its rules.
func roles(t testing.TB, m manifest) map[string][]rbacv1.PolicyRule {
	t.Helper()
	out := map[string][]rbacv1.PolicyRule{}
	for _, o := range m {
		switch o.GetKind() {
		case "Role":
			out["Role "+o.GetNamespace()+"/"+o.GetName()] = convert[rbacv1.Role](t, o).Rules
		case "ClusterRole":
			out["ClusterRole "+o.GetName()] = convert[rbacv1.ClusterRole](t, o).Rules
		}
	}
	return out
}

// generatedRules reads the rules controller-gen wrote from the operator's
// kubebuilder:rbac markers (<operator>/config/rbac/role.yaml).
func generatedRules(t testing.TB, operator string) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), operator, "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 {
		t.Fatalf("%s/config/rbac/role.yaml has no rules", operator)
	}
	return role.Rules
}

// operatorContainer returns the Deployment's only container, "operator".
func operatorContainer(t testing.TB, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "operator" {
		t.Fatalf("want exactly one container named operator, got %d", len(cs))
	}
	return cs[0]
}

// flagValue returns the value of --name=value in args and whether it is set
// exactly once.
func flagValue(args []string, name string) (string, bool) {
	prefix := "--" + name + "="
	var found []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			found = append(found, v)
		}
		if a == "--"+name {
			found = append(found, "")
		}
	}
	if len(found) != 1 {
		return "", false
	}
	return found[0], true
}

// hasPort reports whether the container declares the named port.
func hasPort(c corev1.Container, name string, port int32) bool {
	return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == name && p.ContainerPort == port
	})
}
