package license

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

// Reason says why a license does not unlock the mesh: one of the
// ServiceMesh's PreviewLocked condition reasons, declared (and documented)
// with the rest of its vocabulary in the API package.
type Reason = v1alpha1.ConditionReason

const (
	ReasonValid          = v1alpha1.ReasonLicenseValid
	ReasonMissing        = v1alpha1.ReasonLicenseMissing
	ReasonMalformed      = v1alpha1.ReasonLicenseMalformed
	ReasonBadSignature   = v1alpha1.ReasonLicenseBadSignature
	ReasonExpired        = v1alpha1.ReasonLicenseExpired
	ReasonNotYetValid    = v1alpha1.ReasonLicenseNotYetValid
	ReasonFeatureMissing = v1alpha1.ReasonLicenseFeatureMissing
)

// Error is why a license was refused. Its message is written for the person
// reading the ServiceMesh status, and says what to do about it.
type Error struct {
	Reason  Reason
	Message string
	// License is the signed license when the signature held but the
	// license is not usable now (Expired, NotYetValid, FeatureMissing);
	// nil otherwise. It lets the caller schedule NextCheck and export the
	// expiry, while Verify itself still returns a nil *License.
	License *License
	// Err is the underlying cause, if any (a JSON or base64 error).
	Err error
}

func (e *Error) Error() string { return e.Message }

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrExpired) and friends match on the reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.License == nil && t.Err == nil && t.Reason == e.Reason
}

// Sentinels for errors.Is; each matches any *Error with the same Reason.
var (
	ErrMissing        error = &Error{Reason: ReasonMissing}
	ErrMalformed      error = &Error{Reason: ReasonMalformed}
	ErrBadSignature   error = &Error{Reason: ReasonBadSignature}
	ErrExpired        error = &Error{Reason: ReasonExpired}
	ErrNotYetValid    error = &Error{Reason: ReasonNotYetValid}
	ErrFeatureMissing error = &Error{Reason: ReasonFeatureMissing}
)

// ReasonOf maps the result of Verify to a condition reason: ReasonValid for
// nil, the *Error's reason, and ReasonMalformed for any other error (which
// Verify does not return, but a caller may pass one through).
func ReasonOf(err error) Reason {
	if err == nil {
		return ReasonValid
	}
	var le *Error
	if errors.As(err, &le) && le.Reason != "" {
		return le.Reason
	}
	return ReasonMalformed
}

// SignedLicense returns l, or the signed-but-unusable license carried by
// err: the license NextCheck and ExpiryTimestamp should look at.
func SignedLicense(l *License, err error) *License {
	if l != nil {
		return l
	}
	var le *Error
	if errors.As(err, &le) {
		return le.License
	}
	return nil
}

// malformed builds a ReasonMalformed error. detail must not carry unbounded
// attacker-controlled text: the message ends up in the object's status.
func malformed(cause error, format string, args ...any) *Error {
	return &Error{
		Reason: ReasonMalformed,
		Message: "license is malformed: " + fmt.Sprintf(format, args...) +
			"; the Secret must hold the license file exactly as issued",
		Err: cause,
	}
}

// unreadable builds a ReasonMalformed error whose message already says
// what to do, without the generic advice malformed appends.
func unreadable(cause error, format string, args ...any) *Error {
	return &Error{Reason: ReasonMalformed, Message: "license is malformed: " + fmt.Sprintf(format, args...), Err: cause}
}

// causeText renders a parser error for a message, clipped so that a huge
// field name in a hostile file cannot bloat the status.
func causeText(err error) string {
	return clip(err.Error(), 160)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// when renders a validity boundary: a bare date at midnight UTC (how
// licenses are normally issued), the full instant otherwise.
func when(t time.Time) string {
	t = t.UTC()
	if t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0 {
		return t.Format(time.DateOnly)
	}
	return t.Format(time.RFC3339)
}

// describe names a license in messages: its ID and licensee, so a support
// request can quote it.
func describe(l *License) string {
	return fmt.Sprintf("license %q for %q", l.ID, l.Licensee)
}

func expiredError(l *License) *Error {
	return &Error{
		Reason: ReasonExpired,
		Message: fmt.Sprintf("%s expired on %s; request a renewal and put the new license file in the license Secret "+
			"(no restart needed; the operator re-checks it)", describe(l), when(l.NotAfter)),
		License: l,
	}
}

// notYetValidError leaves the current time out of the message on purpose:
// the message goes into status, and a message that changes on every
// re-check would rewrite the object each time.
func notYetValidError(l *License) *Error {
	return &Error{
		Reason: ReasonNotYetValid,
		Message: fmt.Sprintf("%s is not valid until %s; the operator re-checks at that time, "+
			"nothing to do unless the cluster clock is wrong", describe(l), when(l.NotBefore)),
		License: l,
	}
}

func featureMissingError(l *License) *Error {
	has := "no features"
	if len(l.Features) > 0 {
		has = "features: " + strings.Join(l.Features, ", ")
	}
	return &Error{
		Reason: ReasonFeatureMissing,
		Message: fmt.Sprintf("%s does not grant %q or %q (it has %s); the service mesh is a preview, "+
			"request a license with one of those features", describe(l), FeatureServiceMesh, FeaturePreview, has),
		License: l,
	}
}
