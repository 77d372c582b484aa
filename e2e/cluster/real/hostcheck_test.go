package real

import "testing"

func TestDiff(t *testing.T) {
	d := Diff(HostState{"a": "1", "m": "x\ny", "gone": "1"}, HostState{"a": "2", "m": "x\nz", "new": "1"})
	want := []string{"a: 1 -> 2", "gone: gone (was 1)", "m: + z", "m: - y", "new: new (1)"}
	if len(d) != len(want) {
		t.Fatalf("got %q, want %q", d, want)
	}
	for i := range want {
		if d[i] != want[i] {
			t.Errorf("got %q, want %q", d, want)
		}
	}
}
