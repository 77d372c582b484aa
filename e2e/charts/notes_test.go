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

// notes renders the NOTES a user sees after helm install/upgrade of the
// chart in dir (client-side dry run: no cluster).
func notes(t *testing.T, dir string) string {
	t.Helper()
	out, err := runHelm(t, "install", "fleet", dir, "--namespace", "fleet-system", "--dry-run=client")
	require.NoError(t, err)
	_, after, ok := strings.Cut(out, "NOTES:\n")
	require.True(t, ok, "helm printed no NOTES:\n%s", out)
	return after
}

// TestNotesDeclareMemberRestarts: when the release declares that it
// restarts members (files/restarts-members.txt, kept equal to CHANGELOG.md's
// "Restarts members" by TestPodTemplateStability), the NOTES say so with
// every declared line; when it declares nothing, they say nothing about it.
func TestNotesDeclareMemberRestarts(t *testing.T) {
	const marker = "UPGRADE RESTARTS MEMBERS"
	declared, err := os.ReadFile(filepath.Join(chartDir(t, fleetChart), "files", "restarts-members.txt"))
	require.NoError(t, err)
	if strings.TrimSpace(string(declared)) == "" {
		assert.NotContains(t, notes(t, chartDir(t, fleetChart)), marker, "the chart declares no restart")
	} else {
		assert.Contains(t, notes(t, chartDir(t, fleetChart)), marker)
	}

	// A copy of the chart that declares two restarts.
	dir := filepath.Join(t.TempDir(), fleetChart)
	require.NoError(t, exec.Command("cp", "-r", chartDir(t, fleetChart), dir).Run())
	lines := []string{"- Every fleet: members gain a label", "- Sidecar fleets: a new readiness probe"}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "files", "restarts-members.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	got := notes(t, dir)
	assert.Contains(t, got, marker)
	assert.Contains(t, got, "one member at\na time through the normal roll")
	for _, l := range lines {
		assert.Contains(t, got, "  "+l)
	}
}
