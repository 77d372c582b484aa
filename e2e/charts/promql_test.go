package charts

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The monitoring the charts ship, checked the way promtool and Grafana
// would read it: with Prometheus's own PromQL parser (the Prometheus Go
// module, here in the e2e module so that the operators' modules never
// depend on it).

// promQL parses as Prometheus does by default (no experimental functions).
var promQL = parser.NewParser(parser.Options{})

// selectors returns the vector selectors of a parsed expression.
func selectors(expr parser.Expr) []*parser.VectorSelector {
	var out []*parser.VectorSelector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

// metricOf is the metric name a selector reads (its __name__ equality).
func metricOf(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// groupings returns the label lists of the expression's "by" aggregations.
func groupings(expr parser.Expr) [][]string {
	var out [][]string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if a, ok := n.(*parser.AggregateExpr); ok && !a.Without {
			out = append(out, a.Grouping)
		}
		return nil
	})
	return out
}

// documentedSeries reports whether name is a documented metric or one of a
// documented histogram's series (NAME_bucket, NAME_sum, NAME_count).
func documentedSeries(documented map[string]bool, name string) bool {
	if documented[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && documented[base] {
			return true
		}
	}
	return false
}

// servedElsewhere are metric families docs/monitoring.md names in prose
// rather than in its table: controller-runtime's Go runtime and process
// collectors.
func servedElsewhere(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_")
}

// rule is one alerting rule as rendered.
type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func renderedRules(t *testing.T, m manifest, r release) []rule {
	t.Helper()
	prs := m.all("PrometheusRule")
	require.Len(t, prs, 1, m.String())
	pr := prs[0]
	assert.Equal(t, r.namespace, pr.GetNamespace())
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	require.NotEmpty(t, groups)
	var out []rule
	for _, g := range groups {
		b, err := json.Marshal(g.(map[string]any)["rules"])
		require.NoError(t, err)
		var rules []rule
		require.NoError(t, json.Unmarshal(b, &rules))
		out = append(out, rules...)
	}
	return out
}

var labelRef = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// TestPrometheusRuleExpressions: every alert's expression parses as PromQL,
// reads only metrics docs/monitoring.md lists (which the operators' own
// tests tie to the metrics they register), and keeps every label its
// annotations print. The operators' health alerts read only series of the
// release's namespace: with honorLabels the fleets' series keep their own
// namespace label, and the operator-level series get the operator Pod's.
func TestPrometheusRuleExpressions(t *testing.T) {
	documented := documentedMetrics(t)
	for _, tc := range []struct {
		name    string
		release release
		values  values
		// noLeader: whether the NoLeader alert renders.
		noLeader bool
	}{
		{"fleet", fleetRelease, nil, true},
		{"fleet elsewhere", release{fleetChart, "prod", "ops"}, nil, true},
		{"fleet without leader election", fleetRelease, values{"leaderElection": values{"enabled": false}}, false},
		{"fleet with 2 replicas", fleetRelease, values{"leaderElection": values{"enabled": false}, "replicas": 2}, true},
		{"mesh", meshRelease, nil, true},
		{"mesh without leader election", meshRelease, values{"leaderElection": values{"enabled": false}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := values{"metrics": values{"prometheusRule": values{"enabled": true}}}
			for k, x := range tc.values {
				v[k] = x
			}
			rules := renderedRules(t, render(t, tc.release, v), tc.release)
			var names []string
			for _, r := range rules {
				names = append(names, r.Alert)
				expr, err := promQL.ParseExpr(r.Expr)
				require.NoError(t, err, "%s: %s", r.Alert, r.Expr)
				assert.Equal(t, parser.ValueTypeVector, expr.Type(), "%s: an alert needs an instant vector", r.Alert)
				sels := selectors(expr)
				require.NotEmpty(t, sels, r.Alert)
				for _, vs := range sels {
					name := metricOf(vs)
					assert.True(t, documented[name], "%s reads %q, which docs/monitoring.md does not list", r.Alert, name)
				}
				for _, ref := range labelRef.FindAllStringSubmatch(r.Annotations["summary"]+r.Annotations["description"], -1) {
					for _, g := range groupings(expr) {
						assert.Contains(t, g, ref[1], "%s prints $labels.%s, which an aggregation by %v drops", r.Alert, ref[1], g)
					}
				}
				if strings.Contains(r.Alert, "Operator") {
					for _, vs := range sels {
						assert.True(t, slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
							return m.Name == "namespace" && m.Type == labels.MatchEqual && m.Value == tc.release.namespace
						}), "%s: %s is not limited to the release namespace %s", r.Alert, vs, tc.release.namespace)
					}
				}
			}
			assert.Equal(t, tc.noLeader, slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, "NoLeader") }), "%v", names)
		})
	}
}

// dashboardFile is charts/OPERATOR/files/dashboards/OPERATOR.json.
func dashboardFile(t *testing.T, chart string) string {
	return filepath.Join(chartDir(t, chart), "files", "dashboards", chart+".json")
}

// grafanaVar matches $name, ${name} and ${name:format} in a query.
var grafanaVar = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)`)

// grafanaBuiltins are the variables Grafana defines itself.
var grafanaBuiltins = map[string]string{
	"__rate_interval": "5m", "__interval": "30s", "__range": "1h", "__range_s": "3600", "__interval_ms": "30000",
}

// TestGrafanaDashboards: one dashboard per operator, valid JSON with a uid
// and title, every panel titled and placed, every query PromQL that parses
// once Grafana's variables are substituted, reading only documented
// metrics through the dashboard's own datasource variable.
func TestGrafanaDashboards(t *testing.T) {
	documented := documentedMetrics(t)
	uids := map[string]string{}
	for _, chart := range []string{fleetChart, meshChart} {
		t.Run(chart, func(t *testing.T) {
			b, err := os.ReadFile(dashboardFile(t, chart))
			require.NoError(t, err, "a dashboard per operator")
			var d struct {
				UID           string `json:"uid"`
				Title         string `json:"title"`
				SchemaVersion int    `json:"schemaVersion"`
				Templating    struct {
					List []struct {
						Name  string `json:"name"`
						Type  string `json:"type"`
						Query any    `json:"query"`
					} `json:"list"`
				} `json:"templating"`
				Panels []json.RawMessage `json:"panels"`
			}
			require.NoError(t, json.Unmarshal(b, &d), "valid JSON")
			assert.Regexp(t, `^[a-zA-Z0-9_-]{1,40}$`, d.UID)
			assert.NotEmpty(t, d.Title)
			assert.GreaterOrEqual(t, d.SchemaVersion, 36)
			require.NotContains(t, uids, d.UID, "uid also used by %s", uids[d.UID])
			uids[d.UID] = chart

			vars := map[string]string{}
			for k, v := range grafanaBuiltins {
				vars[k] = v
			}
			hasDatasource := false
			for _, v := range d.Templating.List {
				switch v.Type {
				case "datasource":
					hasDatasource = true
					assert.Equal(t, "prometheus", v.Query, "the datasource variable lists Prometheus datasources")
					vars[v.Name] = "prom"
				default:
					vars[v.Name] = "x"
				}
				if q, ok := v.Query.(map[string]any); ok {
					v.Query = q["query"]
				}
				if q, ok := v.Query.(string); ok && v.Type == "query" {
					m := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]+\)$`).FindStringSubmatch(q)
					require.NotNil(t, m, "variable %s: a label_values(selector, label) query: %s", v.Name, q)
					_, err := promQL.ParseExpr(m[1])
					assert.NoError(t, err, "variable %s: %s", v.Name, q)
				}
			}
			assert.True(t, hasDatasource, "a datasource variable, so the dashboard imports into any Grafana")

			type target struct {
				Expr       string `json:"expr"`
				Datasource any    `json:"datasource"`
			}
			type panel struct {
				ID         int             `json:"id"`
				Type       string          `json:"type"`
				Title      string          `json:"title"`
				GridPos    *map[string]int `json:"gridPos"`
				Datasource any             `json:"datasource"`
				Targets    []target        `json:"targets"`
				Panels     []panel         `json:"panels"`
			}
			var panels []panel
			for _, raw := range d.Panels {
				var p panel
				require.NoError(t, json.Unmarshal(raw, &p))
				panels = append(panels, p)
				panels = append(panels, p.Panels...)
			}
			require.NotEmpty(t, panels)
			ids := map[int]bool{}
			queries := 0
			for _, p := range panels {
				assert.NotEmpty(t, p.Title, "panel %d", p.ID)
				assert.NotEmpty(t, p.Type, "panel %q", p.Title)
				assert.NotNil(t, p.GridPos, "panel %q", p.Title)
				assert.False(t, ids[p.ID], "panel id %d twice", p.ID)
				ids[p.ID] = true
				if p.Type == "row" {
					continue
				}
				require.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
				assert.Contains(t, fmt.Sprint(p.Datasource), "${datasource}", "panel %q uses the datasource variable", p.Title)
				for _, tg := range p.Targets {
					queries++
					expr := grafanaVar.ReplaceAllStringFunc(tg.Expr, func(s string) string {
						m := grafanaVar.FindStringSubmatch(s)
						name := m[1] + m[2]
						v, ok := vars[name]
						assert.True(t, ok, "panel %q uses $%s, which the dashboard does not define", p.Title, name)
						return v
					})
					parsed, err := promQL.ParseExpr(expr)
					if !assert.NoError(t, err, "panel %q: %s", p.Title, tg.Expr) {
						continue
					}
					for _, vs := range selectors(parsed) {
						name := metricOf(vs)
						assert.True(t, documentedSeries(documented, name) || servedElsewhere(name), "panel %q reads %q, which docs/monitoring.md does not list", p.Title, name)
					}
				}
			}
			assert.NotZero(t, queries)
		})
	}
}

// TestGrafanaDashboardConfigMap: metrics.grafanaDashboard renders the
// dashboard as a ConfigMap the Grafana sidecar picks up by label; off by
// default.
func TestGrafanaDashboardConfigMap(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			assert.Empty(t, render(t, r, nil).all("ConfigMap"), "off by default")
			m := render(t, r, values{"metrics": values{"grafanaDashboard": values{"enabled": true, "annotations": values{"grafana_folder": "Operators"}}}})
			cm := typed[corev1.ConfigMap](t, m, "ConfigMap", r.namespace, r.name+"-dashboard")
			assert.Equal(t, "1", cm.Labels["grafana_dashboard"], "the sidecar's default label")
			assert.Equal(t, "Operators", cm.Annotations["grafana_folder"])
			b, err := os.ReadFile(dashboardFile(t, r.chart))
			require.NoError(t, err)
			assert.Equal(t, string(b), cm.Data[r.chart+".json"], "the dashboard file as it is")

			m = render(t, r, values{"metrics": values{"grafanaDashboard": values{"enabled": true, "labels": values{"dashboards": "ops"}}}})
			cm = typed[corev1.ConfigMap](t, m, "ConfigMap", r.namespace, r.name+"-dashboard")
			assert.Equal(t, map[string]string{"dashboards": "ops", "grafana_dashboard": "1"}, subset(cm.Labels, "dashboards", "grafana_dashboard"),
				"Helm merges label maps: the default stays unless set to null")
		})
	}
}

// subset returns the entries of m under the given keys.
func subset(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}
