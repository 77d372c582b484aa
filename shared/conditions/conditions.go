// Package conditions holds what both operators' status vocabularies share:
// the kstatus summary (Reconciling/Stalled) and the check that every
// condition and event reason an API package declares is explained in
// docs/troubleshooting.md.
package conditions

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ReasonTypeName and EventReasonTypeName are the names each API package
// gives its condition and event reason types; the documentation check finds
// the reasons by them, so a reason declared with either type cannot be
// forgotten in a hand-kept list.
const (
	ReasonTypeName      = "ConditionReason"
	EventReasonTypeName = "EventReason"
)

// DeclaredReasons returns the string constants of type typeName declared
// in the Go package in dir (tests excluded), by value, with the constant
// names that carry it.
func DeclaredReasons(dir, typeName string) (map[string][]string, error) {
	fset, files, err := parsePackage(dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				if err := addReasons(fset, spec.(*ast.ValueSpec), typeName, out); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

func addReasons(fset *token.FileSet, vs *ast.ValueSpec, typeName string, out map[string][]string) error {
	id, ok := vs.Type.(*ast.Ident)
	if !ok || id.Name != typeName {
		return nil
	}
	if len(vs.Values) != len(vs.Names) {
		return fmt.Errorf("%s: reason constants must each have an explicit value", fset.Position(vs.Pos()))
	}
	for i, n := range vs.Names {
		lit, ok := vs.Values[i].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return fmt.Errorf("%s: reason %s must be a string literal", fset.Position(n.Pos()), n.Name)
		}
		v, err := strconv.Unquote(lit.Value)
		if err != nil {
			return err
		}
		out[v] = append(out[v], n.Name)
	}
	return nil
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// DocumentedReasons returns the reasons a troubleshooting page explains: the
// code spans in the reason column (the second) of its table rows.
func DocumentedReasons(markdown string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(markdown, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(line, "|")
		// "| a | b | ..." splits into "", " a ", " b ", ...
		if len(cells) < 4 {
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[2], -1) {
			out[m[1]] = true
		}
	}
	return out
}

// Undocumented lists, sorted, the declared reasons (value and constant
// names) that the page does not explain.
func Undocumented(declared map[string][]string, documented map[string]bool) []string {
	var out []string
	for v, names := range declared {
		if !documented[v] {
			out = append(out, fmt.Sprintf("%s (%s)", v, strings.Join(names, ", ")))
		}
	}
	sort.Strings(out)
	return out
}

// LiteralEventReasons lists the events the Go package in dir (tests
// excluded) records with a string literal as reason: the reason argument of
// an Eventf(regarding, related, type, reason, ...) call. Those bypass the
// EventReason constants, and with them the documentation check.
func LiteralEventReasons(dir string) ([]string, error) {
	fset, files, err := parsePackage(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 4 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Eventf" {
				return true
			}
			if lit, ok := call.Args[3].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				out = append(out, fmt.Sprintf("%s: %s", fset.Position(lit.Pos()), lit.Value))
			}
			return true
		})
	}
	return out, nil
}

// parsePackage parses the Go files of the package in dir, tests excluded.
func parsePackage(dir string) (*token.FileSet, []*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	return fset, files, nil
}
