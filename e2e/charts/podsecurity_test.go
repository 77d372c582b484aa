package charts

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// bothReleases are the default releases of the two charts.
var bothReleases = []release{fleetRelease, meshRelease}

// TestSecurityContextsFromValues: the Pod and container security contexts
// come from podSecurityContext and securityContext, with the restricted
// settings as defaults. No UID or GID by default: OpenShift's restricted-v2
// SCC assigns them from the namespace's range and rejects a pinned 65532;
// elsewhere the image's numeric USER (TestImagesRunAsNumericUser) lets the
// kubelet verify runAsNonRoot. podSecurityContext.runAsUser pins one.
func TestSecurityContextsFromValues(t *testing.T) {
	for _, r := range bothReleases {
		t.Run(r.chart+"/defaults", func(t *testing.T) {
			d := deployment(t, render(t, r, nil), r.namespace, r.name)
			assert.Equal(t, &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}, d.Spec.Template.Spec.SecurityContext,
				"no runAsUser/runAsGroup by default (restricted-v2 assigns them)")
			assert.Equal(t, &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}, operatorContainer(t, d).SecurityContext)
		})
		t.Run(r.chart+"/runAsUser pinned", func(t *testing.T) {
			d := deployment(t, render(t, r, values{"podSecurityContext": values{"runAsUser": 65532, "runAsGroup": 65532}}), r.namespace, r.name)
			pod := d.Spec.Template.Spec.SecurityContext
			require.NotNil(t, pod)
			assert.Equal(t, ptr.To[int64](65532), pod.RunAsUser)
			assert.Equal(t, ptr.To[int64](65532), pod.RunAsGroup)
			assert.Equal(t, ptr.To(true), pod.RunAsNonRoot, "merged with the defaults")
			require.NotNil(t, pod.SeccompProfile)
		})
		t.Run(r.chart+"/runAsUser null (values of older releases)", func(t *testing.T) {
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

// TestImagesRunAsNumericUser: with no runAsUser in the Pod, the kubelet
// checks runAsNonRoot against the image's USER, and refuses to start a
// container whose USER is a name it cannot resolve to a UID
// ("image has non-numeric user"). Each operator image's final stage must so
// name a numeric, non-zero UID (and GID).
func TestImagesRunAsNumericUser(t *testing.T) {
	numeric := regexp.MustCompile(`^USER\s+([0-9]+)(?::([0-9]+))?\s*$`)
	for _, op := range []string{fleetChart, meshChart} {
		t.Run(op, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(repoRoot(t), op, "Dockerfile"))
			if os.IsNotExist(err) {
				t.Skipf("%s has no Dockerfile", op)
			}
			require.NoError(t, err)
			// The last FROM starts the final stage; its last USER counts.
			lines := strings.Split(string(b), "\n")
			var user string
			for _, l := range lines {
				l = strings.TrimSpace(l)
				if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
					user = ""
				}
				if strings.HasPrefix(strings.ToUpper(l), "USER ") {
					user = l
				}
			}
			require.NotEmpty(t, user, "%s/Dockerfile: the final stage sets no USER", op)
			m := numeric.FindStringSubmatch(user)
			require.NotNil(t, m, "%s/Dockerfile: %q is not a numeric UID[:GID]", op, user)
			assert.NotEqual(t, "0", m[1], "not root")
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
