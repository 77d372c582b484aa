// Package golden compares builder output with YAML files under testdata/.
// Run a package's tests with -update to rewrite the files after an intended
// change, then review the diff like any other code change.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/ with the current output")

// AssertYAML marshals objs (one YAML document each) and compares the result
// with testdata/NAME.golden.yaml.
func AssertYAML(t testing.TB, name string, objs ...any) {
	t.Helper()
	var got []byte
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatalf("marshal object %d for %s: %v", i, name, err)
		}
		if i > 0 {
			got = append(got, []byte("---\n")...)
		}
		got = append(got, b...)
	}
	AssertFile(t, name+".golden.yaml", got)
}

// AssertText compares got with testdata/NAME.golden, a text file such as a
// planner's sequence log (one line per step).
func AssertText(t testing.TB, name, got string) {
	t.Helper()
	AssertFile(t, name+".golden", []byte(got))
}

// Updating says whether this run rewrites the golden files (-update), for a
// test that must compute something else first when it does.
func Updating() bool { return *update }

// AssertFile compares got with testdata/NAME byte for byte; with -update it
// writes got there instead.
func AssertFile(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run the test with -update to create it): %v", path, err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs from the golden file (-want +got); rerun with -update if the change is intended:\n%s", path, diff)
	}
}
