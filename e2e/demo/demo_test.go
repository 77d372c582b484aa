//go:build e2e

// Package demo runs `make demo`'s script the way a newcomer does and holds
// it to its promise: both operators cooperating on one cluster, told in
// under a screen.
package demo

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// screen is what fits in one terminal screen without scrolling.
const screen = 50

// TestDemo runs `hack/demo.sh up` (what `make demo` runs once the tools are
// built) into a fresh TESTBED_DIR, checks what it printed and the state it
// left, then `hack/demo.sh down`.
func TestDemo(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	// About a minute on a quiet 2-core machine (builds included); over three
	// while other builds kept the load average above 20.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env := append(os.Environ(), "TESTBED_DIR="+dir)
	t.Cleanup(func() {
		down := exec.Command("bash", filepath.Join(root, "hack", "demo.sh"), "down")
		down.Env = env
		if out, err := down.CombinedOutput(); err != nil {
			t.Errorf("demo.sh down: %v\n%s", err, out)
		}
	})
	up := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "demo.sh"), "up")
	up.Env = env
	started := time.Now()
	b, err := up.CombinedOutput()
	out := string(b)
	t.Logf("demo.sh up (%s):\n%s", time.Since(started).Round(time.Second), out)
	require.NoError(t, err, "demo.sh up failed; its test bed log: %s", filepath.Join(dir, "testbed.log"))

	// The story: what each operator did, in under a screen, before the
	// access table.
	story, table, found := strings.Cut(out, "kubectl celld access -n demo demo-fleet -o wide\n")
	require.True(t, found, "the demo shows the fleet's access table")
	assert.LessOrEqual(t, strings.Count(story, "\n"), screen, "what each operator did fits in a screen")
	assert.Contains(t, story, "SIMULATED", "the played Sail Operator and istio-cni are labelled as such")
	for _, want := range []string{"fleet operator", "mesh operator"} {
		assert.Contains(t, story, want, "the story names what the %s did", want)
	}

	// Who wrote what is read from the objects' field managers: each
	// operator's own policies, each operator's own namespace labels.
	for _, row := range []string{
		`NetworkPolicy +demo-fleet +fleet-operator`,
		`AuthorizationPolicy +demo-fleet-mesh +fleet-operator +ALLOW`,
		`PeerAuthentication +mesh-mtls +mesh-operator +STRICT`,
		`AuthorizationPolicy +mesh-isolation +mesh-operator +DENY`,
		`namespace labels by fleet-operator/fleet/demo/demo-fleet:\n.*core\.navique\.com/mesh=enabled`,
		`namespace labels by mesh-operator:\n(.*\n)*.*core\.navique\.com/mesh-state=enrolled`,
	} {
		assert.Regexp(t, regexp.MustCompile(row), story)
	}

	// The access table is of a meshed, STRICT fleet.
	assert.Contains(t, table, "demo-fleet-0 (mesh: ambient)")
	assert.Contains(t, table, "STRICT by PeerAuthentication demo/")

	// The state the demo promises, read back from the cluster it left.
	ready, err := os.ReadFile(filepath.Join(dir, "ready")) // "PID\nKUBECONFIG\n", testbed's marker
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(ready)), "\n")
	require.Len(t, lines, 2)
	kubeconfig := lines[1]
	get := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), b)
		return strings.TrimSpace(string(b))
	}
	assert.Equal(t, "Ready", get("get", "servicemesh", "cluster", "-o", "jsonpath={.status.phase}"))
	assert.Equal(t, "True", get("get", "servicemesh", "cluster", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`))
	labels := get("get", "namespace", "demo", "-o", "jsonpath={.metadata.labels}")
	for _, l := range []string{`"core.navique.com/mesh-state":"enrolled"`, `"core.navique.com/mesh-mtls":"strict"`, `"istio.io/dataplane-mode":"ambient"`} {
		assert.Contains(t, labels, l, "namespace demo")
	}
	assert.Equal(t, "Ambient", get("-n", "demo", "get", "celldfleet", "demo-fleet", "-o", "jsonpath={.status.mesh}"))
	for _, c := range []string{"Ready", "MeshReady"} {
		assert.Equal(t, "True", get("-n", "demo", "get", "celldfleet", "demo-fleet", "-o", `jsonpath={.status.conditions[?(@.type=="`+c+`")].status}`), c)
	}
}
