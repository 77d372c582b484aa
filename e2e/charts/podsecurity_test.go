package charts

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// bothReleases are the default releases of the two charts.
var bothReleases = []release{fleetRelease, meshRelease}

// TestSecurityContextsFromValues: the Pod and container security contexts
// come from podSecurityContext and securityContext, with today's restricted
// settings as defaults; runAsUser and runAsGroup may be null (OpenShift's
// restricted-v2 assigns them) and the rest stays.
func TestSecurityContextsFromValues(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart+"/defaults", func(t *testing.T) {
			d := deployment(t, render(t, r, nil), r.namespace, r.name)
			assert.Equal(t, &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}, d.Spec.Template.Spec.SecurityContext)
			assert.Equal(t, &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}, operatorContainer(t, d).SecurityContext)
		})
		t.Run(r.chart+"/runAsUser null for OpenShift", func(t *testing.T) {
			d := deployment(t, render(t, r, values{"podSecurityContext": values{"runAsUser": nil, "runAsGroup": nil}}), r.namespace, r.name)
			pod := d.Spec.Template.Spec.SecurityContext
			require.NotNil(t, pod)
			assert.Nil(t, pod.RunAsUser, "restricted-v2 assigns the UID")
			assert.Nil(t, pod.RunAsGroup)
			assert.Equal(t, ptr.To(true), pod.RunAsNonRoot, "the other defaults stay")
			require.NotNil(t, pod.SeccompProfile)
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SeccompProfile.Type)
		})
		t.Run(r.chart+"/overrides", func(t *testing.T) {
			d := deployment(t, render(t, r, values{
				"podSecurityContext": values{"runAsUser": 1000700000, "fsGroup": 1000700000},
				"securityContext":    values{"readOnlyRootFilesystem": false},
			}), r.namespace, r.name)
			pod := d.Spec.Template.Spec.SecurityContext
			assert.Equal(t, ptr.To[int64](1000700000), pod.RunAsUser)
			assert.Equal(t, ptr.To[int64](1000700000), pod.FSGroup)
			sc := operatorContainer(t, d).SecurityContext
			assert.Equal(t, ptr.To(false), sc.ReadOnlyRootFilesystem)
			assert.Equal(t, ptr.To(false), sc.AllowPrivilegeEscalation, "merged with the defaults")
		})
	}
}

// TestImageDigest: image.digest pins the image by digest (the one verified
// with cosign); without it the tag (default appVersion) is used.
func TestImageDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, r := range bothReleases {
		t.Run(r.chart, func(t *testing.T) {
			c := operatorContainer(t, deployment(t, render(t, r, values{"image": values{"digest": digest}}), r.namespace, r.name))
			assert.Equal(t, "ghcr.io/ericdev/"+r.chart+"@"+digest, c.Image)
			c = operatorContainer(t, deployment(t, render(t, r, values{"image": values{"digest": digest, "repository": "registry.example:5000/mirror/op"}}), r.namespace, r.name))
			assert.Equal(t, "registry.example:5000/mirror/op@"+digest, c.Image)
			c = operatorContainer(t, deployment(t, render(t, r, values{"image": values{"tag": "v0.2.0"}}), r.namespace, r.name))
			assert.Equal(t, "ghcr.io/ericdev/"+r.chart+":v0.2.0", c.Image)
		})
	}
}

// TestSchemaRejectsBadSecurityValues: the new values' mistakes are refused
// by the schema, naming the field.
func TestSchemaRejectsBadSecurityValues(t *testing.T) {
	for _, r := range bothReleases {
		for _, tc := range []struct {
			name   string
			values values
			want   []string
		}{
			{"digest without algorithm", values{"image": values{"digest": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}, []string{"at '/image/digest'", "does not match pattern"}},
			{"digest too short", values{"image": values{"digest": "sha256:abc"}}, []string{"at '/image/digest'", "does not match pattern"}},
			{"runAsUser as a word", values{"podSecurityContext": values{"runAsUser": "nobody"}}, []string{"at '/podSecurityContext/runAsUser'"}},
			{"runAsUser negative", values{"podSecurityContext": values{"runAsUser": -1}}, []string{"at '/podSecurityContext/runAsUser'", "minimum"}},
			{"podSecurityContext as a list", values{"podSecurityContext": []string{"runAsNonRoot"}}, []string{"at '/podSecurityContext'", "want object"}},
			{"securityContext typo", values{"securityContext": values{"readOnlyRootFileSystem": true}}, []string{"at '/securityContext'", "additional properties 'readOnlyRootFileSystem' not allowed"}},
			{"privileged operator", values{"securityContext": values{"privileged": true}}, []string{"at '/securityContext/privileged'"}},
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
