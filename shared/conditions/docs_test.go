package conditions

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository, two levels up from this package.
var root = filepath.Join("..", "..")

// TestEveryReasonHasATroubleshootingRow: each condition reason either
// operator's API package declares has a row in docs/troubleshooting.md, so a
// user who sees it in status finds what it means and what to do.
func TestEveryReasonHasATroubleshootingRow(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	require.NoError(t, err)
	documented := DocumentedReasons(string(doc))
	for _, api := range []string{"fleet-operator", "mesh-operator"} {
		declared, err := DeclaredReasons(filepath.Join(root, api, "api", "v1alpha1"))
		require.NoError(t, err)
		// A package that declares none means the reasons moved: this test
		// would then check nothing.
		require.Greater(t, len(declared), 10, "%s declares its condition reasons as %s constants", api, ReasonTypeName)
		assert.Empty(t, Undocumented(declared, documented), "%s reasons without a row in docs/troubleshooting.md", api)
	}
}

func TestDeclaredReasons(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte(`package x
type ConditionReason string
type Other string
const (
	ReasonA ConditionReason = "A"
	ReasonB, ReasonC ConditionReason = "B", "A"
	NotAReason Other = "N"
	untyped = "U"
)
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"), []byte("package x\nconst ReasonT ConditionReason = \"T\"\n"), 0o644))
	got, err := DeclaredReasons(dir)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"A": {"ReasonA", "ReasonC"}, "B": {"ReasonB"}}, got)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.go"), []byte("package x\nconst ReasonD ConditionReason = \"D\" + \"E\"\n"), 0o644))
	_, err = DeclaredReasons(dir)
	assert.ErrorContains(t, err, "must be a string literal")
}

func TestDocumentedReasons(t *testing.T) {
	doc := "text `Prose`\n| condition | reason | what |\n| --- | --- | --- |\n| `Ready=False` | `A` / `B` | see `C` |\n| event `E` | — | x |\n"
	assert.Equal(t, map[string]bool{"A": true, "B": true}, DocumentedReasons(doc), "only code spans in the reason column count")
	assert.Equal(t, []string{"B (ReasonB)"}, Undocumented(map[string][]string{"A": {"ReasonA"}, "B": {"ReasonB"}}, map[string]bool{"A": true}))
}
