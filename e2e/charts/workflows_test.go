package charts

import (
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
