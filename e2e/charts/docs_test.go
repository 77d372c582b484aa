package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestSecurityDocListsRules keeps docs/security.md honest: each operator's
// rule table lists exactly the generated RBAC rules, one row per rule, with
// the same verbs.
func TestSecurityDocListsRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "security.md"))
	require.NoError(t, err)
	doc := string(b)
	for _, tc := range []struct {
		operator, heading, file string
		rules                   []rbacv1.PolicyRule
	}{
		{fleetChart, "### What it may do in a fleet namespace", "role.yaml", generatedRules(t, fleetChart)},
		{meshChart, "### Cluster-wide", "role.yaml", generatedRules(t, meshChart)},
		{meshChart, "### Installing the Sail Operator (sail.install=true)", sailInstallerRole + "/role.yaml", generatedInstallerRules(t)},
	} {
		rows := tableRows(t, doc, tc.operator, tc.heading)
		var want []string
		for _, r := range tc.rules {
			want = append(want, ruleRow(r))
		}
		assert.ElementsMatch(t, want, rows,
			"docs/security.md (%s, %q) must list %s/config/rbac/%s; rows as they should start:\n%s",
			tc.operator, tc.heading, tc.operator, tc.file, strings.Join(want, "\n"))
	}
}

// ruleRow is how the doc's tables start a rule's row.
func ruleRow(r rbacv1.PolicyRule) string {
	groups := make([]string, len(r.APIGroups))
	for i, g := range r.APIGroups {
		if g == "" {
			g = "core"
		}
		groups[i] = "`" + g + "`"
	}
	resources := make([]string, len(r.Resources))
	for i, res := range r.Resources {
		resources[i] = "`" + res + "`"
	}
	res := strings.Join(resources, ", ")
	if len(r.ResourceNames) > 0 {
		names := make([]string, len(r.ResourceNames))
		for i, n := range r.ResourceNames {
			names[i] = "`" + n + "`"
		}
		res += " named " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("| %s | %s | %s |", strings.Join(groups, ", "), res, strings.Join(r.Verbs, ", "))
}

// tableRows returns the first three columns of the table rows under
// heading, up to the next heading.
func tableRows(t *testing.T, doc, operator, heading string) []string {
	t.Helper()
	_, section, found := strings.Cut(doc, "## "+operator+"\n")
	require.True(t, found, "docs/security.md has no section ## %s", operator)
	_, section, found = strings.Cut(section, heading+"\n")
	require.True(t, found, "docs/security.md ## %s has no %q", operator, heading)
	if i := strings.Index(section, "\n#"); i >= 0 {
		section = section[:i]
	}
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		require.GreaterOrEqual(t, len(cells), 4, line)
		rows = append(rows, strings.Join(cells[:3], " | ")+" |")
	}
	require.NotEmpty(t, rows, "no rule rows under %q", heading)
	return rows
}
