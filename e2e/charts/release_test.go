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

// workflowFiles are the GitHub Actions workflows.
func workflowFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), ".github", "workflows", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// TestActionsPinnedBySHA: every action a workflow uses is pinned to a full
// commit SHA (a tag can be moved to other code), with the tag it stands for
// in a comment so Dependabot and readers can follow it.
func TestActionsPinnedBySHA(t *testing.T) {
	uses := regexp.MustCompile(`^\s*(?:-\s+)?uses:\s*(\S+)(.*)$`)
	pinned := regexp.MustCompile(`^[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}$`)
	n := 0
	for _, f := range workflowFiles(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			m := uses.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			n++
			where := fmt.Sprintf("%s:%d: %s", filepath.Base(f), i+1, strings.TrimSpace(line))
			assert.Regexp(t, pinned, m[1], "%s: pin the action to a commit SHA", where)
			assert.Regexp(t, `^\s+#\s*v[0-9]`, m[2], "%s: name the version the SHA stands for in a comment (# vX.Y.Z)", where)
		}
	}
	assert.Greater(t, n, 10, "the workflows use actions")
}

// TestDependabot: Dependabot keeps the pinned actions, every Go module and
// both Dockerfiles' base images current.
func TestDependabot(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".github", "dependabot.yml"))
	require.NoError(t, err)
	var cfg struct {
		Version int `json:"version"`
		Updates []struct {
			Ecosystem   string         `json:"package-ecosystem"`
			Directory   string         `json:"directory"`
			Directories []string       `json:"directories"`
			Groups      map[string]any `json:"groups"`
			Schedule    struct {
				Interval string `json:"interval"`
			} `json:"schedule"`
		} `json:"updates"`
	}
	require.NoError(t, yaml.UnmarshalStrict(b, &cfg))
	assert.Equal(t, 2, cfg.Version)
	covered := map[string]map[string]bool{}
	for _, u := range cfg.Updates {
		assert.NotEmpty(t, u.Schedule.Interval, u.Ecosystem)
		if covered[u.Ecosystem] == nil {
			covered[u.Ecosystem] = map[string]bool{}
		}
		for _, d := range append(u.Directories, u.Directory) {
			if d != "" {
				covered[u.Ecosystem]["/"+strings.Trim(d, "/")] = true
			}
		}
	}
	assert.True(t, covered["github-actions"]["/"], "github-actions in /")
	mods, err := filepath.Glob(filepath.Join(repoRoot(t), "*", "go.mod"))
	require.NoError(t, err)
	require.NotEmpty(t, mods)
	for _, m := range mods {
		dir := "/" + filepath.Base(filepath.Dir(m))
		assert.True(t, covered["gomod"][dir], "gomod in %s", dir)
	}
	for _, op := range []string{fleetChart, meshChart} {
		assert.True(t, covered["docker"]["/"+op], "docker in /%s", op)
	}
}

// TestKindWorkflowKeepsLogsAndCancels: the kind e2e workflow cancels a
// superseded run of the same ref, has the cluster's logs collected
// (FLEETMESH_KIND_LOGS, which the kind provider fills before it deletes a
// cluster), and uploads them as an artifact when the job fails.
func TestKindWorkflowKeepsLogsAndCancels(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".github", "workflows", "e2e-kind.yaml"))
	require.NoError(t, err)
	var wf struct {
		Concurrency struct {
			Group            string `json:"group"`
			CancelInProgress any    `json:"cancel-in-progress"`
		} `json:"concurrency"`
		Jobs map[string]struct {
			Env   map[string]string `json:"env"`
			Steps []struct {
				workflowStep
				If string `json:"if"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &wf))
	assert.Contains(t, wf.Concurrency.Group, "github.ref", "one run per ref")
	assert.NotNil(t, wf.Concurrency.CancelInProgress)
	job, ok := wf.Jobs["kind"]
	require.True(t, ok)
	logs := job.Env["FLEETMESH_KIND_LOGS"]
	require.NotEmpty(t, logs, "the kind job sets FLEETMESH_KIND_LOGS")
	uploaded := false
	for _, s := range job.Steps {
		if strings.HasPrefix(s.Uses, "actions/upload-artifact@") {
			uploaded = true
			assert.Contains(t, s.If, "failure()", "logs are uploaded when the job fails")
			assert.Equal(t, logs, s.With["path"], "the artifact is the directory the provider writes")
			assert.NotEmpty(t, s.With["name"])
		}
	}
	assert.True(t, uploaded, "an upload-artifact step")
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "e2e", "cluster", "kind", "kind.go"))
	require.NoError(t, err)
	assert.Contains(t, string(src), "CollectLogs", "the kind provider collects the cluster's logs")
}

// dockerBuild is the operator's build command in its Dockerfile.
var dockerBuild = regexp.MustCompile(`(?m)^RUN GOOS=\$TARGETOS GOARCH=\$TARGETARCH go build (.*)-ldflags "([^"]*)" -o (\S+) (\S+)$`)

// TestDockerfilesCrossCompile: each Dockerfile builds on the build platform
// for the target platform (no emulation) and stamps the version into the
// binary with -X. (TestVersionStamped, in the e2e tier, builds with exactly
// these flags and runs --version.)
func TestDockerfilesCrossCompile(t *testing.T) {
	for _, op := range []string{fleetChart, meshChart} {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), op, "Dockerfile"))
		require.NoError(t, err)
		df := string(b)
		assert.Regexp(t, `(?m)^FROM --platform=\$BUILDPLATFORM golang:\S+ AS build$`, df, op)
		assert.Regexp(t, `(?m)^ARG TARGETOS TARGETARCH$`, df, op)
		build := dockerBuild.FindStringSubmatch(df)
		if assert.NotNil(t, build, "%s: RUN GOOS=$TARGETOS GOARCH=$TARGETARCH go build ... -ldflags \"...\" -o OUT ./cmd/OP", op) {
			assert.Contains(t, build[2], "-X github.com/ericdev/fleetmesh/shared/version.Version=${VERSION}", op)
		}
	}
}
