//go:build e2e

package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionStamped: building an operator with exactly its Dockerfile's
// flags (VERSION=9.8.7-test) gives a binary whose --version prints it.
func TestVersionStamped(t *testing.T) {
	for _, op := range []string{fleetChart, meshChart} {
		t.Run(op, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(repoRoot(t), op, "Dockerfile"))
			require.NoError(t, err)
			df := string(b)
			build := dockerBuild.FindStringSubmatch(df)
			require.NotNil(t, build, "RUN GOOS=$TARGETOS GOARCH=$TARGETARCH go build ... -ldflags \"...\" -o OUT ./cmd/OP")
			require.Contains(t, build[2], "-X ", "the version is stamped with -X")
			ldflags := strings.ReplaceAll(build[2], "${VERSION}", "9.8.7-test")
			require.NotEqual(t, build[2], ldflags, "-X ...=${VERSION}")

			bin := filepath.Join(t.TempDir(), op)
			cmd := exec.Command("go", "build", "-ldflags", ldflags, "-o", bin, build[4])
			cmd.Dir = filepath.Join(repoRoot(t), op)
			cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			out, err = exec.Command(bin, "--version").CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Equal(t, op+" 9.8.7-test\n", string(out))
		})
	}
}
