// Package conditions holds what both operators' status vocabularies share:
// the kstatus summary (Reconciling/Stalled) and the check that every
// condition reason an API package declares is explained in
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

// ReasonTypeName is the name each API package gives its reason type; the
// documentation check finds the reasons by it, so a reason declared with
// that type cannot be forgotten in a hand-kept list.
const ReasonTypeName = "ConditionReason"

// DeclaredReasons returns the string constants of type ReasonTypeName
// declared in the Go package in dir (tests excluded), by value, with the
// constant names that carry it.
func DeclaredReasons(dir string) (map[string][]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	out := map[string][]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				if err := addReasons(fset, spec.(*ast.ValueSpec), out); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

func addReasons(fset *token.FileSet, vs *ast.ValueSpec, out map[string][]string) error {
	id, ok := vs.Type.(*ast.Ident)
	if !ok || id.Name != ReasonTypeName {
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
