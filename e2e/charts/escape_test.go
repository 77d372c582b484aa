package charts

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The escape hatches (issue 44 item 3): what a user needs that the chart has
// no dedicated value for, without forking it.

// TestExtraArgs: extraArgs are passed after the chart's own flags, so the
// documented flags the chart does not template (--workers, --kube-api-qps,
// pprof) can be set, and a repeated flag overrides the chart's (the
// operators parse flags with Go's flag package: the last one wins).
func TestExtraArgs(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			base := operatorContainer(t, deployment(t, render(t, r, nil), r.namespace, r.name)).Args
			extra := []string{"--workers=16", "--kube-api-qps=50", "--kube-api-burst=100", "--zap-log-level=debug"}
			c := operatorContainer(t, deployment(t, render(t, r, values{"extraArgs": extra}), r.namespace, r.name))
			require.Len(t, c.Args, len(base)+len(extra))
			assert.Equal(t, base, c.Args[:len(base)], "the chart's flags unchanged, first")
			assert.Equal(t, extra, c.Args[len(base):], "extraArgs last, in order")
		})
	}
}

// TestExtraEnv: extraEnv adds environment variables after the chart's, e.g.
// an HTTPS proxy for the mesh operator's Sail chart download; valueFrom works.
func TestExtraEnv(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			base := operatorContainer(t, deployment(t, render(t, r, nil), r.namespace, r.name)).Env
			c := operatorContainer(t, deployment(t, render(t, r, values{"extraEnv": []values{
				{"name": "HTTPS_PROXY", "value": "http://proxy.corp.example:3128"},
				{"name": "NO_PROXY", "value": "10.0.0.0/8,.svc,.cluster.local"},
				{"name": "GODEBUG", "valueFrom": values{"configMapKeyRef": values{"name": "godebug", "key": "value"}}},
			}}), r.namespace, r.name))
			require.Len(t, c.Env, len(base)+3)
			assert.Equal(t, base, c.Env[:len(base)])
			assert.Equal(t, []corev1.EnvVar{
				{Name: "HTTPS_PROXY", Value: "http://proxy.corp.example:3128"},
				{Name: "NO_PROXY", Value: "10.0.0.0/8,.svc,.cluster.local"},
				{Name: "GODEBUG", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "godebug"}, Key: "value"}}},
			}, c.Env[len(base):])
		})
	}
}

// TestExtraVolumes: extraVolumes are added to the Pod and extraVolumeMounts
// to the operator container, beside the chart's own (the mesh chart's /tmp).
func TestExtraVolumes(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			d0 := deployment(t, render(t, r, nil), r.namespace, r.name)
			d := deployment(t, render(t, r, values{
				"extraVolumes":      []values{{"name": "proxy-ca", "configMap": values{"name": "corp-ca"}}},
				"extraVolumeMounts": []values{{"name": "proxy-ca", "mountPath": "/etc/ssl/certs/corp", "readOnly": true}},
			}), r.namespace, r.name)
			vols := d.Spec.Template.Spec.Volumes
			require.Len(t, vols, len(d0.Spec.Template.Spec.Volumes)+1)
			assert.Equal(t, corev1.Volume{Name: "proxy-ca", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "corp-ca"}}}}, vols[len(vols)-1])
			mounts := operatorContainer(t, d).VolumeMounts
			require.Len(t, mounts, len(operatorContainer(t, d0).VolumeMounts)+1)
			assert.Equal(t, corev1.VolumeMount{Name: "proxy-ca", MountPath: "/etc/ssl/certs/corp", ReadOnly: true}, mounts[len(mounts)-1])
			for _, m := range mounts {
				assert.True(t, slices.ContainsFunc(vols, func(v corev1.Volume) bool { return v.Name == m.Name }), "mount %s has its volume", m.Name)
			}
		})
	}
}

// TestTopologySpreadConstraints: passed to the Pod as given; none by default.
func TestTopologySpreadConstraints(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			assert.Empty(t, deployment(t, render(t, r, nil), r.namespace, r.name).Spec.Template.Spec.TopologySpreadConstraints)
			d := deployment(t, render(t, r, values{"replicas": 2, "topologySpreadConstraints": []values{{
				"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
				"labelSelector": values{"matchLabels": values{"app.kubernetes.io/name": r.chart, "app.kubernetes.io/instance": r.name}},
			}}}), r.namespace, r.name)
			assert.Equal(t, []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": r.chart, "app.kubernetes.io/instance": r.name}},
			}}, d.Spec.Template.Spec.TopologySpreadConstraints)
		})
	}
}

// TestNameOverrides: fullnameOverride names every object the chart creates
// (Deployment, Services, ServiceAccount, RBAC, monitoring); nameOverride
// replaces the chart name in RELEASE-NAME. Neither changes the Pod selector
// labels (app.kubernetes.io/name stays the chart's name: the fleet
// NetworkPolicies admit the operator by it and a Deployment's selector is
// immutable), and without them every name is what it always was (the e2e
// harness binds the ServiceAccount RELEASE == chart name).
func TestNameOverrides(t *testing.T) {
	monitoring := values{"secure": true, "serviceMonitor": values{"enabled": true}, "prometheusRule": values{"enabled": true}}
	for _, tc := range []struct {
		name     string
		release  release
		values   values
		fullname string
	}{
		{"fleet default", fleetRelease, values{}, "fleet-operator"},
		{"fleet release name without the chart's", release{fleetChart, "prod", "ops"}, values{}, "prod-fleet-operator"},
		{"fleet fullnameOverride", fleetRelease, values{"fullnameOverride": "celld-ops"}, "celld-ops"},
		{"fleet nameOverride", release{fleetChart, "prod", "ops"}, values{"nameOverride": "fleets"}, "prod-fleets"},
		{"mesh default", meshRelease, values{}, "mesh-operator"},
		{"mesh fullnameOverride", meshRelease, values{"fullnameOverride": "mesh"}, "mesh"},
		{"mesh nameOverride", release{meshChart, "prod", "ops"}, values{"nameOverride": "mesh"}, "prod-mesh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := values{"metrics": monitoring}
			for k, x := range tc.values {
				v[k] = x
			}
			m := render(t, tc.release, v)
			ns, full := tc.release.namespace, tc.fullname
			d := deployment(t, m, ns, full)
			assert.Equal(t, full, d.Spec.Template.Spec.ServiceAccountName)
			require.NotNil(t, m.find("ServiceAccount", ns, full), m.String())
			require.NotNil(t, m.find("Service", ns, full+"-metrics"), m.String())
			require.NotNil(t, m.find("ServiceMonitor", ns, full), m.String())
			require.NotNil(t, m.find("PrometheusRule", ns, full), m.String())
			crb := typed[rbacv1.ClusterRoleBinding](t, m, "ClusterRoleBinding", "", full)
			assert.Equal(t, full, crb.RoleRef.Name)
			assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: full, Namespace: ns}}, crb.Subjects)
			require.NotNil(t, m.find("ClusterRole", "", full+"-metrics-reader"), m.String())
			for _, o := range append(m.all("RoleBinding"), m.all("ClusterRoleBinding")...) {
				for _, s := range convert[rbacv1.RoleBinding](t, o).Subjects {
					assert.Equal(t, rbacv1.Subject{Kind: "ServiceAccount", Name: full, Namespace: ns}, s, "%s %s binds the chart's ServiceAccount", o.GetKind(), o.GetName())
				}
			}
			assert.Equal(t, tc.release.chart, d.Spec.Selector.MatchLabels["app.kubernetes.io/name"], "the selector keeps the chart's name")
			assert.Equal(t, tc.release.name, d.Spec.Selector.MatchLabels["app.kubernetes.io/instance"])
			if tc.release.chart == fleetChart {
				c := operatorContainer(t, d)
				assertFlags(t, c.Args, map[string]string{"operator-service-account": full})
				assertOperatorSelectorSelectsPods(t, c.Args, d)
			}
			for _, o := range m {
				if o.GetKind() == "CustomResourceDefinition" {
					continue
				}
				assert.Contains(t, o.GetName(), full, "%s %s is named after the full name", o.GetKind(), o.GetName())
			}
		})
	}
}

// TestSchemaRejectsBadEscapeHatches: the escape hatches are typed too.
func TestSchemaRejectsBadEscapeHatches(t *testing.T) {
	for _, r := range bothReleases {
		for _, tc := range []struct {
			name   string
			values values
			want   []string
		}{
			{"extraArgs as one string", values{"extraArgs": "--workers=16"}, []string{"at '/extraArgs'", "want array"}},
			{"extraArgs item not a flag", values{"extraArgs": []string{"workers=16"}}, []string{"at '/extraArgs/0'", "does not match pattern"}},
			{"extraArgs item a number", values{"extraArgs": []any{16}}, []string{"at '/extraArgs/0'", "want string"}},
			{"extraEnv as a map", values{"extraEnv": values{"HTTPS_PROXY": "http://p:3128"}}, []string{"at '/extraEnv'", "want array"}},
			{"extraEnv without a name", values{"extraEnv": []values{{"value": "x"}}}, []string{"at '/extraEnv/0'", "missing property 'name'"}},
			{"extraEnv typo", values{"extraEnv": []values{{"name": "A", "vaule": "x"}}}, []string{"at '/extraEnv/0'", "additional properties 'vaule' not allowed"}},
			{"extraEnv value a number", values{"extraEnv": []values{{"name": "A", "value": 3}}}, []string{"at '/extraEnv/0/value'", "want string"}},
			{"extraVolumes without a name", values{"extraVolumes": []values{{"emptyDir": values{}}}}, []string{"at '/extraVolumes/0'", "missing property 'name'"}},
			{"extraVolumeMounts without a path", values{"extraVolumeMounts": []values{{"name": "x"}}}, []string{"at '/extraVolumeMounts/0'", "missing property 'mountPath'"}},
			{"extraVolumeMounts typo", values{"extraVolumeMounts": []values{{"name": "x", "mountPath": "/x", "readonly": true}}}, []string{"at '/extraVolumeMounts/0'", "additional properties 'readonly' not allowed"}},
			{"topologySpreadConstraints without topologyKey", values{"topologySpreadConstraints": []values{{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}}}, []string{"at '/topologySpreadConstraints/0'", "missing property 'topologyKey'"}},
			{"topologySpreadConstraints bad whenUnsatisfiable", values{"topologySpreadConstraints": []values{{"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "Never"}}}, []string{"at '/topologySpreadConstraints/0/whenUnsatisfiable'"}},
			{"fullnameOverride not a DNS label", values{"fullnameOverride": "Fleet_Ops"}, []string{"at '/fullnameOverride'", "does not match pattern"}},
			{"nameOverride too long", values{"nameOverride": "a123456789b123456789c123456789d123456789e123456789f123456789g1234"}, []string{"at '/nameOverride'", "maxLength"}},
		} {
			t.Run(r.chart+"/"+tc.name, func(t *testing.T) {
				out, err := templateYAML(t, r, tc.values)
				require.Error(t, err, "rendered instead of refusing:\n%s", out)
				assert.Contains(t, err.Error(), schemaError)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w)
				}
			})
		}
	}
}
