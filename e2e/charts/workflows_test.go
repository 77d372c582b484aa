package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestWorkflowsUseExistingTargets parses every GitHub Actions workflow and
// checks that each `make TARGET` it runs is a target of the Makefile, and
// each script it runs exists in the repository.
func TestWorkflowsUseExistingTargets(t *testing.T) {
	root := repoRoot(t)
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	files, err := filepath.Glob(filepath.Join(root, ".github", "workflows", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	makeCall := regexp.MustCompile(`\bmake ([a-z][a-z0-9-]*)`)
	script := regexp.MustCompile(`\b(hack/[a-z0-9-]+\.sh)`)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		var wf struct {
			On   any `json:"on"`
			Jobs map[string]struct {
				Steps []struct {
					Run string `json:"run"`
				} `json:"steps"`
			} `json:"jobs"`
		}
		require.NoError(t, yaml.Unmarshal(raw, &wf), "%s is not valid YAML", f)
		require.NotEmpty(t, wf.Jobs, "%s has no jobs", f)
		for job, j := range wf.Jobs {
			for _, s := range j.Steps {
				for _, m := range makeCall.FindAllStringSubmatch(s.Run, -1) {
					assert.True(t, targets[m[1]], "%s job %s runs `make %s`, which the Makefile does not define", filepath.Base(f), job, m[1])
				}
				for _, m := range script.FindAllStringSubmatch(s.Run, -1) {
					_, err := os.Stat(filepath.Join(root, strings.TrimSpace(m[1])))
					assert.NoError(t, err, "%s job %s runs %s", filepath.Base(f), job, m[1])
				}
			}
		}
	}
}

// workflowStep is the part of a GitHub Actions step the release checks read.
type workflowStep struct {
	Name string            `json:"name"`
	ID   string            `json:"id"`
	Uses string            `json:"uses"`
	Run  string            `json:"run"`
	With map[string]any    `json:"with"`
	Env  map[string]string `json:"env"`
}

// expandEnv replaces $VAR and ${VAR} in s with the step's env values, so a
// command can be read with the expressions GitHub substitutes into them.
func (s workflowStep) expandEnv(text string) string {
	return regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`).ReplaceAllStringFunc(text, func(m string) string {
		name := strings.Trim(m, "${}")
		if v, ok := s.Env[name]; ok {
			return v
		}
		return m
	})
}

// compactExpr writes every ${{ expression }} without spaces, so a command
// line splits into its arguments at whitespace.
func compactExpr(s string) string {
	return regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`).ReplaceAllStringFunc(s, func(m string) string {
		return "${{" + strings.Join(strings.Fields(m[3:len(m)-2]), "") + "}}"
	})
}

// TestReleaseSignsEveryPushByDigest checks the release workflow: every image
// pushed by docker/build-push-action and every chart pushed with `helm push`
// is followed by a `cosign sign --yes REPOSITORY@DIGEST` of that exact
// repository and the digest that push step reported, with keyless signing
// possible (id-token: write, cosign installed before), and the image carries
// SBOM and provenance attestations.
func TestReleaseSignsEveryPushByDigest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), ".github", "workflows", "release.yaml"))
	require.NoError(t, err)
	var wf struct {
		Permissions map[string]string `json:"permissions"`
		Jobs        map[string]struct {
			Permissions map[string]string `json:"permissions"`
			Steps       []workflowStep    `json:"steps"`
		} `json:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &wf))

	type push struct {
		step     int
		what     string // for messages
		repo     string // the OCI repository the push wrote to
		digestOf string // the step id whose outputs.digest is the pushed digest
	}
	helmPush := regexp.MustCompile(`helm push\s+"?([^"\s]+)"?\s+"?oci://([^"\s]+)"?`)
	cosignSign := regexp.MustCompile(`cosign sign\b([^\n]*?)\s"?([^"\s]+)@([^"\s]+?)"?\s*$`)
	pushes := 0
	for name, job := range wf.Jobs {
		perms := wf.Permissions
		if job.Permissions != nil {
			perms = job.Permissions
		}
		var found []push
		installer := -1
		for i, s := range job.Steps {
			if strings.HasPrefix(s.Uses, "sigstore/cosign-installer@") && installer < 0 {
				installer = i
			}
			if strings.HasPrefix(s.Uses, "docker/build-push-action@") && fmt.Sprint(s.With["push"]) == "true" {
				require.NotEmpty(t, s.ID, "job %s step %q pushes an image but has no id, so its digest output cannot be signed", name, s.Name)
				// build-push-action's tags: a newline- or comma-separated list.
				var tags []string
				for _, tag := range strings.FieldsFunc(fmt.Sprint(s.With["tags"]), func(r rune) bool { return r == '\n' || r == ',' }) {
					if tag = strings.TrimSpace(tag); tag != "" {
						tags = append(tags, tag)
					}
				}
				require.NotEmpty(t, tags, "job %s step %q: no tags", name, s.Name)
				for _, tag := range tags {
					tag = compactExpr(tag)
					repo := tag
					if i := strings.LastIndex(tag, ":"); i > strings.LastIndex(tag, "/") {
						repo = tag[:i]
					}
					found = append(found, push{i, "image " + tag, repo, s.ID})
				}
				assert.Equal(t, "true", fmt.Sprint(s.With["sbom"]), "job %s step %q: SBOM attestation", name, s.Name)
				assert.Contains(t, []string{"true", "mode=max", "mode=min"}, fmt.Sprint(s.With["provenance"]), "job %s step %q: provenance attestation", name, s.Name)
			}
			for _, m := range helmPush.FindAllStringSubmatch(compactExpr(s.expandEnv(s.Run)), -1) {
				require.NotEmpty(t, s.ID, "job %s step %q pushes a chart but has no id", name, s.Name)
				assert.Regexp(t, `digest=.*>>\s*"?\$GITHUB_OUTPUT`, s.Run, "job %s step %q must publish the pushed chart's digest as an output", name, s.Name)
				// helm push PKG oci://REPO stores chart NAME (PKG is NAME-VERSION.tgz) as REPO/NAME.
				base := filepath.Base(m[1])
				version := compactExpr(s.expandEnv("${VERSION}"))
				chart := strings.TrimSuffix(base, "-"+version+".tgz")
				require.NotEqual(t, base, chart, "job %s step %q: cannot tell the chart name from %s (expected NAME-${VERSION}.tgz)", name, s.Name, m[1])
				found = append(found, push{i, "chart " + base, strings.TrimSuffix(m[2], "/") + "/" + chart, s.ID})
			}
		}
		for _, p := range found {
			pushes++
			want := "${{steps." + p.digestOf + ".outputs.digest}}"
			signed := false
			for i := p.step + 1; i < len(job.Steps); i++ {
				s := job.Steps[i]
				for _, line := range strings.Split(compactExpr(s.expandEnv(s.Run)), "\n") {
					m := cosignSign.FindStringSubmatch(strings.TrimSpace(line))
					if m == nil {
						continue
					}
					if m[2] == p.repo && m[3] == want {
						signed = true
						assert.Contains(t, strings.Fields(m[1]), "--yes", "job %s step %q: keyless signing in CI needs --yes", name, s.Name)
						assert.True(t, installer >= 0 && installer < i, "job %s: cosign-installer must run before step %q", name, s.Name)
					}
				}
			}
			assert.True(t, signed, "job %s: %s (pushed by step %d) is not followed by `cosign sign --yes %s@%s`", name, p.what, p.step, p.repo, want)
			assert.Equal(t, "write", perms["id-token"], "job %s: keyless signing needs permissions id-token: write", name)
		}
	}
	assert.GreaterOrEqual(t, pushes, 2, "the release pushes an image and a chart")
}
