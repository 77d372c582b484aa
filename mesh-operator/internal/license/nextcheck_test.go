package license

import (
	"testing"
	"time"
)

func TestNextCheck(t *testing.T) {
	l := baseLicense()
	tests := []struct {
		name string
		l    *License
		at   time.Time
		want time.Duration
	}{
		{"no license", nil, now, RecheckInterval},
		{"valid, far from expiry", &l, now, RecheckInterval},
		{"valid, expiring soon", &l, l.NotAfter.Add(-5 * time.Minute), 5*time.Minute + checkSlack},
		{"valid, expiring now-ish", &l, l.NotAfter.Add(-time.Nanosecond), time.Nanosecond + checkSlack},
		{"not yet valid, soon", &l, l.NotBefore.Add(-time.Minute), time.Minute + checkSlack},
		{"not yet valid, far", &l, l.NotBefore.Add(-48 * time.Hour), RecheckInterval},
		{"at notBefore: wait for expiry", &l, l.NotBefore, RecheckInterval},
		{"at notAfter: expired", &l, l.NotAfter, RecheckInterval},
		{"expired long ago", &l, l.NotAfter.Add(1000 * time.Hour), RecheckInterval},
		{"year 9999 does not overflow", &License{NotBefore: l.NotBefore, NotAfter: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}, now, RecheckInterval},
		{"year 0 notBefore does not overflow", &License{NotBefore: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: l.NotAfter}, now, RecheckInterval},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextCheck(tc.l, tc.at); got != tc.want {
				t.Fatalf("NextCheck = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNextCheckLandsAfterTheBoundary re-verifies at the instant NextCheck
// named and expects the state to have changed.
func TestNextCheckLandsAfterTheBoundary(t *testing.T) {
	pub, priv := testKeyPair(1)
	lic := baseLicense()
	lic.NotAfter = now.Add(3 * time.Minute)
	raw := mint(t, lic, priv)
	keys := append(ReleaseKeys(), pub)
	l, err := Verify(raw, keys, now)
	if err != nil {
		t.Fatal(err)
	}
	next := now.Add(NextCheck(l, now))
	if _, err := Verify(raw, keys, next); ReasonOf(err) != ReasonExpired {
		t.Fatalf("at %s the license should be expired, got %v", next, err)
	}

	lic = baseLicense()
	lic.NotBefore = now.Add(90 * time.Second)
	raw = mint(t, lic, priv)
	_, err = Verify(raw, keys, now)
	if ReasonOf(err) != ReasonNotYetValid {
		t.Fatalf("got %v", err)
	}
	next = now.Add(NextCheck(SignedLicense(nil, err), now))
	if _, err := Verify(raw, keys, next); err != nil {
		t.Fatalf("at %s the license should be valid, got %v", next, err)
	}
}
