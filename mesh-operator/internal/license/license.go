package license

import (
	"slices"
	"time"
)

// Features a license can grant. Other feature names are carried along and
// ignored, so a license issued for other products does not break the mesh.
const (
	// FeatureServiceMesh is the feature that will unlock the mesh once it is GA.
	FeatureServiceMesh = "service-mesh"
	// FeaturePreview opts a cluster into preview features, the mesh among them.
	FeaturePreview = "preview"
)

// License is a verified license document.
type License struct {
	// Version of the document format.
	Version int
	// ID identifies the license for support and renewal requests.
	ID string
	// Licensee is who the license was issued to.
	Licensee string
	// Features granted, as issued (unknown names included).
	Features []string
	// IssuedAt is when the license was signed; informational only.
	IssuedAt time.Time
	// NotBefore is the first instant the license is valid.
	NotBefore time.Time
	// NotAfter is the first instant the license is no longer valid.
	NotAfter time.Time
}

// Has reports whether the license grants feature (exact, case-sensitive
// match: feature names are identifiers, not prose).
func (l *License) Has(feature string) bool {
	return l != nil && slices.Contains(l.Features, feature)
}

// Allows reports whether the license unlocks the ServiceMesh: it must grant
// service-mesh or preview. It does not look at the clock; Verify does.
func (l *License) Allows() bool {
	return l.Has(FeatureServiceMesh) || l.Has(FeaturePreview)
}

// ExpiresAt is when the license stops being valid (the zero time for nil),
// for an expiry gauge or a "renew soon" event.
func (l *License) ExpiresAt() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.NotAfter
}

// ExpiryTimestamp is ExpiresAt in Unix seconds, the usual unit of an expiry
// gauge; 0 when there is no license, so "no license" and "expired" can be
// told apart on a dashboard.
func ExpiryTimestamp(l *License) float64 {
	if l == nil {
		return 0
	}
	return float64(l.NotAfter.Unix())
}

// RecheckInterval is the longest the operator should go without re-reading
// the license. Changes to the Secret should trigger a re-check on their own;
// this bound covers a missed watch event and a clock that was wrong.
const RecheckInterval = 10 * time.Minute

// checkSlack lands the re-check just after a validity boundary rather than
// on it, so the check that follows sees the new state.
const checkSlack = time.Second

// NextCheck is how long the operator may wait before verifying the license
// again: until it becomes valid (not-before), until it expires (not-after),
// capped at RecheckInterval. Pass the license Verify returned or, when
// verification failed, the one carried in its *Error (nil when there is
// none); with no license the answer is RecheckInterval.
func NextCheck(l *License, now time.Time) time.Duration {
	next := RecheckInterval
	if l == nil {
		return next
	}
	var at time.Time
	switch {
	case now.Before(l.NotBefore):
		at = l.NotBefore
	case now.Before(l.NotAfter):
		at = l.NotAfter
	default:
		return next
	}
	// Compare before adding the slack: Sub saturates for far-off instants
	// and adding to the saturated value would overflow.
	if d := at.Sub(now); d < next-checkSlack {
		next = d + checkSlack
	}
	return next
}
