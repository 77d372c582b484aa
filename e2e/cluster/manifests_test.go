package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadManifestsReadsDirectoriesAndMultiDocFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	write("b.yaml", `# leading comment only
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.dev
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: demo
`)
	write("a.yml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n")
	write("kustomization.yaml", "resources: [b.yaml]\n")
	write("notes.txt", "not a manifest")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "nested"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nested", "c.yaml"), []byte("kind: Secret\n"), 0o644))

	objs, err := LoadManifests(dir)
	require.NoError(t, err)
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	require.Equal(t, []string{"Namespace/demo", "CustomResourceDefinition/widgets.example.dev", "ConfigMap/settings"}, got,
		"sorted files, documents in order, no kustomization, no other extensions, no recursion")
}

func TestLoadManifestsRejectsBrokenYAML(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(file, []byte("kind: [unclosed\n"), 0o644))
	_, err := LoadManifests(file)
	require.ErrorContains(t, err, "bad.yaml")
}

func TestLoadManifestsMissingPath(t *testing.T) {
	_, err := LoadManifests(filepath.Join(t.TempDir(), "absent"))
	require.Error(t, err)
}

// The default CRD locations must exist in the module cache at the pinned
// versions and hold the CRDs the operators build objects for.
func TestDefaultCRDPathsHoldGatewayAndIstioCRDs(t *testing.T) {
	paths, err := DefaultCRDPaths(t.Context())
	require.NoError(t, err)
	objs, err := LoadManifests(paths...)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			names[o.GetName()] = true
		}
	}
	for _, want := range []string{
		"gateways.gateway.networking.k8s.io",
		"httproutes.gateway.networking.k8s.io",
		"referencegrants.gateway.networking.k8s.io",
		"virtualservices.networking.istio.io",
		"destinationrules.networking.istio.io",
		"authorizationpolicies.security.istio.io",
		"peerauthentications.security.istio.io",
	} {
		require.True(t, names[want], "missing CRD %s", want)
	}
}
