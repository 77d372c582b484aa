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

// chartVersion is the version in the chart's Chart.yaml.
func chartVersion(t *testing.T, chart string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t, chart), "Chart.yaml"))
	require.NoError(t, err)
	var meta struct{ Version string }
	require.NoError(t, yaml.Unmarshal(b, &meta))
	require.NotEmpty(t, meta.Version)
	return meta.Version
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", name))
	require.NoError(t, err)
	return string(b)
}

// section returns the text of "## title" up to the next "## ".
func section(t *testing.T, doc, title string) string {
	t.Helper()
	_, s, ok := strings.Cut(doc, "\n## "+title+"\n")
	require.True(t, ok, "no section ## %s", title)
	if i := strings.Index(s, "\n## "); i >= 0 {
		s = s[:i]
	}
	return s
}

// TestInstallDocUsesReleasedCharts: docs/install.md installs each operator
// from its OCI chart at the version in Chart.yaml (so a release that bumps
// the chart bumps the docs), and says how to uninstall in an order that
// lets the operators finish their finalizers.
func TestInstallDocUsesReleasedCharts(t *testing.T) {
	doc := readDoc(t, "install.md")
	for _, chart := range []string{fleetChart, meshChart} {
		want := "helm install " + chart + " oci://ghcr.io/ericdev/charts/" + chart + " --version " + chartVersion(t, chart)
		assert.Contains(t, doc, want)
	}
	assert.NotRegexp(t, regexp.MustCompile(`helm (install|upgrade) \S+ charts/`), doc, "install from the released charts (a clone's charts/ only as the alternative)")

	un := section(t, doc, "Uninstalling")
	order := []string{"kubectl delete servicemesh", "kubectl wait --for=delete servicemesh", "kubectl delete celldfleets",
		"kubectl wait --for=delete celldfleets", "helm uninstall mesh-operator", "helm uninstall fleet-operator"}
	last := -1
	for _, step := range order {
		i := strings.Index(un, step)
		require.GreaterOrEqual(t, i, 0, "## Uninstalling has no %q", step)
		assert.Greater(t, i, last, "## Uninstalling: %q comes after the step before it", step)
		last = i
	}
	for _, fin := range []string{"core.navique.com/control-plane", "celld.eric.dev/namespace-declarations"} {
		assert.Contains(t, un, fin, "the finalizer a premature uninstall strands is named")
	}
	assert.Contains(t, section(t, doc, "Upgrading"), "--version", "upgrades name the chart version too")
}

// TestTroubleshootingCoversOperators: docs/troubleshooting.md says how to
// look at the operators themselves.
func TestTroubleshootingCoversOperators(t *testing.T) {
	s := section(t, readDoc(t, "troubleshooting.md"), "The operators themselves")
	for _, want := range []string{
		"kubectl -n fleet-system logs deploy/fleet-operator", "kubectl -n mesh-system logs deploy/mesh-operator",
		"logLevel=debug", "forbidden", "rbac.create", "kubectl -n fleet-system get lease fleet-operator.celld.eric.dev",
		"mesh-operator.core.navique.com", "holderIdentity", "--version",
	} {
		assert.Contains(t, s, want)
	}
}

// docURL is how NOTES link documentation: the repository at the chart's
// release tag, so the text matches the installed version.
var docURL = regexp.MustCompile(`https://(?:github\.com/ericdev/fleetmesh/blob|raw\.githubusercontent\.com/ericdev/fleetmesh)/([a-z-]+)/v([0-9][^/]*)/(\S+?)[).,]?(?:\s|$)`)

// TestNotesLinkVersionedDocs: the NOTES of both charts (with every block
// shown) link documentation at the release tag of the installed chart,
// never a path in a clone (docs/..., CHANGELOG.md), and every link names a
// file that exists.
func TestNotesLinkVersionedDocs(t *testing.T) {
	for _, chart := range []string{fleetChart, meshChart} {
		dir := filepath.Join(t.TempDir(), chart)
		require.NoError(t, os.CopyFS(dir, os.DirFS(chartDir(t, chart))))
		if chart == fleetChart {
			// Show the restarts block too.
			require.NoError(t, os.WriteFile(filepath.Join(dir, "files", "restarts-members.txt"), []byte("- Every fleet: members gain a label\n"), 0o644))
		}
		for _, set := range [][]string{nil, {"--set", "crds.install=false"}} {
			out, err := runHelm(t, append([]string{"install", chart, dir, "--namespace", "ops", "--dry-run=client"}, set...)...)
			require.NoError(t, err)
			_, text, ok := strings.Cut(out, "NOTES:\n")
			require.True(t, ok)
			links := docURL.FindAllStringSubmatch(text, -1)
			assert.NotEmpty(t, links, "%s NOTES link no documentation:\n%s", chart, text)
			for _, l := range links {
				assert.Equal(t, chart, l[1], "%s: the link names the chart's own release tag: %s", chart, l[0])
				assert.Equal(t, chartVersion(t, chart), l[2], "%s: %s", chart, l[0])
				_, err := os.Stat(filepath.Join(repoRoot(t), strings.SplitN(l[3], "#", 2)[0]))
				assert.NoError(t, err, "%s links a file that does not exist: %s", chart, l[0])
			}
			rest := docURL.ReplaceAllString(text, " ")
			assert.NotRegexp(t, regexp.MustCompile(`(^|[\s(])(docs/|CHANGELOG\.md)`), rest, "%s NOTES name a repository path:\n%s", chart, text)
		}
	}
}
