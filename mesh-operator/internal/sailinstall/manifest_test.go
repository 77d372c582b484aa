package sailinstall

import (
	"reflect"
	"testing"
)

// TestTemplateCRDs: the CRDs among a release's template objects, which an
// uninstall would delete (crds/ are not in the manifest).
func TestTemplateCRDs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		manifest string
		want     []string
	}{
		{"empty", "", nil},
		{"no CRD", "---\n# Source: sail-operator/templates/deployment.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sail-operator\n", nil},
		{"CRDs among the templates, sorted", "---\n# Source: x/templates/b.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: ztunnels.sailoperator.io\n" +
			"---\n# Source: x/templates/d.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sail-operator\n" +
			"---\n# Source: x/templates/a.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: istios.sailoperator.io\n",
			[]string{"istios.sailoperator.io", "ztunnels.sailoperator.io"}},
		{"an unreadable document counts", "---\nkind: [unclosed\n", []string{"(unparsable manifest document)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := templateCRDs(tc.manifest); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("templateCRDs = %q, want %q", got, tc.want)
			}
		})
	}
}
