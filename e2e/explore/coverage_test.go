package explore

import (
	"path/filepath"
	"sort"
	"testing"
)

// TestCheckedInSetPlaysTheAlphabet: the sequences make test runs
// (testdata/regressions and testdata/scenarios, TestExplore) play every
// action of the alphabet at least once, and there are regressions to run.
// A new action comes with a scenario that plays it.
func TestCheckedInSetPlaysTheAlphabet(t *testing.T) {
	played := map[string][]string{}
	for _, dir := range []string{"regressions", "scenarios"} {
		files, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("testdata/%s holds no sequence: make test would judge nothing from it", dir)
		}
		for _, f := range files {
			seq, err := ReadSequence(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(seq.Actions) == 0 {
				t.Errorf("%s plays no action", f)
			}
			for _, a := range seq.Actions {
				played[a.Kind] = append(played[a.Kind], filepath.Base(f))
			}
		}
	}
	var never []string
	for _, a := range alphabet {
		if len(played[a.kind]) == 0 {
			never = append(never, a.kind)
		}
	}
	sort.Strings(never)
	if len(never) > 0 {
		t.Fatalf("the checked-in sequences never play %v: add a scenario under testdata/scenarios that does", never)
	}
}
