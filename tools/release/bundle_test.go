package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const repoRoot = "../.."

// testBundles writes both bundles from the repository into a temporary
// release directory (bin/helm renders the charts: make tools builds it).
func testBundles(t *testing.T) (*release, string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(repoRoot, "bin", "helm")); err != nil {
		t.Fatalf("bin/helm: %v (make tools)", err)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	r := &release{Root: root, Out: out, Version: "0.1.0", Source: "https://github.com/ericdev/fleetmesh", Registry: "ghcr.io/ericdev", Log: io.Discard, created: testCreated}
	for _, op := range operators {
		if err := r.writeBundle(op, filepath.Join(out, "bundle", op)); err != nil {
			t.Fatalf("bundle %s: %v", op, err)
		}
	}
	return r, out
}

// TestBundlesValidate runs the operator framework's own bundle validators
// (what `operator-sdk bundle validate` runs by default: CSV, CRDs, bundle)
// on each generated bundle.
func TestBundlesValidate(t *testing.T) {
	_, out := testBundles(t)
	for _, op := range operators {
		t.Run(op, func(t *testing.T) {
			b, err := manifests.GetBundleFromDir(filepath.Join(out, "bundle", op, "manifests"))
			if err != nil {
				t.Fatal(err)
			}
			if b.CSV == nil || b.CSV.Name != op+".v0.1.0" {
				t.Fatalf("bundle CSV %v", b.CSV)
			}
			for _, res := range validation.DefaultBundleValidators.Validate(b.ObjectsToValidate()...) {
				for _, e := range res.Errors {
					t.Errorf("%s: %v", res.Name, e)
				}
				for _, w := range res.Warnings {
					t.Logf("warning %s: %v", res.Name, w)
				}
			}
			// The metadata OLM reads the package and channel from.
			raw, err := os.ReadFile(filepath.Join(out, "bundle", op, "metadata", "annotations.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var ann struct{ Annotations map[string]string }
			if err := yaml.UnmarshalStrict(raw, &ann); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ann.Annotations, bundleAnnotations(op)) || ann.Annotations["operators.operatorframework.io.bundle.package.v1"] != op {
				t.Errorf("annotations.yaml: %v", ann.Annotations)
			}
		})
	}
}

// TestBundleMatchesChart: the CSV owns exactly the bundle's CRDs (which are
// controller-gen's), runs the chart's Deployment, and grants the chart's
// rules, which hold every rule controller-gen generated from the markers.
func TestBundleMatchesChart(t *testing.T) {
	r, out := testBundles(t)
	for _, op := range operators {
		t.Run(op, func(t *testing.T) {
			dir := filepath.Join(out, "bundle", op, "manifests")
			var csv operatorsv1alpha1.ClusterServiceVersion
			raw, err := os.ReadFile(filepath.Join(dir, op+".clusterserviceversion.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict(raw, &csv); err != nil {
				t.Fatal(err)
			}
			// Required fields.
			s := csv.Spec
			if s.DisplayName == "" || s.Description == "" || s.Version.String() != "0.1.0" || s.Provider.Name == "" ||
				s.MinKubeVersion == "" || csv.Annotations["containerImage"] != "ghcr.io/ericdev/"+op+":0.1.0" || csv.Annotations["alm-examples"] == "" {
				t.Errorf("CSV lacks a required field: %+v %v", s, csv.Annotations)
			}
			if !slicesEqualFn(s.InstallModes, func(m operatorsv1alpha1.InstallMode) bool {
				return m.Supported == (m.Type == operatorsv1alpha1.InstallModeTypeAllNamespaces)
			}) || len(s.InstallModes) != 4 {
				t.Errorf("install modes %v: AllNamespaces only", s.InstallModes)
			}

			// Owned CRDs = the CRD files in the bundle = config/crd/bases.
			crds, paths, err := readCRDs(r.Root, op)
			if err != nil {
				t.Fatal(err)
			}
			var owned, inBundle, generated []string
			for _, o := range s.CustomResourceDefinitions.Owned {
				owned = append(owned, o.Name+"/"+o.Version+"/"+o.Kind)
				if o.Description == "" {
					t.Errorf("owned %s has no description", o.Name)
				}
			}
			bundle, err := manifests.GetBundleFromDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range bundle.V1CRDs {
				for _, v := range c.Spec.Versions {
					inBundle = append(inBundle, c.Name+"/"+v.Name+"/"+c.Spec.Names.Kind)
				}
			}
			for i, c := range crds {
				for _, v := range c.Spec.Versions {
					generated = append(generated, c.Name+"/"+v.Name+"/"+c.Spec.Names.Kind)
				}
				b, _ := os.ReadFile(paths[i])
				copyB, err := os.ReadFile(filepath.Join(dir, c.Spec.Group+"_"+c.Spec.Names.Plural+".yaml"))
				if err != nil || string(b) != string(copyB) {
					t.Errorf("%s is not copied as generated: %v", paths[i], err)
				}
			}
			sort.Strings(owned)
			sort.Strings(inBundle)
			sort.Strings(generated)
			if !reflect.DeepEqual(owned, inBundle) || !reflect.DeepEqual(owned, generated) {
				t.Errorf("owned %v, in the bundle %v, generated %v", owned, inBundle, generated)
			}

			// The install strategy's Deployment is the chart's.
			objs, err := r.renderChart(op)
			if err != nil {
				t.Fatal(err)
			}
			var chartDep *appsv1.Deployment
			for _, o := range objs {
				if o.GetKind() == "Deployment" {
					if chartDep, err = convert[appsv1.Deployment](o); err != nil {
						t.Fatal(err)
					}
				}
			}
			deps := s.InstallStrategy.StrategySpec.DeploymentSpecs
			if len(deps) != 1 || chartDep == nil {
				t.Fatalf("%d deployments in the CSV", len(deps))
			}
			if deps[0].Name != chartDep.Name || !reflect.DeepEqual(deps[0].Spec.Template.Spec, chartDep.Spec.Template.Spec) ||
				!reflect.DeepEqual(deps[0].Spec.Selector, chartDep.Spec.Selector) {
				t.Errorf("the CSV's Deployment differs from the chart's")
			}
			c0 := deps[0].Spec.Template.Spec.Containers[0]
			if c0.Image != "ghcr.io/ericdev/"+op+":0.1.0" {
				t.Errorf("image %s", c0.Image)
			}

			// Every generated rule is granted.
			var granted []rbacv1.PolicyRule
			for _, p := range s.InstallStrategy.StrategySpec.ClusterPermissions {
				if p.ServiceAccountName != deps[0].Spec.Template.Spec.ServiceAccountName {
					t.Errorf("clusterPermissions for %s, the Deployment runs as %s", p.ServiceAccountName, deps[0].Spec.Template.Spec.ServiceAccountName)
				}
				granted = append(granted, p.Rules...)
			}
			roleRaw, err := os.ReadFile(filepath.Join(r.Root, op, "config", "rbac", "role.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			gen, err := decodeObjects(roleRaw)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range gen {
				if o.GetKind() != "ClusterRole" {
					continue
				}
				cr, err := convert[rbacv1.ClusterRole](o)
				if err != nil {
					t.Fatal(err)
				}
				for _, rule := range cr.Rules {
					if !covered(rule, granted) {
						t.Errorf("generated rule %v is not in the CSV's clusterPermissions", rule)
					}
				}
			}
		})
	}
}

func slicesEqualFn[T any](s []T, ok func(T) bool) bool {
	for _, v := range s {
		if !ok(v) {
			return false
		}
	}
	return true
}

// covered: every (group, resource, name, verb) of rule is granted by some rule.
func covered(rule rbacv1.PolicyRule, granted []rbacv1.PolicyRule) bool {
	has := func(list []string, v string) bool {
		for _, x := range list {
			if x == v || x == "*" {
				return true
			}
		}
		return false
	}
	names := rule.ResourceNames
	if len(names) == 0 {
		names = []string{""}
	}
	for _, g := range rule.APIGroups {
		for _, res := range rule.Resources {
			for _, n := range names {
				for _, v := range rule.Verbs {
					found := false
					for _, gr := range granted {
						if has(gr.APIGroups, g) && has(gr.Resources, res) && has(gr.Verbs, v) &&
							(len(gr.ResourceNames) == 0 || (n != "" && has(gr.ResourceNames, n))) {
							found = true
							break
						}
					}
					if !found {
						return false
					}
				}
			}
		}
	}
	return true
}

// TestRepositoryCarriesRelease: the dry run refuses a version the charts
// and CHANGELOG.md have not cut.
func TestRepositoryCarriesRelease(t *testing.T) {
	v, err := chartVersions(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkRepoCarries(repoRoot, v); err != nil {
		t.Errorf("the repository's own release %s: %v", v, err)
	}
	err = checkRepoCarries(repoRoot, "9.9.9")
	if err == nil || !strings.Contains(err.Error(), `"## fleet-operator 9.9.9"`) || !strings.Contains(err.Error(), "charts/mesh-operator/Chart.yaml") {
		t.Errorf("an uncut version passes: %v", err)
	}
}

// TestBundleValidatorsCatchABrokenBundle: the validators above are not
// vacuous: a bundle whose CSV owns a CRD it does not ship fails them.
func TestBundleValidatorsCatchABrokenBundle(t *testing.T) {
	_, out := testBundles(t)
	dir := filepath.Join(out, "bundle", "fleet-operator", "manifests")
	if err := os.Remove(filepath.Join(dir, "celld.eric.dev_celldfleets.yaml")); err != nil {
		t.Fatal(err)
	}
	b, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	for _, res := range validation.DefaultBundleValidators.Validate(b.ObjectsToValidate()...) {
		for _, e := range res.Errors {
			errs = append(errs, e.Error())
		}
	}
	if !strings.Contains(strings.Join(errs, "\n"), `owned CRD "celld.eric.dev/v1alpha1, Kind=CelldFleet" not found`) {
		t.Errorf("a CSV owning a CRD the bundle lacks passes: %v", errs)
	}
}

// TestArtifactHubAnnotations: each chart's Artifact Hub annotations parse,
// name the image of the chart's appVersion for the release's platforms, and
// list exactly the operator's CRDs.
func TestArtifactHubAnnotations(t *testing.T) {
	for _, op := range operators {
		t.Run(op, func(t *testing.T) {
			m, err := readChart(repoRoot, op)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"artifacthub.io/license", "artifacthub.io/operator", "artifacthub.io/operatorCapabilities",
				"artifacthub.io/images", "artifacthub.io/crds", "artifacthub.io/crdsExamples", "artifacthub.io/links", "artifacthub.io/changes"} {
				if m.Annotations[k] == "" {
					t.Errorf("annotation %s missing", k)
				}
			}
			var imgs []struct {
				Name, Image string
				Platforms   []string
			}
			if err := yaml.UnmarshalStrict([]byte(m.Annotations["artifacthub.io/images"]), &imgs); err != nil {
				t.Fatal(err)
			}
			if len(imgs) != 1 || imgs[0].Image != "ghcr.io/ericdev/"+op+":"+m.AppVersion ||
				strings.Join(imgs[0].Platforms, ",") != "linux/amd64,linux/arm64" {
				t.Errorf("artifacthub.io/images %+v: want ghcr.io/ericdev/%s:%s for linux/amd64,linux/arm64", imgs, op, m.AppVersion)
			}
			var listed []struct{ Kind, Version, Name, DisplayName, Description string }
			if err := yaml.UnmarshalStrict([]byte(m.Annotations["artifacthub.io/crds"]), &listed); err != nil {
				t.Fatal(err)
			}
			crds, _, err := readCRDs(repoRoot, op)
			if err != nil {
				t.Fatal(err)
			}
			var want, got []string
			for _, c := range crds {
				for _, v := range c.Spec.Versions {
					want = append(want, c.Spec.Names.Kind+"/"+v.Name+"/"+c.Name)
				}
			}
			for _, l := range listed {
				got = append(got, l.Kind+"/"+l.Version+"/"+l.Name)
				if l.Description == "" {
					t.Errorf("%s has no description", l.Name)
				}
			}
			sort.Strings(want)
			sort.Strings(got)
			if !reflect.DeepEqual(want, got) {
				t.Errorf("artifacthub.io/crds lists %v, the operator's CRDs are %v", got, want)
			}
			var examples []map[string]any
			if err := yaml.Unmarshal([]byte(m.Annotations["artifacthub.io/crdsExamples"]), &examples); err != nil || len(examples) == 0 {
				t.Errorf("artifacthub.io/crdsExamples: %v", err)
			}
		})
	}
}

// TestEveryCRDFieldHasADescription: every field of both CRDs is described
// (the Go doc comments of the API types, by controller-gen), so that
// `kubectl explain`, the CSV and the API reference say what it is.
func TestEveryCRDFieldHasADescription(t *testing.T) {
	for _, op := range operators {
		crds, _, err := readCRDs(repoRoot, op)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range crds {
			for _, v := range c.Spec.Versions {
				var walk func(s apiextensionsv1.JSONSchemaProps, path string)
				walk = func(s apiextensionsv1.JSONSchemaProps, path string) {
					// metadata is the standard ObjectMeta, described by Kubernetes.
					if path != "" && path != ".metadata" && s.Description == "" {
						t.Errorf("%s %s: field %s has no description: add a doc comment to its Go field and run make manifests", c.Name, v.Name, path)
					}
					for name, p := range s.Properties {
						walk(p, path+"."+name)
					}
					if s.Items != nil && s.Items.Schema != nil && len(s.Items.Schema.Properties) > 0 {
						for name, p := range s.Items.Schema.Properties {
							walk(p, path+"[]."+name)
						}
					}
				}
				walk(*v.Schema.OpenAPIV3Schema, "")
			}
		}
	}
}

// TestDockerfileBasesPinnedByDigest: every FROM of a Dockerfile that stays
// (the operators' and the stand-in's, built by the release and kind
// workflows) names its base by digest, not by a tag that can move.
func TestDockerfileBasesPinnedByDigest(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(repoRoot, "*", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join(repoRoot, "e2e", "cmd", "*", "Dockerfile"))
	paths = append(paths, more...)
	if len(paths) < 3 {
		t.Fatalf("found %v", paths)
	}
	from := regexp.MustCompile(`(?m)^FROM\s+(?:--platform=\S+\s+)?(\S+)`)
	pinned := regexp.MustCompile(`^[^@\s]+:[^@\s]+@sha256:[0-9a-f]{64}$`)
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range from.FindAllStringSubmatch(string(b), -1) {
			if !pinned.MatchString(m[1]) {
				t.Errorf("%s: FROM %s is not pinned by digest (IMAGE:TAG@sha256:...)", p, m[1])
			}
		}
	}
}
