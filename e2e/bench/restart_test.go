package main

import (
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
