// Package roll decides, from what the cluster shows right now, whether one
// member may be replaced and which. It keeps no memory of its own: after an
// operator restart the same observations give the same decision, so a roll
// resumes where it stopped and never replaces a member twice.
package roll

import (
	"fmt"
	"sort"
	"strings"
)

// Member is one observed member Pod.
type Member struct {
	Name    string
	Ordinal int
	// Revision is the StatefulSet revision the Pod was created from.
	Revision string
	// Terminating is true once the Pod has a deletion timestamp.
	Terminating bool
	// Ready is the Pod's Ready condition.
	Ready bool
	// Healthy is the member's own verdict on /state (false when unreadable).
	Healthy bool
}

// Available is a member that serves: Ready, healthy and not on its way out.
func (m Member) Available() bool { return m.Ready && m.Healthy && !m.Terminating }

// Input is everything a decision depends on.
type Input struct {
	// Replicas the StatefulSet wants.
	Replicas int
	// TargetRevision is the StatefulSet's update revision.
	TargetRevision string
	// Members are the Pods that exist now.
	Members []Member
	// Paused forbids any replacement (spec.maintenance.paused).
	Paused bool
}

// Decision is the one step to take now.
type Decision struct {
	// Replace names the member to delete so that the StatefulSet recreates
	// it from TargetRevision; empty when nothing is to be done now.
	Replace string
	// Outdated counts members not yet on TargetRevision.
	Outdated int
	// Waiting explains why an outdated member is not replaced now.
	Waiting string
}

// Rolling reports whether members still have to move to the target revision.
func (d Decision) Rolling() bool { return d.Outdated > 0 }

// Next returns the next step of a roll. It replaces at most one member, and
// only when doing so cannot make more than one member unavailable:
//   - every member is present and available: replace the highest outdated
//     ordinal (the StatefulSet convention);
//   - exactly one member is unavailable and it is outdated: replace it, since
//     it serves nothing now and its replacement may fix it (a bad image that
//     a new spec corrects must not block the roll forever);
//   - anything else: wait.
func Next(in Input) Decision {
	var outdated, unavailable []Member
	for _, m := range in.Members {
		if m.Revision != in.TargetRevision {
			outdated = append(outdated, m)
		}
		if !m.Available() {
			unavailable = append(unavailable, m)
		}
	}
	d := Decision{Outdated: len(outdated)}
	if len(outdated) == 0 {
		return d
	}
	if in.Paused {
		d.Waiting = "maintenance is paused"
		return d
	}
	missing := in.Replicas - len(in.Members)
	if missing < 0 {
		missing = 0 // scaling down: the StatefulSet removes the extra members
	}
	switch {
	case missing > 0:
		d.Waiting = fmt.Sprintf("%d member(s) not created yet", missing)
	case len(unavailable) == 0:
		d.Replace = highestOrdinal(outdated).Name
	case len(unavailable) == 1 && unavailable[0].Revision != in.TargetRevision && !unavailable[0].Terminating:
		d.Replace = unavailable[0].Name
	default:
		d.Waiting = fmt.Sprintf("waiting for %s to be Ready and healthy", describe(unavailable))
	}
	return d
}

func highestOrdinal(ms []Member) Member {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Ordinal > ms[j].Ordinal })
	return ms[0]
}

func describe(ms []Member) string {
	names := make([]string, 0, len(ms))
	for _, m := range ms {
		switch {
		case m.Terminating:
			names = append(names, m.Name+" (terminating)")
		case !m.Ready:
			names = append(names, m.Name+" (not Ready)")
		default:
			names = append(names, m.Name+" (unhealthy on /state)")
		}
	}
	sort.Strings(names)
	if len(names) > 3 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
	}
	return strings.Join(names, ", ")
}
