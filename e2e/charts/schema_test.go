package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// schemaError is how Helm introduces values.schema.json violations.
const schemaError = "values don't meet the specifications of the schema(s)"

// TestSchemaRejectsBadValues renders each chart with one mistake at a time
// and expects helm to refuse before rendering, naming the field.
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release release
		values  values
		// want are substrings of helm's error: the field's location in the
		// values and what is wrong with it.
		want []string
	}{
		{"typo at the top level", fleetRelease, values{"networkPolicyEnforcd": true},
			[]string{"additional properties 'networkPolicyEnforcd' not allowed"}},
		{"replicas as a word", fleetRelease, values{"replicas": "two"},
			[]string{"at '/replicas'", "want integer"}},
		{"negative replicas", meshRelease, values{"replicas": -1},
			[]string{"at '/replicas'", "minimum"}},
		{"networkPolicyEnforced as a string", fleetRelease, values{"networkPolicyEnforced": "yes"},
			[]string{"at '/networkPolicyEnforced'", "want boolean"}},
		{"fleetNamespaces item not a DNS label", fleetRelease, values{"fleetNamespaces": []string{"team-a", "Team_B"}},
			[]string{"at '/fleetNamespaces/1'", "'Team_B' does not match pattern"}},
		{"fleetNamespaces item too long", fleetRelease, values{"fleetNamespaces": []string{"a123456789b123456789c123456789d123456789e123456789f123456789g1234"}},
			[]string{"at '/fleetNamespaces/0'", "maxLength"}},
		{"fleetNamespaces twice the same", fleetRelease, values{"fleetNamespaces": []string{"a", "b", "a"}},
			[]string{"at '/fleetNamespaces'", "are equal"}},
		{"fleetNamespaces as a string", fleetRelease, values{"fleetNamespaces": "a,b"},
			[]string{"at '/fleetNamespaces'", "want array"}},
		{"routing.allowedIngressAnnotations as one string", fleetRelease, values{"routing": values{"allowedIngressAnnotations": "cert-manager.io/*"}},
			[]string{"at '/routing/allowedIngressAnnotations'", "want array"}},
		{"routing.allowedIngressAnnotations item with a comma", fleetRelease, values{"routing": values{"allowedIngressAnnotations": []string{"a.io/x,b.io/*"}}},
			[]string{"at '/routing/allowedIngressAnnotations/0'", "does not match pattern"}},
		{"routing.allowedIngressAnnotations item with a space", fleetRelease, values{"routing": values{"allowedIngressAnnotations": []string{"a.io/ x"}}},
			[]string{"at '/routing/allowedIngressAnnotations/0'", "does not match pattern"}},
		{"routing typo", fleetRelease, values{"routing": values{"allowedIngressAnnotation": []string{"*"}}},
			[]string{"additional properties 'allowedIngressAnnotation' not allowed"}},
		{"state.timeout without a unit", fleetRelease, values{"state": values{"timeout": "2"}},
			[]string{"at '/state/timeout'", "does not match pattern"}},
		{"state.timeout as a number", fleetRelease, values{"state": values{"timeout": 2}},
			[]string{"at '/state/timeout'", "want string"}},
		{"state.interval zero", fleetRelease, values{"state": values{"interval": "0s"}},
			[]string{"at '/state/interval'", "'0s' does not match pattern"}},
		{"state.interval in words", fleetRelease, values{"state": values{"interval": "30 seconds"}},
			[]string{"at '/state/interval'", "does not match pattern"}},
		{"typo in state", fleetRelease, values{"state": values{"timout": "2s"}},
			[]string{"at '/state'", "additional properties 'timout' not allowed"}},
		{"logLevel not info or debug", fleetRelease, values{"logLevel": "trace"},
			[]string{"at '/logLevel'", "value must be one of 'info', 'debug'"}},
		{"mesh logLevel", meshRelease, values{"logLevel": "warn"},
			[]string{"at '/logLevel'", "value must be one of 'info', 'debug'"}},
		{"pullPolicy", fleetRelease, values{"image": values{"pullPolicy": "Sometimes"}},
			[]string{"at '/image/pullPolicy'", "value must be one of 'Always', 'IfNotPresent', 'Never'"}},
		{"typo in image", meshRelease, values{"image": values{"repo": "example/mesh"}},
			[]string{"at '/image'", "additional properties 'repo' not allowed"}},
		{"image tag with a space", fleetRelease, values{"image": values{"tag": "v1 beta"}},
			[]string{"at '/image/tag'", "does not match pattern"}},
		{"license.secretName not a DNS subdomain", meshRelease, values{"license": values{"secretName": "Mesh_License"}},
			[]string{"at '/license/secretName'", "'Mesh_License' does not match pattern"}},
		{"license.secretName too long", meshRelease, values{"license": values{"secretName": string(make254())}},
			[]string{"at '/license/secretName'", "maxLength"}},
		{"typo in license", meshRelease, values{"license": values{"secretname": "x"}},
			[]string{"at '/license'", "additional properties 'secretname' not allowed"}},
		{"license spelled licence", meshRelease, values{"licence": values{"create": true}},
			[]string{"additional properties 'licence' not allowed"}},
		{"license.create as a string", meshRelease, values{"license": values{"create": "true"}},
			[]string{"at '/license/create'", "want boolean"}},
		{"crds.install as a string", meshRelease, values{"crds": values{"install": "false"}},
			[]string{"at '/crds/install'", "want boolean"}},
		{"typo in crds", fleetRelease, values{"crds": values{"kep": true}},
			[]string{"at '/crds'", "additional properties 'kep' not allowed"}},
		{"metrics port taken by the probes", fleetRelease, values{"metrics": values{"port": 8081}},
			[]string{"at '/metrics/port'", "want 8,080", "want 8,082"}},
		{"metrics port out of range", meshRelease, values{"metrics": values{"port": 70000}},
			[]string{"at '/metrics/port'", "maximum"}},
		{"podLabels overriding the selector", fleetRelease, values{"podLabels": values{"app.kubernetes.io/name": "x"}},
			[]string{"at '/podLabels/app.kubernetes.io~1name'", "false schema"}},
		{"podLabels key not a label key", meshRelease, values{"podLabels": values{"bad key": "x"}},
			[]string{"at '/podLabels'", "additional properties 'bad key' not allowed"}},
		{"podLabels value not a label value", fleetRelease, values{"podLabels": values{"team": "a b"}},
			[]string{"at '/podLabels/team'", "does not match pattern"}},
		{"podAnnotations as a list", fleetRelease, values{"podAnnotations": []string{"a=b"}},
			[]string{"at '/podAnnotations'", "want object"}},
		{"PDB maxUnavailable in words", fleetRelease, values{"podDisruptionBudget": values{"maxUnavailable": "half"}},
			[]string{"at '/podDisruptionBudget/maxUnavailable'"}},
		{"resources quantity", meshRelease, values{"resources": values{"requests": values{"cpu": "lots"}}},
			[]string{"at '/resources/requests/cpu'", "does not match pattern"}},
		{"typo in resources", fleetRelease, values{"resources": values{"limit": values{"memory": "1Gi"}}},
			[]string{"at '/resources'", "additional properties 'limit' not allowed"}},
		{"serviceAccount.name", fleetRelease, values{"serviceAccount": values{"name": "Fleet SA"}},
			[]string{"at '/serviceAccount/name'", "does not match pattern"}},
		{"imagePullSecrets as strings", meshRelease, values{"imagePullSecrets": []string{"regcred"}},
			[]string{"at '/imagePullSecrets/0'", "want object"}},
		{"leaderElection.enabled as a string", meshRelease, values{"leaderElection": values{"enabled": "no"}},
			[]string{"at '/leaderElection/enabled'", "want boolean"}},
		{"fleet value given to the mesh chart", meshRelease, values{"fleetNamespaces": []string{"a"}},
			[]string{"additional properties 'fleetNamespaces' not allowed"}},
		{"mesh value given to the fleet chart", fleetRelease, values{"license": values{"create": true}},
			[]string{"additional properties 'license' not allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := templateYAML(t, tc.release, tc.values)
			require.Error(t, err, "rendered instead of refusing:\n%s", out)
			msg := err.Error()
			assert.Contains(t, msg, schemaError)
			assert.Contains(t, msg, tc.release.chart+":", "the error names the chart")
			for _, w := range tc.want {
				assert.Contains(t, msg, w)
			}
			// helm lint reports the same.
			lint, err := runHelm(t, "lint", "--strict", chartDir(t, tc.release.chart), "--values", writeValues(t, tc.values))
			require.Error(t, err, lint)
		})
	}
}

// make254 is a DNS subdomain one character too long.
func make254() []byte {
	b := make([]byte, 254)
	for i := range b {
		b[i] = 'a'
		if i%60 == 59 {
			b[i] = '.'
		}
	}
	return b
}

// TestSchemaAcceptsGoodValues is the other side: values that look unusual
// but are right must render, so the schema is not merely strict.
func TestSchemaAcceptsGoodValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release release
		values  values
	}{
		{"durations", fleetRelease, values{"state": values{"timeout": "1.5s", "interval": "1h2m3s"}}},
		{"sub-second durations", fleetRelease, values{"state": values{"timeout": "500ms", "interval": ".5s"}}},
		{"micro seconds", fleetRelease, values{"state": values{"timeout": "750000µs", "interval": "90000000us"}}},
		{"namespaces at the length limit", fleetRelease, values{"fleetNamespaces": []string{"a", "0-x", "a123456789b123456789c123456789d123456789e123456789f123456789g12"}}},
		{"boolean and integer labels from --set", meshRelease, values{"podLabels": values{"sidecar.istio.io/inject": true, "tier": 3}}},
		{"prefixed annotation keys", meshRelease, values{"podAnnotations": values{"kubectl.kubernetes.io/default-container": "operator", "x": ""}}},
		{"ingress annotation patterns", fleetRelease, values{"routing": values{"allowedIngressAnnotations": []string{"*", "cert-manager.io/*", "*.example.com/x_y.z", "nginx.ingress.kubernetes.io/proxy-body-size"}}}},
		{"no ingress annotation allowed", fleetRelease, values{"routing": values{"allowedIngressAnnotations": []string{}}}},
		{"percent PDB", fleetRelease, values{"podDisruptionBudget": values{"maxUnavailable": "50%"}}},
		{"numeric quantities", meshRelease, values{"resources": values{"requests": values{"cpu": 0.5, "memory": "128Mi"}, "limits": values{"memory": "1G", "ephemeral-storage": "1Gi"}}}},
		{"license subdomain", meshRelease, values{"license": values{"secretName": "mesh.license-2026"}}},
		{"global from a parent chart", fleetRelease, values{"global": values{"imageRegistry": "x"}}},
		{"registry with a port", meshRelease, values{"image": values{"repository": "localhost:5000/mesh-operator", "tag": "dev"}}},
		{"kubernetes types passed through", fleetRelease, values{
			"tolerations": []values{{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}},
			"affinity":    values{"nodeAffinity": values{"requiredDuringSchedulingIgnoredDuringExecution": values{"nodeSelectorTerms": []values{{"matchExpressions": []values{{"key": "kubernetes.io/arch", "operator": "In", "values": []string{"amd64"}}}}}}}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := templateYAML(t, tc.release, tc.values)
			require.NoError(t, err)
		})
	}
}

// TestValuesFileMatchesSchema checks each chart's own values.yaml against
// its schema's top-level keys both ways: every default is declared, and
// every declared key has a default a user can see and copy.
func TestValuesFileMatchesSchema(t *testing.T) {
	for _, chart := range []string{fleetChart, meshChart} {
		dir := chartDir(t, chart)
		var schema struct {
			AdditionalProperties *bool          `json:"additionalProperties"`
			Properties           map[string]any `json:"properties"`
			Schema               string         `json:"$schema"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "values.schema.json"))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, &schema), chart)
		assert.Equal(t, "http://json-schema.org/draft-07/schema#", schema.Schema, chart)
		require.NotNil(t, schema.AdditionalProperties, chart)
		assert.False(t, *schema.AdditionalProperties, "%s: unknown top-level values are rejected", chart)

		var defaults map[string]any
		b, err = os.ReadFile(filepath.Join(dir, "values.yaml"))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, &defaults))
		for k := range defaults {
			assert.Contains(t, schema.Properties, k, "%s: values.yaml key %q is not in the schema", chart, k)
		}
		for k := range schema.Properties {
			if k == "global" {
				continue
			}
			assert.Contains(t, defaults, k, "%s: schema property %q has no default in values.yaml", chart, k)
		}

		// Every object the schema defines is closed, so typos are caught at
		// any depth.
		var doc any
		require.NoError(t, yaml.Unmarshal(mustRead(t, filepath.Join(dir, "values.schema.json")), &doc))
		walkSchema(doc, "", func(path string, obj map[string]any) {
			if _, defines := obj["properties"]; !defines {
				return
			}
			assert.Equal(t, false, obj["additionalProperties"], "%s: %s defines properties but is open", chart, path)
		})
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// walkSchema calls f for every JSON object in the schema document.
func walkSchema(node any, path string, f func(path string, obj map[string]any)) {
	switch n := node.(type) {
	case map[string]any:
		f(path, n)
		for k, v := range n {
			walkSchema(v, path+"/"+k, f)
		}
	case []any:
		for i, v := range n {
			walkSchema(v, fmt.Sprintf("%s/%d", path, i), f)
		}
	}
}
