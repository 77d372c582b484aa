package labels_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// keyLike matches a qualified label or annotation key: a DNS prefix with at
// least one dot, a slash, and a name ("core.navique.com/mesh",
// "sidecar.istio.io/inject", "app.kubernetes.io/name").
var keyLike = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)

// notKeys are key-shaped literals that are not label or annotation keys:
// Go import paths, API versions (group/v1) and CIDRs.
var notKeys = regexp.MustCompile(`^(github\.com|sigs\.k8s\.io|k8s\.io|golang\.org|go\.uber\.org|gopkg\.in)/|/v[0-9]+(alpha[0-9]+|beta[0-9]+)?$|^[0-9.]+/[0-9]+$`)

// foreignNames are key-shaped names other projects define that are not
// labels or annotations, with where they belong.
var foreignNames = map[string]string{
	"sailoperator.io/sail-operator": "the Sail controller's finalizer, part of the Sail API mirror in mesh-operator/internal/sail",
}

// TestKeysAreSpelledOnlyHere: shared/labels is the one place that spells a
// label or annotation key. Every string literal in the operators' product
// code (tests excluded: they check the contract as a user sees it) that looks
// like a qualified key fails this test, naming the file and line.
func TestKeysAreSpelledOnlyHere(t *testing.T) {
	checked := 0
	for _, module := range []string{"../../fleet-operator", "../../mesh-operator", ".."} {
		if _, err := os.Stat(module); err != nil {
			t.Fatalf("%s: %v (this test runs inside the monorepo)", module, err)
		}
		err := filepath.WalkDir(module, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
				strings.HasPrefix(d.Name(), "zz_generated") || filepath.Base(filepath.Dir(path)) == "labels" {
				return nil
			}
			checked++
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(file, func(n ast.Node) bool {
				if _, isImport := n.(*ast.ImportSpec); isImport {
					return false
				}
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				v, err := strconv.Unquote(lit.Value)
				if _, foreign := foreignNames[v]; err == nil && keyLike.MatchString(v) && !notKeys.MatchString(v) && !foreign {
					t.Errorf("%s: %q looks like a label or annotation key; define it in shared/labels", fset.Position(lit.Pos()), v)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 20 {
		t.Fatalf("only %d files checked: the walk missed the operators' code", checked)
	}
}
