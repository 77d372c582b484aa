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

// TestEveryReasonHasATroubleshootingRow: each condition and event reason
// either operator's API package declares has a row in
// docs/troubleshooting.md, so a user who sees it in status or in
// `kubectl describe` finds what it means and what to do; and no controller
// records an event whose reason is a literal, outside that check.
func TestEveryReasonHasATroubleshootingRow(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	require.NoError(t, err)
	documented := DocumentedReasons(string(doc))
	for _, api := range []string{"fleet-operator", "mesh-operator"} {
		for typeName, least := range map[string]int{ReasonTypeName: 10, EventReasonTypeName: 4} {
			declared, err := DeclaredReasons(filepath.Join(root, api, "api", "v1alpha1"), typeName)
			require.NoError(t, err)
			// A package that declares (almost) none means the reasons
			// moved: this test would then check nothing.
			require.GreaterOrEqual(t, len(declared), least, "%s declares its reasons as %s constants", api, typeName)
			assert.Empty(t, Undocumented(declared, documented), "%s %s values without a row in docs/troubleshooting.md", api, typeName)
		}
		literal, err := LiteralEventReasons(filepath.Join(root, api, "internal", "controller"))
		require.NoError(t, err)
		assert.Empty(t, literal, "%s records events with a literal reason; declare it as an %s", api, EventReasonTypeName)
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
	got, err := DeclaredReasons(dir, ReasonTypeName)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"A": {"ReasonA", "ReasonC"}, "B": {"ReasonB"}}, got)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.go"), []byte("package x\nconst ReasonD ConditionReason = \"D\" + \"E\"\n"), 0o644))
	_, err = DeclaredReasons(dir, ReasonTypeName)
	assert.ErrorContains(t, err, "must be a string literal")
}

func TestDocumentedReasons(t *testing.T) {
	doc := "text `Prose`\n| condition | reason | what |\n| --- | --- | --- |\n| `Ready=False` | `A` / `B` | see `C` |\n| event `E` | — | x |\n"
	assert.Equal(t, map[string]bool{"A": true, "B": true}, DocumentedReasons(doc), "only code spans in the reason column count")
	assert.Equal(t, []string{"B (ReasonB)"}, Undocumented(map[string][]string{"A": {"ReasonA"}, "B": {"ReasonB"}}, map[string]bool{"A": true}))
}

func TestLiteralEventReasons(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.go"), []byte(`package x
const R = "Named"
func f(r recorder) {
	r.Eventf(nil, nil, "Normal", "Literal", "Apply", "%s", "x")
	r.Eventf(nil, nil, "Normal", R, "Apply", "note")
	r.Eventf(nil, nil, "Normal", string(R), "Apply", "note")
	other("a", "b", "c", "NotAnEvent")
}
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"), []byte("package x\nfunc g(r recorder) { r.Eventf(nil, nil, \"Normal\", \"InTest\", \"A\", \"n\") }\n"), 0o644))
	got, err := LiteralEventReasons(dir)
	require.NoError(t, err)
	require.Len(t, got, 1, "only the literal reason outside tests: %v", got)
	assert.Contains(t, got[0], `"Literal"`)
	assert.Contains(t, got[0], "a.go:4")
}
