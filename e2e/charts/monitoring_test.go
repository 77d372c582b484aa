package charts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestServiceMonitor: metrics.serviceMonitor renders a ServiceMonitor that
// selects the metrics Service's port, with the labels and interval given;
// with metrics.secure it scrapes over https with the Prometheus
// ServiceAccount's token. It honours the scraped labels: the fleets'
// series carry their own namespace label, which Prometheus would otherwise
// rename to exported_namespace and replace with the operator's namespace.
func TestServiceMonitor(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			assert.Empty(t, render(t, r, nil).all("ServiceMonitor"), "off by default")
			assert.Empty(t, render(t, r, values{"metrics": values{"enabled": false, "serviceMonitor": values{"enabled": true}}}).all("ServiceMonitor"),
				"nothing to scrape without metrics")

			m := render(t, r, values{"metrics": values{"serviceMonitor": values{"enabled": true, "interval": "15s", "labels": values{"release": "kube-prometheus"}}}})
			sm := m.find("ServiceMonitor", r.namespace, r.name)
			require.NotNil(t, sm, m.String())
			assert.Equal(t, "monitoring.coreos.com/v1", sm.GetAPIVersion())
			assert.Equal(t, "kube-prometheus", sm.GetLabels()["release"])
			svc := service(t, m, r.namespace, r.name+"-metrics")
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			require.NotEmpty(t, sel)
			for k, v := range sel {
				assert.Equal(t, v, svc.Labels[k], "the ServiceMonitor selects the metrics Service (%s)", k)
			}
			ns, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
			assert.Equal(t, []string{r.namespace}, ns)
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			require.Len(t, eps, 1)
			ep := eps[0].(map[string]any)
			assert.Equal(t, "metrics", ep["port"])
			assert.Equal(t, svc.Spec.Ports[0].Name, ep["port"])
			assert.Equal(t, "15s", ep["interval"])
			assert.Equal(t, true, ep["honorLabels"], "the fleets' namespace label stays namespace")
			assert.Nil(t, ep["scheme"], "plain http by default")

			m = render(t, r, values{"metrics": values{"secure": true, "serviceMonitor": values{"enabled": true}}})
			ep = must(t, m.find("ServiceMonitor", r.namespace, r.name)).Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
			assert.Equal(t, "https", ep["scheme"])
			assert.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", ep["bearerTokenFile"])
		})
	}
}

// TestPodMonitor: metrics.podMonitor scrapes the operator Pods' metrics
// port directly (for a Prometheus that selects PodMonitors only, or without
// the metrics Service in the path), honouring labels like the
// ServiceMonitor. With metrics.secure it needs a Secret holding a token
// (a PodMonitor cannot use Prometheus's own ServiceAccount token). One of
// the two monitors at a time: both would scrape every series twice.
func TestPodMonitor(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			assert.Empty(t, render(t, r, nil).all("PodMonitor"), "off by default")
			assert.Empty(t, render(t, r, values{"metrics": values{"enabled": false, "podMonitor": values{"enabled": true}}}).all("PodMonitor"),
				"nothing to scrape without metrics")

			m := render(t, r, values{"metrics": values{"podMonitor": values{"enabled": true, "interval": "20s", "labels": values{"release": "kube-prometheus"}}}})
			assert.Empty(t, m.all("ServiceMonitor"))
			pm := m.find("PodMonitor", r.namespace, r.name)
			require.NotNil(t, pm, m.String())
			assert.Equal(t, "monitoring.coreos.com/v1", pm.GetAPIVersion())
			assert.Equal(t, "kube-prometheus", pm.GetLabels()["release"])
			d := deployment(t, m, r.namespace, r.name)
			sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
			require.NotEmpty(t, sel)
			for k, v := range sel {
				assert.Equal(t, v, d.Spec.Template.Labels[k], "the PodMonitor selects the operator Pods (%s)", k)
			}
			ns, _, _ := unstructured.NestedStringSlice(pm.Object, "spec", "namespaceSelector", "matchNames")
			assert.Equal(t, []string{r.namespace}, ns)
			eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
			require.Len(t, eps, 1)
			ep := eps[0].(map[string]any)
			assert.Equal(t, "metrics", ep["port"])
			assert.True(t, hasPort(operatorContainer(t, d), "metrics", 8080))
			assert.Equal(t, "20s", ep["interval"])
			assert.Equal(t, true, ep["honorLabels"])
			assert.Nil(t, ep["scheme"])

			_, err := templateYAML(t, r, values{"metrics": values{"secure": true, "podMonitor": values{"enabled": true}}})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "metrics.podMonitor.bearerTokenSecret.name")

			m = render(t, r, values{"metrics": values{"secure": true, "podMonitor": values{"enabled": true, "bearerTokenSecret": values{"name": "prom-token", "key": "token"}}}})
			ep = must(t, m.find("PodMonitor", r.namespace, r.name)).Object["spec"].(map[string]any)["podMetricsEndpoints"].([]any)[0].(map[string]any)
			assert.Equal(t, "https", ep["scheme"])
			assert.Equal(t, map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "prom-token", "key": "token"}}, ep["authorization"])

			_, err = templateYAML(t, r, values{"metrics": values{"serviceMonitor": values{"enabled": true}, "podMonitor": values{"enabled": true}}})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "twice")
		})
	}
}

func must(t *testing.T, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	require.NotNil(t, o)
	return o
}

// TestMetricsSecureRBAC: metrics.secure passes --metrics-secure and grants
// what the operator needs to check scrapers (TokenReviews,
// SubjectAccessReviews), plus a ClusterRole for Prometheus to bind (GET
// /metrics); without it, neither.
func TestMetricsSecureRBAC(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			m := render(t, r, nil)
			assertFlags(t, operatorContainer(t, deployment(t, m, r.namespace, r.name)).Args, map[string]string{"metrics-secure": "false"})
			for name, rules := range roles(t, m) {
				assert.False(t, grants(rules, "authentication.k8s.io", "tokenreviews", "create"), "%s: no TokenReviews without metrics.secure", name)
			}
			assert.Nil(t, m.find("ClusterRole", "", r.name+"-metrics-reader"))

			m = render(t, r, values{"metrics": values{"secure": true}})
			assertFlags(t, operatorContainer(t, deployment(t, m, r.namespace, r.name)).Args, map[string]string{"metrics-secure": "true"})
			auth := typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", r.name+"-metrics-auth")
			assert.Equal(t, []rbacv1.PolicyRule{
				{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
				{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			}, auth.Rules)
			crb := typed[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", r.name+"-metrics-auth")
			assert.Equal(t, r.name+"-metrics-auth", crb.RoleRef.Name)
			assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: r.name, Namespace: r.namespace}}, crb.Subjects)
			reader := typed[rbacv1.ClusterRole](t, m, "ClusterRole", "", r.name+"-metrics-reader")
			assert.Equal(t, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}, reader.Rules)
			assert.Nil(t, m.find("ClusterRoleBinding", "", r.name+"-metrics-reader"), "the reader role is for Prometheus to bind")

			assert.Empty(t, render(t, r, values{"metrics": values{"secure": true}, "rbac": values{"create": false}}).all("ClusterRole"))
		})
	}
}

// metricsDoc is docs/monitoring.md.
func metricsDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "monitoring.md"))
	require.NoError(t, err, "docs/monitoring.md documents every metric")
	return string(b)
}

// documentedMetrics are the metric names in the first column of
// docs/monitoring.md's metrics table.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	row := regexp.MustCompile("^\\| `([a-z_:]+)` \\|")
	for _, line := range strings.Split(metricsDoc(t), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			out[m[1]] = true
		}
	}
	require.NotEmpty(t, out, "no metric rows in docs/monitoring.md")
	return out
}

// TestPrometheusRules: metrics.prometheusRule renders the example alerts
// (license expiring soon, fleet not Ready, roll stuck) and the operators'
// own health (failing passes, reconcile errors, work queue backlog, no
// leader), and every metric an alert reads is one the operators serve and
// docs/monitoring.md lists (TestPrometheusRuleExpressions parses them).
func TestPrometheusRules(t *testing.T) {
	documented := documentedMetrics(t)
	metricName := regexp.MustCompile(`\b(celld_[a-z_]+|mesh_operator_[a-z_]+|controller_runtime_[a-z_]+|workqueue_[a-z_]+|leader_election_[a-z_]+)\b`)
	for _, tc := range []struct {
		release release
		alerts  []string
	}{
		{fleetRelease, []string{"CelldFleetNotReady", "CelldFleetRollStuck",
			"FleetOperatorFailingPasses", "FleetOperatorReconcileErrors", "FleetOperatorWorkQueueBacklog", "FleetOperatorNoLeader"}},
		{meshRelease, []string{"MeshLicenseExpiresSoon", "MeshLicenseExpired",
			"MeshOperatorFailingPasses", "MeshOperatorReconcileErrors", "MeshOperatorWorkQueueBacklog", "MeshOperatorNoLeader"}},
	} {
		t.Run(tc.release.chart, func(t *testing.T) {
			assert.Empty(t, render(t, tc.release, nil).all("PrometheusRule"), "off by default")
			m := render(t, tc.release, values{"metrics": values{"prometheusRule": values{"enabled": true, "labels": values{"release": "kube-prometheus"}}}})
			pr := m.find("PrometheusRule", tc.release.namespace, tc.release.name)
			require.NotNil(t, pr, m.String())
			assert.Equal(t, "kube-prometheus", pr.GetLabels()["release"])
			groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
			var names []string
			for _, g := range groups {
				rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
				for _, r := range rules {
					rule := r.(map[string]any)
					name, _ := rule["alert"].(string)
					names = append(names, name)
					expr, _ := rule["expr"].(string)
					used := metricName.FindAllString(expr, -1)
					assert.NotEmpty(t, used, "%s reads no operator metric: %s", name, expr)
					for _, u := range used {
						assert.True(t, documented[u], "%s reads %s, which docs/monitoring.md does not list", name, u)
					}
					ann, _ := rule["annotations"].(map[string]any)
					assert.NotEmpty(t, ann["summary"], name)
					assert.NotEmpty(t, ann["description"], name)
					labels, _ := rule["labels"].(map[string]any)
					assert.NotEmpty(t, labels["severity"], name)
					assert.NotEmpty(t, rule["for"], "%s: no alert on a single scrape", name)
				}
			}
			assert.ElementsMatch(t, tc.alerts, names)
		})
	}
}
