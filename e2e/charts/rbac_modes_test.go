package charts

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// sailInstallerRole is the generated ClusterRole holding what installing the
// Sail Operator takes (mesh-operator/config/rbac/sail-installer/role.yaml).
const sailInstallerRole = "sail-installer"

// generatedInstallerRules reads the installer rules controller-gen wrote from
// the markers of mesh-operator/internal/sailinstall.
func generatedInstallerRules(t testing.TB) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), meshChart, "config", "rbac", sailInstallerRole, "role.yaml"))
	require.NoError(t, err, "the Sail installer's rules are generated into their own file; run `make manifests`")
	var role rbacv1.ClusterRole
	require.NoError(t, yaml.UnmarshalStrict(b, &role))
	require.NotEmpty(t, role.Rules)
	return role.Rules
}

// installerOnly are rights that only installing (and uninstalling) the Sail
// Operator needs; the operator's own ClusterRole must hold none of them.
var installerOnly = []struct{ group, resource, verb string }{
	{rbacv1.GroupName, "clusterroles", "escalate"},
	{rbacv1.GroupName, "clusterroles", "bind"},
	{rbacv1.GroupName, "clusterroles", "create"},
	{rbacv1.GroupName, "clusterrolebindings", "create"},
	{"apiextensions.k8s.io", "customresourcedefinitions", "create"},
	{"apiextensions.k8s.io", "customresourcedefinitions", "delete"},
	{"", "configmaps", "list"},
	{"", "configmaps", "create"},
	{"", "configmaps", "update"},
	{"", "configmaps", "delete"},
	{"apps", "deployments", "create"},
	{"", "serviceaccounts", "create"},
	{"networking.k8s.io", "networkpolicies", "create"},
}

// grants reports whether any rule grants verb on group/resource, with or
// without resourceNames.
func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if containsAny(r.APIGroups, group, "*") && containsAny(r.Resources, resource, "*") && containsAny(r.Verbs, verb, "*") {
			return true
		}
	}
	return false
}

// TestMeshSailInstallerRBAC: the Sail installer's rules are rendered, in a
// ClusterRole of their own, only with sail.install=true; rbac.create=false
// renders no RBAC at all.
func TestMeshSailInstallerRBAC(t *testing.T) {
	const ns, name = "mesh-system", "mesh-operator"
	installer := name + "-" + sailInstallerRole
	core := generatedRules(t, meshChart)
	for _, rule := range installerOnly {
		assert.False(t, grants(core, rule.group, rule.resource, rule.verb),
			"mesh-operator/config/rbac/role.yaml grants %s on %s/%s, which only the Sail installer needs", rule.verb, rule.group, rule.resource)
	}
	installerRules := generatedInstallerRules(t)
	for _, rule := range installerOnly {
		assert.True(t, grants(installerRules, rule.group, rule.resource, rule.verb), "the installer needs %s on %s/%s", rule.verb, rule.group, rule.resource)
	}

	t.Run("sail.install=true (default)", func(t *testing.T) {
		m := render(t, meshRelease, nil)
		assert.Equal(t, core, typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", name).Rules)
		assert.Equal(t, installerRules, typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", installer).Rules)
		crb := typed[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", installer)
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: installer}, crb.RoleRef)
		assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}, crb.Subjects)
		assertFlags(t, operatorContainer(t, deployment(t, m, ns, name)).Args, map[string]string{"sail-install": "true"})
	})
	t.Run("sail.install=false", func(t *testing.T) {
		m := render(t, meshRelease, values{"sail": values{"install": false}})
		assert.Nil(t, m.find("ClusterRole", "", installer), "no installer rules without sail.install")
		assert.Nil(t, m.find("ClusterRoleBinding", "", installer))
		assert.Len(t, m.all("ClusterRole"), 1, m.String())
		assert.Equal(t, core, typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", name).Rules)
		for role, rules := range roles(t, m) {
			for _, rule := range installerOnly {
				assert.False(t, grants(rules, rule.group, rule.resource, rule.verb), "%s grants %s on %s/%s", role, rule.verb, rule.group, rule.resource)
			}
		}
		assertFlags(t, operatorContainer(t, deployment(t, m, ns, name)).Args, map[string]string{"sail-install": "false"})
	})
	t.Run("rbac.create=false", func(t *testing.T) {
		for _, install := range []bool{true, false} {
			m := render(t, meshRelease, values{"rbac": values{"create": false}, "sail": values{"install": install}})
			for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
				assert.Empty(t, m.all(kind), "rbac.create=false renders no %s", kind)
			}
			assert.NotNil(t, m.find("ServiceAccount", ns, name), "the ServiceAccount is serviceAccount.create's")
		}
		m := render(t, fleetRelease, values{"rbac": values{"create": false}})
		for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
			assert.Empty(t, m.all(kind), "fleet chart: rbac.create=false renders no %s", kind)
		}
	})
}

// TestMeshSailValues: sail.values reach the operator as --sail-values, the
// JSON object it passes to the Sail chart's install; without them the
// flag is absent.
func TestMeshSailValues(t *testing.T) {
	const ns, name = "mesh-system", "mesh-operator"
	args := operatorContainer(t, deployment(t, render(t, meshRelease, nil), ns, name)).Args
	_, set := flagValue(args, "sail-values")
	assert.False(t, set, "no --sail-values by default")

	v := values{"image": "mirror.example:5000/sail-operator:1.30.0", "operator": values{"resources": values{"requests": values{"cpu": "20m"}}}}
	args = operatorContainer(t, deployment(t, render(t, meshRelease, values{"sail": values{"values": v}}), ns, name)).Args
	got, ok := flagValue(args, "sail-values")
	require.True(t, ok, "--sail-values set once in %q", args)
	var parsed map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &parsed))
	assert.Equal(t, map[string]any{"image": "mirror.example:5000/sail-operator:1.30.0",
		"operator": map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "20m"}}}}, parsed)

	_, err := templateYAML(t, meshRelease, values{"sail": values{"values": "image: x"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at '/sail/values'")
}

// TestMeshSailChartSource: an OCI registry as the Sail chart repository, and
// its credentials from a Secret through the kubelet (environment), so the
// operator's RBAC still names only the license Secret.
func TestMeshSailChartSource(t *testing.T) {
	const ns, name = "mesh-system", "mesh-operator"
	m := render(t, meshRelease, values{"sail": values{"chart": values{"repository": "oci://registry.example:5000/charts", "credentialsSecret": "sail-mirror"}}})
	c := operatorContainer(t, deployment(t, m, ns, name))
	assertFlags(t, c.Args, map[string]string{"sail-chart-repository": "oci://registry.example:5000/charts"})
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	assert.Equal(t, map[string]string{"SAIL_CHART_USERNAME": "sail-mirror/username", "SAIL_CHART_PASSWORD": "sail-mirror/password"}, env)
	assertLicenseAccess(t, m, ns, name, "mesh-operator-license")

	c = operatorContainer(t, deployment(t, render(t, meshRelease, nil), ns, name))
	for _, e := range c.Env {
		assert.True(t, e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil, "no credentials by default: %s", e.Name)
	}
	_, err := templateYAML(t, meshRelease, values{"sail": values{"chart": values{"repository": "ftp://registry.example/charts"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at '/sail/chart/repository'")
}

// TestMeshSailChartCA: sail.chart.caConfigMap mounts the ConfigMap's ca.crt
// read-only and passes it as --sail-chart-ca-file.
func TestMeshSailChartCA(t *testing.T) {
	const ns, name = "mesh-system", "mesh-operator"
	d := deployment(t, render(t, meshRelease, nil), ns, name)
	assert.Equal(t, []string{"tmp"}, volumeNames(d), "only the download directory")
	_, set := flagValue(operatorContainer(t, d).Args, "sail-chart-ca-file")
	assert.False(t, set)

	d = deployment(t, render(t, meshRelease, values{"sail": values{"chart": values{"caConfigMap": "mirror-ca"}}}), ns, name)
	c := operatorContainer(t, d)
	file, ok := flagValue(c.Args, "sail-chart-ca-file")
	require.True(t, ok)
	require.Len(t, c.VolumeMounts, 2)
	assert.True(t, c.VolumeMounts[1].ReadOnly)
	assert.Equal(t, c.VolumeMounts[1].MountPath+"/ca.crt", file)
	require.Len(t, d.Spec.Template.Spec.Volumes, 2)
	v := d.Spec.Template.Spec.Volumes[1]
	assert.Equal(t, c.VolumeMounts[1].Name, v.Name)
	require.NotNil(t, v.ConfigMap)
	assert.Equal(t, "mirror-ca", v.ConfigMap.Name)
	require.Len(t, v.ConfigMap.Items, 1)
	assert.Equal(t, "ca.crt", v.ConfigMap.Items[0].Key)
	assert.Equal(t, "ca.crt", v.ConfigMap.Items[0].Path)
}

// TestMeshSailChartKeyring: sail.chart.keyringConfigMap mounts keyring.gpg
// read-only and passes it as --sail-chart-keyring, next to the CA bundle.
func TestMeshSailChartKeyring(t *testing.T) {
	const ns, name = "mesh-system", "mesh-operator"
	d := deployment(t, render(t, meshRelease, values{"sail": values{"chart": values{"caConfigMap": "mirror-ca", "keyringConfigMap": "sail-keys"}}}), ns, name)
	c := operatorContainer(t, d)
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if m.Name == "tmp" {
			continue
		}
		assert.True(t, m.ReadOnly, m.Name)
		mounts[m.Name] = m.MountPath
	}
	sources := map[string]string{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "tmp" {
			continue
		}
		require.NotNil(t, v.ConfigMap, v.Name)
		require.Len(t, v.ConfigMap.Items, 1)
		sources[v.Name] = v.ConfigMap.Name + "/" + v.ConfigMap.Items[0].Key
	}
	keyring, ok := flagValue(c.Args, "sail-chart-keyring")
	require.True(t, ok)
	ca, ok := flagValue(c.Args, "sail-chart-ca-file")
	require.True(t, ok)
	assert.Equal(t, mounts["sail-chart-keyring"]+"/keyring.gpg", keyring)
	assert.Equal(t, mounts["sail-chart-ca"]+"/ca.crt", ca)
	assert.Equal(t, map[string]string{"sail-chart-keyring": "sail-keys/keyring.gpg", "sail-chart-ca": "mirror-ca/ca.crt"}, sources)

	d = deployment(t, render(t, meshRelease, values{"sail": values{"chart": values{"keyringConfigMap": "sail-keys"}}}), ns, name)
	assert.Equal(t, []string{"tmp", "sail-chart-keyring"}, volumeNames(d))
	_, set := flagValue(operatorContainer(t, d).Args, "sail-chart-ca-file")
	assert.False(t, set)
}

func volumeNames(d *appsv1.Deployment) []string {
	var out []string
	for _, v := range d.Spec.Template.Spec.Volumes {
		out = append(out, v.Name)
	}
	return out
}

// TestMeshSailChartDownload: Helm's downloader works in /tmp, a writable
// emptyDir under the read-only root file system; the chart's digest is
// passed only when set (the operator ships the default version's).
func TestMeshSailChartDownload(t *testing.T) {
	const ns, name = "mesh-system", "mesh-operator"
	d := deployment(t, render(t, meshRelease, nil), ns, name)
	c := operatorContainer(t, d)
	require.NotEmpty(t, d.Spec.Template.Spec.Volumes)
	tmp := d.Spec.Template.Spec.Volumes[0]
	assert.Equal(t, "tmp", tmp.Name)
	require.NotNil(t, tmp.EmptyDir)
	require.NotEmpty(t, c.VolumeMounts)
	assert.Equal(t, "/tmp", c.VolumeMounts[0].MountPath)
	assert.False(t, c.VolumeMounts[0].ReadOnly)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for _, k := range []string{"TMPDIR", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"} {
		assert.True(t, strings.HasPrefix(env[k], "/tmp"), "%s=%s under the emptyDir", k, env[k])
	}
	_, set := flagValue(c.Args, "sail-chart-digest")
	assert.False(t, set, "the operator's own digest for its default version")

	digest := strings.Repeat("0f", 32)
	c = operatorContainer(t, deployment(t, render(t, meshRelease, values{"sail": values{"chart": values{"version": "1.31.0", "digest": digest}}}), ns, name))
	assertFlags(t, c.Args, map[string]string{"sail-chart-version": "1.31.0", "sail-chart-digest": digest})
	_, err := templateYAML(t, meshRelease, values{"sail": values{"chart": values{"digest": "not-a-digest"}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at '/sail/chart/digest'")
}
