package charts

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// valueSet is one named set of user values for a chart.
type valueSet struct {
	name   string
	values values
}

// Value sets every chart test renders; each one is also linted.
var (
	fleetValueSets = []valueSet{
		{"defaults", nil},
		{"fleetNamespaces", values{"fleetNamespaces": []string{"a", "b"}}},
		{"replicas=3", values{"replicas": 3}},
		{"sidecar inject", values{"podLabels": values{"sidecar.istio.io/inject": "true"}}},
		{"crds.install=false", values{"crds": values{"install": false}}},
		{"metrics disabled", values{"metrics": values{"enabled": false}}},
		{"monitoring", values{"metrics": values{"secure": true, "serviceMonitor": values{"enabled": true, "labels": values{"release": "prom"}, "interval": "1m"},
			"prometheusRule": values{"enabled": true, "labels": values{"release": "prom"}}}}},
		{"pod monitoring", values{"metrics": values{"secure": true, "podMonitor": values{"enabled": true, "labels": values{"release": "prom"}, "bearerTokenSecret": values{"name": "prom-token", "key": "token"}},
			"prometheusRule": values{"enabled": true}, "grafanaDashboard": values{"enabled": true, "annotations": values{"grafana_folder": "Operators"}}}}},
		{"everything else", values{
			"networkPolicyEnforced": true,
			"serviceAccount":        values{"create": false, "name": "fleet-sa"},
			"podAnnotations":        values{"prometheus.io/scrape": "true"},
			"state":                 values{"timeout": "1500ms", "interval": "1m30s"},
			"logLevel":              "debug",
			"image":                 values{"repository": "registry.example:5000/ops/fleet-operator", "tag": "v0.2.0", "pullPolicy": "Always"},
			"podDisruptionBudget":   values{"enabled": false},
			"crds":                  values{"keep": false},
			"imagePullSecrets":      []values{{"name": "regcred"}},
			"priorityClassName":     "system-cluster-critical",
			"nodeSelector":          values{"kubernetes.io/os": "linux"},
		}},
		{"escape hatches", values{
			"extraArgs":                 []string{"--workers=16", "--kube-api-qps=200"},
			"extraEnv":                  []values{{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}},
			"extraVolumes":              []values{{"name": "ca", "configMap": values{"name": "corp-ca"}}},
			"extraVolumeMounts":         []values{{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}},
			"topologySpreadConstraints": []values{{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}},
			"fullnameOverride":          "ops",
			"podSecurityContext":        values{"runAsUser": 65532, "runAsGroup": 65532},
		}},
	}
	meshValueSets = []valueSet{
		{"defaults", nil},
		{"license from value", values{"license": values{"create": true, "secretName": "acme-mesh-license", "value": `{"version":1,"payload":"e30=","signature":"c2ln"}`}}},
		{"replicas=3", values{"replicas": 3}},
		{"sidecar inject", values{"podLabels": values{"sidecar.istio.io/inject": "true"}}},
		{"crds.install=false", values{"crds": values{"install": false}}},
		{"metrics disabled", values{"metrics": values{"enabled": false}}},
		{"monitoring", values{"metrics": values{"secure": true, "serviceMonitor": values{"enabled": true, "labels": values{"release": "prom"}, "interval": "1m"},
			"prometheusRule": values{"enabled": true, "labels": values{"release": "prom"}}}}},
		{"pod monitoring", values{"metrics": values{"secure": true, "podMonitor": values{"enabled": true, "labels": values{"release": "prom"}, "bearerTokenSecret": values{"name": "prom-token", "key": "token"}},
			"prometheusRule": values{"enabled": true}, "grafanaDashboard": values{"enabled": true, "annotations": values{"grafana_folder": "Operators"}}}}},
		{"sail.install=false", values{"sail": values{"install": false}}},
		{"escape hatches", values{
			"extraArgs":                 []string{"--workers=16", "--kube-api-qps=200"},
			"extraEnv":                  []values{{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}},
			"extraVolumes":              []values{{"name": "ca", "configMap": values{"name": "corp-ca"}}},
			"extraVolumeMounts":         []values{{"name": "ca", "mountPath": "/etc/ssl/corp", "readOnly": true}},
			"topologySpreadConstraints": []values{{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}},
			"fullnameOverride":          "ops",
			"podSecurityContext":        values{"runAsUser": 65532, "runAsGroup": 65532},
		}},
	}
)

func TestLintStrict(t *testing.T) {
	for _, c := range []struct {
		chart string
		sets  []valueSet
	}{{fleetChart, fleetValueSets}, {meshChart, meshValueSets}} {
		for _, vs := range c.sets {
			t.Run(c.chart+"/"+vs.name, func(t *testing.T) {
				args := []string{"lint", "--strict", chartDir(t, c.chart), "--namespace", "ops"}
				if vs.values != nil {
					args = append(args, "--values", writeValues(t, vs.values))
				}
				out, err := runHelm(t, args...)
				require.NoError(t, err, out)
				assert.Contains(t, out, "1 chart(s) linted, 0 chart(s) failed")
				assert.NotContains(t, out, "[WARNING]")
				assert.NotContains(t, out, "[ERROR]")
			})
		}
	}
}

var fleetRelease = release{chart: fleetChart, name: "fleet-operator", namespace: "fleet-system"}

func TestFleetDefaults(t *testing.T) {
	m := render(t, fleetRelease, nil)
	const ns, name = "fleet-system", "fleet-operator"

	// Cluster-wide mode: exactly the generated rules, bound to the chart's
	// ServiceAccount; no per-namespace fleet Role.
	cr := typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", name)
	assert.Equal(t, generatedRules(t, fleetChart), cr.Rules)
	crb := typed[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", name)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, crb.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}, crb.Subjects)
	assert.Len(t, m.all("Role"), 1, "only the leader-election Role; objects:\n%s", m)
	assertLeaderElectionRole(t, m, ns, name+"-leader-election", name)
	require.NotNil(t, m.find("ServiceAccount", ns, name))

	d := deployment(t, m, ns, name)
	c := operatorContainer(t, d)
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	assert.Equal(t, "ghcr.io/ericdev/fleet-operator:0.1.0", c.Image, "the tag defaults to the chart's appVersion")
	assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy)
	assert.Equal(t, name, d.Spec.Template.Spec.ServiceAccountName)
	wantFlags := map[string]string{
		"leader-elect":              "true",
		"metrics-bind-address":      ":8080",
		"health-probe-bind-address": ":8081",
		"operator-service-account":  name,
		"network-policy-enforced":   "false",
		"state-timeout":             "2s",
		"state-interval":            "30s",
		"zap-log-level":             "info",
		// Every key but the families the fleet schema refuses anyway.
		"allowed-ingress-annotations": "*",
	}
	assertFlags(t, c.Args, wantFlags)
	_, watching := flagValue(c.Args, "watch-namespaces")
	assert.False(t, watching, "all namespaces by default: no --watch-namespaces")
	assertOperatorSelectorSelectsPods(t, c.Args, d)
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
	assertHardened(t, d)
	assertMetricsService(t, m, d, ns, name+"-metrics", 8080)
	assertPDB(t, m, d, ns, name, intstr.FromInt32(1))
	assertCRD(t, m, "celldfleets.celld.eric.dev", true)
}

func TestFleetNamespaces(t *testing.T) {
	m := render(t, fleetRelease, values{"fleetNamespaces": []string{"a", "b"}})
	const ns, name = "fleet-system", "fleet-operator"
	want := generatedRules(t, fleetChart)

	for _, fleetNS := range []string{"a", "b"} {
		role := typed[rbacv1.Role](t, m, "Role", fleetNS, name)
		assert.Equal(t, want, role.Rules, "the Role in %s holds exactly the generated rules", fleetNS)
		assert.True(t, allows(role.Rules, "celld.eric.dev", "celldfleets", "get", "list", "watch"),
			"the operator must read the CelldFleets in %s", fleetNS)
		assert.True(t, allows(role.Rules, "celld.eric.dev", "celldfleets/status", "patch"))
		rb := typed[rbacv1.RoleBinding](t, m, "RoleBinding", fleetNS, name)
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, rb.RoleRef)
		assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}, rb.Subjects,
			"bound to the operator's ServiceAccount in the release namespace")
	}
	// No cluster-wide rights on fleet resources. The operator watches its
	// fleets' Namespace labels, which needs list and watch on Namespaces
	// cluster-wide, and lists the DestinationRules of the mesh's root
	// namespace (any namespace a fleet names as its control plane's) before
	// a mesh roll: a ClusterRole grants each read and nothing else, and only
	// while the generated rules use that resource at all.
	clusterReads := map[string]rbacv1.PolicyRule{}
	if allowsResource(want, "", "namespaces") {
		clusterReads["namespaces"] = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}
	}
	if allowsResource(want, "networking.istio.io", "destinationrules") {
		clusterReads["destinationrules"] = rbacv1.PolicyRule{APIGroups: []string{"networking.istio.io"}, Resources: []string{"destinationrules"}, Verbs: []string{"list", "watch"}}
	}
	require.Len(t, m.all("ClusterRole"), len(clusterReads), "objects:\n%s", m)
	for suffix, rule := range clusterReads {
		cr := typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", name+"-"+suffix)
		assert.Equal(t, []rbacv1.PolicyRule{rule}, cr.Rules)
		crb := typed[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", name+"-"+suffix)
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name + "-" + suffix}, crb.RoleRef)
		assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}, crb.Subjects)
	}
	assert.Len(t, m.all("ClusterRoleBinding"), len(m.all("ClusterRole")))
	assert.Len(t, m.all("Role"), 3, "a, b and the leader-election Role; objects:\n%s", m)
	assert.Len(t, m.all("RoleBinding"), 3)
	assertLeaderElectionRole(t, m, ns, name+"-leader-election", name)

	c := operatorContainer(t, deployment(t, m, ns, name))
	assertFlags(t, c.Args, map[string]string{"watch-namespaces": "a,b", "operator-service-account": name})
}

func TestFleetReplicasAndLeaderElection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values values
		want   int32
		leader string
	}{
		{"three replicas", values{"replicas": 3}, 3, "true"},
		{"three replicas force leader election", values{"replicas": 3, "leaderElection": values{"enabled": false}}, 3, "true"},
		{"one replica without leader election", values{"leaderElection": values{"enabled": false}}, 1, "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []release{fleetRelease, meshRelease} {
				v := values{}
				for k, x := range tc.values {
					v[k] = x
				}
				m := render(t, r, v)
				d := deployment(t, m, r.namespace, r.name)
				assert.Equal(t, tc.want, *d.Spec.Replicas, r.chart)
				assertFlags(t, operatorContainer(t, d).Args, map[string]string{"leader-elect": tc.leader})
				assertPDB(t, m, d, r.namespace, r.name, intstr.FromInt32(1))
			}
		})
	}
}

func TestPodLabelsSidecarInject(t *testing.T) {
	for _, r := range []release{fleetRelease, meshRelease} {
		// A string from a values file and a boolean from --set both end up
		// as the label value "true".
		for _, inject := range []any{"true", true} {
			m := render(t, r, values{
				"podLabels":      values{"sidecar.istio.io/inject": inject, "team": "platform"},
				"podAnnotations": values{"example.com/revision": 7},
			})
			d := deployment(t, m, r.namespace, r.name)
			tpl := d.Spec.Template.Labels
			assert.Equal(t, "true", tpl["sidecar.istio.io/inject"], "%s with %T", r.chart, inject)
			assert.Equal(t, "platform", tpl["team"])
			assert.Equal(t, "7", d.Spec.Template.Annotations["example.com/revision"])
			assert.Equal(t, map[string]string{"app.kubernetes.io/name": r.chart, "app.kubernetes.io/instance": r.name},
				d.Spec.Selector.MatchLabels, "extra Pod labels never change the selector")
			if r.chart == fleetChart {
				c := operatorContainer(t, d)
				assertOperatorSelectorSelectsPods(t, c.Args, d)
				assertFlags(t, c.Args, map[string]string{"operator-service-account": r.name})
			}
		}
	}
}

func TestCRDsOptional(t *testing.T) {
	for _, tc := range []struct {
		release release
		crd     string
	}{{fleetRelease, "celldfleets.celld.eric.dev"}, {meshRelease, "servicemeshes.core.navique.com"}} {
		m := render(t, tc.release, values{"crds": values{"install": false}})
		assert.Empty(t, m.all("CustomResourceDefinition"), tc.release.chart)
		require.NotNil(t, m.find("Deployment", tc.release.namespace, tc.release.name), "the operator is still installed")

		m = render(t, tc.release, values{"crds": values{"keep": false}})
		assertCRD(t, m, tc.crd, false)
	}
}

func TestMetricsDisabled(t *testing.T) {
	for _, r := range []release{fleetRelease, meshRelease} {
		m := render(t, r, values{"metrics": values{"enabled": false}})
		assert.Empty(t, m.all("Service"), "%s: no metrics Service", r.chart)
		c := operatorContainer(t, deployment(t, m, r.namespace, r.name))
		assertFlags(t, c.Args, map[string]string{"metrics-bind-address": "0"})
		assert.False(t, hasPort(c, "metrics", 8080), "no metrics port is declared")
		assert.True(t, hasPort(c, "probes", 8081))

		m = render(t, r, values{"metrics": values{"port": 9090}})
		d := deployment(t, m, r.namespace, r.name)
		assertFlags(t, operatorContainer(t, d).Args, map[string]string{"metrics-bind-address": ":9090"})
		assertMetricsService(t, m, d, r.namespace, r.name+"-metrics", 9090)
	}
}

// TestFleetAllowedIngressAnnotations: routing.allowedIngressAnnotations
// reaches the operator as one flag; an empty list is passed as an empty
// value (no key allowed), not dropped (which would allow every key).
func TestFleetAllowedIngressAnnotations(t *testing.T) {
	for name, tc := range map[string]struct {
		patterns []string
		flag     string
	}{
		"a list":        {[]string{"cert-manager.io/*", "nginx.ingress.kubernetes.io/proxy-body-size"}, "cert-manager.io/*,nginx.ingress.kubernetes.io/proxy-body-size"},
		"an empty list": {[]string{}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			m := render(t, fleetRelease, values{"routing": values{"allowedIngressAnnotations": tc.patterns}})
			c := operatorContainer(t, deployment(t, m, "fleet-system", "fleet-operator"))
			assertFlags(t, c.Args, map[string]string{"allowed-ingress-annotations": tc.flag})
		})
	}
}

func TestFleetNonDefaults(t *testing.T) {
	i := slices.IndexFunc(fleetValueSets, func(vs valueSet) bool { return vs.name == "everything else" })
	require.GreaterOrEqual(t, i, 0)
	m := render(t, release{chart: fleetChart, name: "fleets", namespace: "ops"}, fleetValueSets[i].values)
	const ns, name = "ops", "fleets-fleet-operator"
	assert.Empty(t, m.all("ServiceAccount"), "serviceAccount.create=false")
	crb := typed[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", name)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "fleet-sa", Namespace: ns}}, crb.Subjects)
	assertLeaderElectionRole(t, m, ns, name+"-leader-election", "fleet-sa")
	assert.Empty(t, m.all("PodDisruptionBudget"))
	assertCRD(t, m, "celldfleets.celld.eric.dev", false)

	d := deployment(t, m, ns, name)
	c := operatorContainer(t, d)
	assert.Equal(t, "registry.example:5000/ops/fleet-operator:v0.2.0", c.Image)
	assert.Equal(t, corev1.PullAlways, c.ImagePullPolicy)
	assert.Equal(t, "fleet-sa", d.Spec.Template.Spec.ServiceAccountName)
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}}, d.Spec.Template.Spec.ImagePullSecrets)
	assert.Equal(t, "system-cluster-critical", d.Spec.Template.Spec.PriorityClassName)
	assert.Equal(t, map[string]string{"kubernetes.io/os": "linux"}, d.Spec.Template.Spec.NodeSelector)
	assert.Equal(t, "true", d.Spec.Template.Annotations["prometheus.io/scrape"])
	assertFlags(t, c.Args, map[string]string{
		"network-policy-enforced":  "true",
		"operator-service-account": "fleet-sa",
		"operator-pod-selector":    "app.kubernetes.io/name=fleet-operator,app.kubernetes.io/instance=fleets",
		"state-timeout":            "1500ms",
		"state-interval":           "1m30s",
		"zap-log-level":            "debug",
	})
	assertOperatorSelectorSelectsPods(t, c.Args, d)
	assertHardened(t, d)
}

var meshRelease = release{chart: meshChart, name: "mesh-operator", namespace: "mesh-system"}

func TestMeshDefaults(t *testing.T) {
	m := render(t, meshRelease, nil)
	const ns, name, secret = "mesh-system", "mesh-operator", "mesh-operator-license"

	cr := typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", name)
	assert.Equal(t, generatedRules(t, meshChart), cr.Rules)
	assert.False(t, allowsResource(cr.Rules, "", "secrets"), "no cluster-wide Secret access")
	crb := typed[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", name)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}, crb.Subjects)
	assertLeaderElectionRole(t, m, ns, name, name)
	assertLicenseAccess(t, m, ns, name, secret)
	assert.Empty(t, m.all("Secret"), "the license Secret is the user's unless license.create")

	d := deployment(t, m, ns, name)
	c := operatorContainer(t, d)
	assert.Equal(t, "ghcr.io/ericdev/mesh-operator:0.1.0", c.Image)
	assertFlags(t, c.Args, map[string]string{
		"leader-elect":              "true",
		"metrics-bind-address":      ":8080",
		"health-probe-bind-address": ":8081",
		"license-secret":            secret,
		"zap-log-level":             "info",
	})
	assertHardened(t, d)
	assertMetricsService(t, m, d, ns, name+"-metrics", 8080)
	assertPDB(t, m, d, ns, name, intstr.FromInt32(1))
	assertCRD(t, m, "servicemeshes.core.navique.com", true)
}

func TestMeshLicenseFromValue(t *testing.T) {
	const lic = `{"version":1,"payload":"e30=","signature":"c2ln"}`
	m := render(t, meshRelease, values{"license": values{"create": true, "secretName": "acme-mesh-license", "value": lic}})
	const ns = "mesh-system"
	s := typed[corev1.Secret](t, m, "Secret", ns, "acme-mesh-license")
	assert.Equal(t, map[string]string{"license": lic}, s.StringData, "the file content, unchanged, under the key license")
	assert.Equal(t, corev1.SecretTypeOpaque, s.Type)
	assert.Len(t, m.all("Secret"), 1)
	assertLicenseAccess(t, m, ns, "mesh-operator", "acme-mesh-license")
	assertFlags(t, operatorContainer(t, deployment(t, m, ns, "mesh-operator")).Args,
		map[string]string{"license-secret": "acme-mesh-license"})

	// An existing Secret under another name: referenced, not created.
	m = render(t, meshRelease, values{"license": values{"secretName": "from-vault"}})
	assert.Empty(t, m.all("Secret"))
	assertLicenseAccess(t, m, ns, "mesh-operator", "from-vault")
}

func TestMeshLicenseCreateNeedsValue(t *testing.T) {
	_, err := templateYAML(t, meshRelease, values{"license": values{"create": true}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "license.create is true but license.value is empty")
}

// TestRBACNeverBroad checks every value set of both charts: no wildcard, no
// non-resource URLs, no Secret access except get on the one license Secret
// by name in a namespaced Role, and (mesh operator, sail.install=true) the
// Sail release's Helm records in its own namespace. The fleet operator, beyond that, never gets
// rights on RBAC, CRDs, admission webhooks, ConfigMaps, Namespaces or Nodes.
// (What the mesh operator needs to install the Sail Operator is listed, and
// checked, in docs/security.md.)
func TestRBACNeverBroad(t *testing.T) {
	for _, c := range []struct {
		release release
		sets    []valueSet
	}{{fleetRelease, fleetValueSets}, {meshRelease, meshValueSets}} {
		for _, vs := range c.sets {
			m := render(t, c.release, vs.values)
			for role, rules := range roles(t, m) {
				for _, r := range rules {
					where := c.release.chart + "/" + vs.name + ": " + role
					for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
						assert.NotContains(t, list, "*", where)
					}
					if strings.HasSuffix(role, "-metrics-reader") {
						// The one non-resource rule: Prometheus reading /metrics.
						assert.Equal(t, rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}, r, where)
						continue
					}
					assert.Empty(t, r.NonResourceURLs, where)
					if containsAny(r.Resources, "secrets") && strings.HasSuffix(role, "-sail-installer") {
						// The Sail release's Helm records (secret driver),
						// in the operator's own namespace only: Helm lists
						// them by label, so they cannot be named.
						assert.Equal(t, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"},
							Verbs: []string{"get", "list", "create", "update", "delete"}}, r, where)
						assert.True(t, strings.HasPrefix(role, "Role mesh-system/"), "%s: only in the operator's namespace", where)
						continue
					}
					if containsAny(r.Resources, "secrets") {
						assert.Equal(t, []string{"get"}, r.Verbs, where)
						assert.Len(t, r.ResourceNames, 1, "%s: one named Secret only", where)
						assert.True(t, strings.HasPrefix(role, "Role "), "%s: Secret access is namespaced", where)
					}
					if c.release.chart != fleetChart {
						continue
					}
					for _, g := range []string{rbacv1.GroupName, "apiextensions.k8s.io", "admissionregistration.k8s.io"} {
						assert.NotContains(t, r.APIGroups, g, where)
					}
					for _, res := range []string{"configmaps", "secrets", "nodes", "pods/exec", "pods/log", "pods/attach", "pods/portforward"} {
						assert.NotContains(t, r.Resources, res, where)
					}
					if len(vs.values) > 0 && vs.values["fleetNamespaces"] != nil && strings.HasPrefix(role, "ClusterRole ") {
						assert.Contains(t, []rbacv1.PolicyRule{
							{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
							{APIGroups: []string{"networking.istio.io"}, Resources: []string{"destinationrules"}, Verbs: []string{"list", "watch"}},
						}, r, "%s: per-namespace mode reads Namespaces and DestinationRules cluster-wide, nothing more", where)
					}
					assert.False(t, containsAny(r.APIGroups, "") && containsAny(r.Resources, "pods") && containsAny(r.Verbs, "create"),
						"%s: member Pods are the StatefulSet controller's", where)
				}
			}
		}
	}
}

// assertFlags checks each --name=value is present exactly once.
func assertFlags(t *testing.T, args []string, want map[string]string) {
	t.Helper()
	for name, v := range want {
		got, ok := flagValue(args, name)
		if assert.True(t, ok, "--%s set exactly once in %q", name, args) {
			assert.Equal(t, v, got, "--%s", name)
		}
	}
}

// assertOperatorSelectorSelectsPods checks that --operator-pod-selector (which
// the fleet NetworkPolicies admit to members' peer port) selects the
// operator's own Pods and that the Deployment selects them too.
func assertOperatorSelectorSelectsPods(t *testing.T, args []string, d *appsv1.Deployment) {
	t.Helper()
	v, ok := flagValue(args, "operator-pod-selector")
	require.True(t, ok, "--operator-pod-selector missing")
	sel, err := labels.Parse(v)
	require.NoError(t, err)
	require.False(t, sel.Empty())
	assert.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "%q must select the operator Pods %v", v, d.Spec.Template.Labels)
	for k, val := range d.Spec.Selector.MatchLabels {
		assert.Equal(t, val, d.Spec.Template.Labels[k], "Deployment selector %s", k)
	}
}

func assertHardened(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec.SecurityContext
	require.NotNil(t, pod)
	require.NotNil(t, pod.RunAsNonRoot)
	assert.True(t, *pod.RunAsNonRoot)
	// No UID by default (OpenShift's restricted-v2 assigns one); a pinned one is not root.
	assert.True(t, pod.RunAsUser == nil || *pod.RunAsUser != 0, "runAsUser")
	require.NotNil(t, pod.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SeccompProfile.Type)
	spec := d.Spec.Template.Spec
	assert.False(t, spec.HostNetwork || spec.HostPID || spec.HostIPC, "no host namespaces")

	c := operatorContainer(t, d)
	sc := c.SecurityContext
	require.NotNil(t, sc)
	require.NotNil(t, sc.AllowPrivilegeEscalation)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	require.NotNil(t, sc.ReadOnlyRootFilesystem)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.True(t, sc.Privileged == nil || !*sc.Privileged)
	require.NotNil(t, sc.Capabilities)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	assert.True(t, hasPort(c, "probes", 8081))
	require.NotNil(t, c.LivenessProbe)
	require.NotNil(t, c.ReadinessProbe)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.NotEmpty(t, c.Resources.Requests, "resource requests are set by default")
}

func assertMetricsService(t *testing.T, m manifest, d *appsv1.Deployment, ns, name string, port int32) {
	t.Helper()
	svc := service(t, m, ns, name)
	assert.Equal(t, d.Spec.Selector.MatchLabels, svc.Spec.Selector, "the metrics Service selects the operator Pods")
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, port, svc.Spec.Ports[0].Port)
	assert.Equal(t, intstr.FromString("metrics"), svc.Spec.Ports[0].TargetPort)
	assert.True(t, hasPort(operatorContainer(t, d), "metrics", port), "the container declares the metrics port")
}

func assertPDB(t *testing.T, m manifest, d *appsv1.Deployment, ns, name string, maxUnavailable intstr.IntOrString) {
	t.Helper()
	p := pdb(t, m, ns, name)
	require.NotNil(t, p.Spec.MaxUnavailable)
	assert.Equal(t, maxUnavailable, *p.Spec.MaxUnavailable)
	assert.Nil(t, p.Spec.MinAvailable)
	require.NotNil(t, p.Spec.Selector)
	assert.Equal(t, d.Spec.Selector.MatchLabels, p.Spec.Selector.MatchLabels)
}

func assertCRD(t *testing.T, m manifest, name string, keep bool) {
	t.Helper()
	crd := m.find("CustomResourceDefinition", "", name)
	require.NotNil(t, crd, "CRD %s; objects:\n%s", name, m)
	policy, set := crd.GetAnnotations()["helm.sh/resource-policy"]
	if keep {
		assert.Equal(t, "keep", policy, "crds.keep keeps the CRD on uninstall")
	} else {
		assert.False(t, set, "crds.keep=false: no resource policy")
	}
}

// assertLeaderElectionRole checks the Role in the operator's namespace: the
// leader lease and Events (events.k8s.io for the operator's own, core for
// leader election's) and nothing broader; bound to the ServiceAccount.
func assertLeaderElectionRole(t *testing.T, m manifest, ns, name, sa string) {
	t.Helper()
	role := typed[rbacv1.Role](t, m, "Role", ns, name)
	assert.True(t, allows(role.Rules, "coordination.k8s.io", "leases", "get", "create", "update"))
	assert.False(t, allows(role.Rules, "coordination.k8s.io", "leases", "delete"))
	assert.True(t, allows(role.Rules, "events.k8s.io", "events", "create", "patch"))
	assert.True(t, allows(role.Rules, "", "events", "create", "patch"), "leader election records core v1 Events")
	rb := typed[rbacv1.RoleBinding](t, m, "RoleBinding", ns, name)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, rb.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}, rb.Subjects)
}

// assertLicenseAccess checks that the mesh operator may get exactly one
// Secret, the license, in its namespace, and nothing else about Secrets.
func assertLicenseAccess(t *testing.T, m manifest, ns, role, secret string) {
	t.Helper()
	r := typed[rbacv1.Role](t, m, "Role", ns, role)
	var secretRules []rbacv1.PolicyRule
	for _, rule := range r.Rules {
		if allowsResource([]rbacv1.PolicyRule{rule}, "", "secrets") {
			secretRules = append(secretRules, rule)
		}
	}
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"},
		ResourceNames: []string{secret}, Verbs: []string{"get"}}}, secretRules)
}

// allows reports whether one rule grants all verbs on group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource string, verbs ...string) bool {
	for _, r := range rules {
		if containsAny(r.APIGroups, group) && containsAny(r.Resources, resource) && len(r.ResourceNames) == 0 {
			ok := true
			for _, v := range verbs {
				ok = ok && containsAny(r.Verbs, v)
			}
			if ok {
				return true
			}
		}
	}
	return false
}

func allowsResource(rules []rbacv1.PolicyRule, group, resource string) bool {
	for _, r := range rules {
		if containsAny(r.APIGroups, group, "*") && containsAny(r.Resources, resource, "*") {
			return true
		}
	}
	return false
}

func containsAny(list []string, want ...string) bool {
	for _, s := range list {
		for _, w := range want {
			if s == w {
				return true
			}
		}
	}
	return false
}
