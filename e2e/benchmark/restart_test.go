package benchmark

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLastFleetRead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	fleets := map[string][]string{"a/f": {"127.0.0.1", "127.0.0.2"}, "b/f": {"127.0.0.3"}}
	for _, tc := range []struct {
		name  string
		reads map[string]time.Time
		want  time.Time
		ok    bool
	}{
		{"nothing read", map[string]time.Time{}, time.Time{}, false},
		{"one fleet's member missing", map[string]time.Time{"127.0.0.1": at(1), "127.0.0.3": at(2)}, time.Time{}, false},
		{"every member read: the latest read", map[string]time.Time{"127.0.0.1": at(3), "127.0.0.2": at(1), "127.0.0.3": at(2)}, at(3), true},
		{"reads of other members do not count", map[string]time.Time{"127.0.0.1": at(1), "127.0.0.2": at(1), "127.0.0.3": at(2), "127.0.0.9": at(9)}, at(2), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := lastFleetRead(fleets, tc.reads)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("lastFleetRead = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestLogLineTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "operator.log")
	before := `{"level":"info","ts":"2026-12-04T07:00:00.100000000Z","msg":"Starting workers","controller":"celldfleet"}` + "\n"
	lines := before +
		`{"level":"info","ts":"2026-12-04T07:00:01.250000000Z","msg":"Starting EventSource","controller":"celldfleet"}` + "\n" +
		`{"level":"info","ts":"2026-12-04T07:00:02.123456789Z","msg":"Starting workers","controller":"celldfleet","worker count":8}` + "\n"
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	at, found, err := logLineTime(path, int64(len(before)), `"Starting workers"`, "celldfleet")
	want := time.Date(2026, 12, 4, 7, 0, 2, 123456789, time.UTC)
	if err != nil || !found || !at.Equal(want) {
		t.Errorf("after the offset: %v, %v, %v; want %v (the earlier process's line is before the offset)", at, found, err, want)
	}
	if _, found, err := logLineTime(path, int64(len(before)), `"Starting workers"`, "meshcontroller"); found || err != nil {
		t.Errorf("no such line: found %v, err %v", found, err)
	}
	notJSON := filepath.Join(t.TempDir(), "text.log")
	if err := os.WriteFile(notJSON, []byte("INFO Starting workers celldfleet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := logLineTime(notJSON, 0, "Starting workers"); err == nil {
		t.Error("a line that is not JSON: want an error, not a guessed time")
	}
}
