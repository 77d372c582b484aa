package roll

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func member(ordinal int, rev string, ready, healthy bool) Member {
	return Member{Name: "f-" + string(rune('0'+ordinal)), Ordinal: ordinal, Revision: rev, Ready: ready, Healthy: healthy}
}

func TestNext(t *testing.T) {
	terminating := member(2, "old", true, true)
	terminating.Terminating = true
	tests := []struct {
		name        string
		in          Input
		wantReplace string
		wantWaiting bool
		wantRolling bool
	}{
		{
			name: "all on target: nothing to do",
			in:   Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "new", true, true), member(1, "new", true, true), member(2, "new", true, true)}},
		},
		{
			name:        "all available: highest outdated ordinal first",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", true, true), member(2, "old", true, true)}},
			wantReplace: "f-2", wantRolling: true,
		},
		{
			name:        "replacement not Ready yet: wait",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", true, true), member(2, "new", false, false)}},
			wantWaiting: true, wantRolling: true,
		},
		{
			name:        "replacement Ready but unhealthy on /state: wait",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", true, true), member(2, "new", true, false)}},
			wantWaiting: true, wantRolling: true,
		},
		{
			name:        "replacement healthy: next one",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", true, true), member(2, "new", true, true)}},
			wantReplace: "f-1", wantRolling: true,
		},
		{
			name:        "deleted member not recreated yet: wait",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", true, true)}},
			wantWaiting: true, wantRolling: true,
		},
		{
			name:        "deleted member still terminating: wait, never a second one",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", true, true), terminating}},
			wantWaiting: true, wantRolling: true,
		},
		{
			name:        "the only unavailable member is outdated: replace it first",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", false, false), member(2, "old", true, true)}},
			wantReplace: "f-1", wantRolling: true,
		},
		{
			name:        "an updated member is unavailable: wait even though others are outdated",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "new", false, false), member(2, "new", true, true)}},
			wantWaiting: true, wantRolling: true,
		},
		{
			name:        "two unavailable: wait",
			in:          Input{Replicas: 3, TargetRevision: "new", Members: []Member{member(0, "old", false, false), member(1, "old", true, false), member(2, "old", true, true)}},
			wantWaiting: true, wantRolling: true,
		},
		{
			name:        "paused: never replace",
			in:          Input{Replicas: 3, TargetRevision: "new", Paused: true, Members: []Member{member(0, "old", true, true), member(1, "old", true, true), member(2, "old", true, true)}},
			wantWaiting: true, wantRolling: true,
		},
		{
			name:        "scaling down with extra members: still one at a time",
			in:          Input{Replicas: 2, TargetRevision: "new", Members: []Member{member(0, "old", true, true), member(1, "old", true, true), member(2, "old", true, true)}},
			wantReplace: "f-2", wantRolling: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Next(tc.in)
			assert.Equal(t, tc.wantReplace, d.Replace)
			assert.Equal(t, tc.wantWaiting, d.Waiting != "", "waiting: %q", d.Waiting)
			assert.Equal(t, tc.wantRolling, d.Rolling())
		})
	}
}
