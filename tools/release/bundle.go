package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/api/pkg/lib/version"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// bundleChannel is the OLM channel both bundles are published to while the
// APIs are v1alpha1.
const bundleChannel = "alpha"

// operatorInfo is what a CSV says about an operator beyond its chart.
type operatorInfo struct {
	DisplayName, Namespace, Sample string
	Description                    string
	Keywords                       []string
}

var operatorInfos = map[string]operatorInfo{
	"fleet-operator": {
		DisplayName: "celld Fleet Operator", Namespace: "fleet-system",
		Sample:   "fleet-operator/config/samples/celldfleet.yaml",
		Keywords: []string{"celld", "statefulset", "networkpolicy", "istio"},
		Description: "Runs fleets of the celld runtime: one CelldFleet becomes a StatefulSet with its disks, " +
			"Services, NetworkPolicies, PodDisruptionBudget, Istio integration and routing. " +
			"Documentation: https://github.com/ericdev/fleetmesh/blob/main/docs/fleet.md",
	},
	"mesh-operator": {
		DisplayName: "Navique Service Mesh Operator (licensed preview)", Namespace: "mesh-system",
		Sample:   "mesh-operator/config/samples/servicemesh.yaml",
		Keywords: []string{"istio", "mtls", "sail", "service-mesh"},
		Description: "Brings mTLS and tenant isolation with Istio through one cluster-singleton ServiceMesh, " +
			"installing Istio via the Sail Operator or adopting an existing mesh. Needs a license Secret " +
			"(mesh-operator-license in the operator's namespace: docs/licensing.md). " +
			"Documentation: https://github.com/ericdev/fleetmesh/blob/main/docs/servicemesh.md",
	},
}

// renderChart renders the operator's chart as the release installs it
// (image tag = the release version) and returns its objects.
func (r *release) renderChart(op string) ([]*unstructured.Unstructured, error) {
	info := operatorInfos[op]
	cmd := exec.Command(filepath.Join(r.Root, "bin", "helm"), "template", op, filepath.Join(r.Root, "charts", op),
		"--namespace", info.Namespace, "--set", "image.tag="+r.Version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %v: %s", op, err, stderr.String())
	}
	return decodeObjects(out)
}

func decodeObjects(b []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := d.Decode(&m); err == io.EOF {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

func convert[T any](o *unstructured.Unstructured) (*T, error) {
	out := new(T)
	return out, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out)
}

// helmOnlyLabels are the labels Helm's release tracking adds; OLM owns the
// objects in a bundle.
var helmOnlyLabels = []string{"app.kubernetes.io/managed-by", "helm.sh/chart"}

// buildCSV makes the ClusterServiceVersion from the chart's rendering: its
// Deployment is the install strategy's, the ClusterRoles bound to the
// operator's ServiceAccount are its clusterPermissions, the Roles bound to
// it in the install namespace its permissions; the CRDs under
// OPERATOR/config/crd/bases are owned.
func (r *release) buildCSV(op string, objs []*unstructured.Unstructured, crds []*apiextensionsv1.CustomResourceDefinition) (*operatorsv1alpha1.ClusterServiceVersion, error) {
	info := operatorInfos[op]
	var deps []operatorsv1alpha1.StrategyDeploymentSpec
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	roles := map[string][]rbacv1.PolicyRule{}
	var crbs []*rbacv1.ClusterRoleBinding
	var rbs []*rbacv1.RoleBinding
	var image string
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			d, err := convert[appsv1.Deployment](o)
			if err != nil {
				return nil, err
			}
			for _, l := range helmOnlyLabels {
				delete(d.Spec.Template.Labels, l)
			}
			image = d.Spec.Template.Spec.Containers[0].Image
			deps = append(deps, operatorsv1alpha1.StrategyDeploymentSpec{Name: d.Name, Spec: d.Spec, Label: withoutHelm(d.Labels)})
		case "ClusterRole":
			cr, err := convert[rbacv1.ClusterRole](o)
			if err != nil {
				return nil, err
			}
			clusterRoles[cr.Name] = cr.Rules
		case "Role":
			if o.GetNamespace() != info.Namespace {
				return nil, fmt.Errorf("the chart renders Role %s/%s outside the install namespace: a bundle cannot carry it", o.GetNamespace(), o.GetName())
			}
			role, err := convert[rbacv1.Role](o)
			if err != nil {
				return nil, err
			}
			roles[role.Name] = role.Rules
		case "ClusterRoleBinding":
			b, err := convert[rbacv1.ClusterRoleBinding](o)
			if err != nil {
				return nil, err
			}
			crbs = append(crbs, b)
		case "RoleBinding":
			b, err := convert[rbacv1.RoleBinding](o)
			if err != nil {
				return nil, err
			}
			rbs = append(rbs, b)
		}
	}
	if len(deps) != 1 {
		return nil, fmt.Errorf("the chart renders %d Deployments, want 1", len(deps))
	}
	sa := deps[0].Spec.Template.Spec.ServiceAccountName
	boundTo := func(subjects []rbacv1.Subject) bool {
		for _, s := range subjects {
			if s.Kind == "ServiceAccount" && s.Name == sa && s.Namespace == info.Namespace {
				return true
			}
		}
		return false
	}
	var clusterPerms, perms []operatorsv1alpha1.StrategyDeploymentPermissions
	for _, b := range crbs {
		if !boundTo(b.Subjects) {
			continue
		}
		rules, ok := clusterRoles[b.RoleRef.Name]
		if !ok {
			return nil, fmt.Errorf("ClusterRoleBinding %s binds ClusterRole %s the chart does not render", b.Name, b.RoleRef.Name)
		}
		clusterPerms = append(clusterPerms, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: rules})
	}
	for _, b := range rbs {
		if !boundTo(b.Subjects) {
			continue
		}
		var rules []rbacv1.PolicyRule
		var ok bool
		if b.RoleRef.Kind == "ClusterRole" {
			rules, ok = clusterRoles[b.RoleRef.Name]
		} else {
			rules, ok = roles[b.RoleRef.Name]
		}
		if !ok {
			return nil, fmt.Errorf("RoleBinding %s binds %s %s the chart does not render", b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		perms = append(perms, operatorsv1alpha1.StrategyDeploymentPermissions{ServiceAccountName: sa, Rules: rules})
	}

	var owned []operatorsv1alpha1.CRDDescription
	var examples []json.RawMessage
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			desc := ""
			if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				desc = v.Schema.OpenAPIV3Schema.Description
			}
			owned = append(owned, operatorsv1alpha1.CRDDescription{
				Name: crd.Name, Version: v.Name, Kind: crd.Spec.Names.Kind,
				DisplayName: crd.Spec.Names.Kind, Description: firstSentence(desc),
			})
		}
	}
	sample, err := os.ReadFile(filepath.Join(r.Root, info.Sample))
	if err != nil {
		return nil, err
	}
	sj, err := yaml.YAMLToJSON(sample)
	if err != nil {
		return nil, err
	}
	examples = append(examples, sj)
	almExamples, err := json.Marshal(examples)
	if err != nil {
		return nil, err
	}
	v, err := semver.Parse(r.Version)
	if err != nil {
		return nil, fmt.Errorf("version %q: %w", r.Version, err)
	}
	chart, err := readChart(r.Root, op)
	if err != nil {
		return nil, err
	}
	minKube := strings.TrimSuffix(strings.TrimPrefix(chart.KubeVersion, ">="), "-0")
	csv := &operatorsv1alpha1.ClusterServiceVersion{
		TypeMeta: metav1.TypeMeta{APIVersion: operatorsv1alpha1.SchemeGroupVersion.String(), Kind: operatorsv1alpha1.ClusterServiceVersionKind},
		ObjectMeta: metav1.ObjectMeta{
			Name: op + ".v" + r.Version,
			Annotations: map[string]string{
				"alm-examples":   string(almExamples),
				"capabilities":   "Basic Install",
				"categories":     "Networking",
				"containerImage": image,
				"createdAt":      r.created.Format("2006-01-02T15:04:05Z"),
				"repository":     r.Source,
				"description":    firstSentence(info.Description),
				// Only these namespaced install modes' Roles are expressible: the
				// operator gets its chart's ClusterRole(s).
				"operatorframework.io/suggested-namespace": info.Namespace,
			},
		},
		Spec: operatorsv1alpha1.ClusterServiceVersionSpec{
			DisplayName: info.DisplayName,
			Description: info.Description,
			Version:     version.OperatorVersion{Version: v},
			Maturity:    "alpha",
			Keywords:    info.Keywords,
			Provider:    operatorsv1alpha1.AppLink{Name: "fleetmesh", URL: r.Source},
			Links: []operatorsv1alpha1.AppLink{
				{Name: "Source", URL: r.Source},
				{Name: "Install", URL: r.Source + "/blob/main/docs/install.md"},
			},
			MinKubeVersion: minKube,
			// The operators watch every namespace with their chart's
			// ClusterRole: only AllNamespaces installs are supported.
			InstallModes: []operatorsv1alpha1.InstallMode{
				{Type: operatorsv1alpha1.InstallModeTypeOwnNamespace, Supported: false},
				{Type: operatorsv1alpha1.InstallModeTypeSingleNamespace, Supported: false},
				{Type: operatorsv1alpha1.InstallModeTypeMultiNamespace, Supported: false},
				{Type: operatorsv1alpha1.InstallModeTypeAllNamespaces, Supported: true},
			},
			InstallStrategy: operatorsv1alpha1.NamedInstallStrategy{
				StrategyName: operatorsv1alpha1.InstallStrategyNameDeployment,
				StrategySpec: operatorsv1alpha1.StrategyDetailsDeployment{
					DeploymentSpecs:    deps,
					ClusterPermissions: clusterPerms,
					Permissions:        perms,
				},
			},
			CustomResourceDefinitions: operatorsv1alpha1.CustomResourceDefinitions{Owned: owned},
		},
	}
	return csv, nil
}

func withoutHelm(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[k] = v
	}
	for _, k := range helmOnlyLabels {
		delete(out, k)
	}
	return out
}

func firstSentence(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

// readCRDs reads the controller-gen CRDs of an operator.
func readCRDs(root, op string) ([]*apiextensionsv1.CustomResourceDefinition, []string, error) {
	paths, err := filepath.Glob(filepath.Join(root, op, "config", "crd", "bases", "*.yaml"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(paths)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", p, err)
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, nil, fmt.Errorf("no CRDs under %s/config/crd/bases", op)
	}
	return crds, paths, nil
}

// bundleAnnotations are metadata/annotations.yaml's, also the bundle image's
// labels.
func bundleAnnotations(op string) map[string]string {
	return map[string]string{
		"operators.operatorframework.io.bundle.mediatype.v1":       "registry+v1",
		"operators.operatorframework.io.bundle.manifests.v1":       "manifests/",
		"operators.operatorframework.io.bundle.metadata.v1":        "metadata/",
		"operators.operatorframework.io.bundle.package.v1":         op,
		"operators.operatorframework.io.bundle.channels.v1":        bundleChannel,
		"operators.operatorframework.io.bundle.channel.default.v1": bundleChannel,
	}
}

// writeBundle writes the operator's registry+v1 bundle into dir:
// manifests/ (the CSV, the CRDs as generated, the chart's metrics Service)
// and metadata/annotations.yaml.
func (r *release) writeBundle(op, dir string) error {
	objs, err := r.renderChart(op)
	if err != nil {
		return err
	}
	crds, paths, err := readCRDs(r.Root, op)
	if err != nil {
		return err
	}
	csv, err := r.buildCSV(op, objs, crds)
	if err != nil {
		return err
	}
	write := func(rel string, v any) error {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		return r.writeFile(filepath.Join(mustRel(r.Out, dir), rel), b)
	}
	if err := write(filepath.Join("manifests", op+".clusterserviceversion.yaml"), csv); err != nil {
		return err
	}
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s_%s.yaml", crds[i].Spec.Group, crds[i].Spec.Names.Plural)
		if err := r.writeFile(filepath.Join(mustRel(r.Out, dir), "manifests", name), b); err != nil {
			return err
		}
	}
	for _, o := range objs {
		if o.GetKind() != "Service" {
			continue
		}
		s, err := convert[corev1.Service](o)
		if err != nil {
			return err
		}
		s.Namespace = ""
		s.Labels = withoutHelm(s.Labels)
		s.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
		if err := write(filepath.Join("manifests", s.Name+"_v1_service.yaml"), s); err != nil {
			return err
		}
	}
	return write(filepath.Join("metadata", "annotations.yaml"), map[string]any{"annotations": bundleAnnotations(op)})
}

func mustRel(base, target string) string {
	rel, err := filepath.Rel(base, target)
	if err != nil {
		panic(err)
	}
	return rel
}
