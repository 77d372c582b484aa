package license

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	pub, priv := testKeyPair(1)
	otherPub, otherPriv := testKeyPair(2)
	keys := []ed25519.PublicKey{pub}

	with := func(mod func(*License)) []byte {
		l := baseLicense()
		mod(&l)
		return mint(t, l, priv)
	}
	good := mint(t, baseLicense(), priv)
	var env map[string]any
	if err := json.Unmarshal(good, &env); err != nil {
		t.Fatal(err)
	}
	reenvelope := func(mod func(map[string]any)) []byte {
		e := map[string]any{}
		for k, v := range env {
			e[k] = v
		}
		mod(e)
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	payload, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
	sig, _ := base64.StdEncoding.DecodeString(env["signature"].(string))
	flipped := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		return c
	}
	validDoc := string(payload)
	// A document with too many features, signed: Sign refuses to make it.
	many := make([]string, maxFeatures+1)
	for i := range many {
		many[i] = `"f"`
	}
	tooManyFeatures := strings.Replace(validDoc, `"features":["service-mesh"]`, `"features":[`+strings.Join(many, ",")+`]`, 1)

	tests := []struct {
		name   string
		raw    []byte
		keys   []ed25519.PublicKey
		at     time.Time
		reason Reason // ReasonValid: accepted
		msg    string // substring the message must contain
	}{
		{name: "valid service-mesh", raw: good, reason: ReasonValid},
		{name: "valid preview", raw: with(func(l *License) { l.Features = []string{FeaturePreview} }), reason: ReasonValid},
		{name: "other features ignored", raw: with(func(l *License) { l.Features = []string{"observability", FeatureServiceMesh, "x"} }), reason: ReasonValid},
		{name: "valid from notBefore exactly", raw: good, at: baseLicense().NotBefore, reason: ReasonValid},
		{name: "second trusted key", raw: mint(t, baseLicense(), otherPriv), keys: []ed25519.PublicKey{pub, otherPub}, reason: ReasonValid},
		{name: "surrounding whitespace", raw: append(append([]byte("\n  "), good...), "\n\n"...), reason: ReasonValid},

		{name: "empty", raw: nil, reason: ReasonMalformed, msg: "empty"},
		{name: "whitespace", raw: []byte(" \n"), reason: ReasonMalformed, msg: "not a license file"},
		{name: "not json", raw: []byte("hello"), reason: ReasonMalformed, msg: "not a license file"},
		{name: "json null", raw: []byte("null"), reason: ReasonMalformed, msg: "not a JSON object"},
		{name: "json array", raw: []byte("[]"), reason: ReasonMalformed, msg: "not a license file"},
		{name: "too large", raw: append(bytes.Clone(good), bytes.Repeat([]byte(" "), MaxSize)...), reason: ReasonMalformed, msg: "limit"},
		{name: "trailing data", raw: append(bytes.Clone(good), "{}"...), reason: ReasonMalformed, msg: "after the JSON object"},
		{name: "two licenses", raw: append(bytes.Clone(good), good...), reason: ReasonMalformed},
		{name: "unknown envelope field", raw: reenvelope(func(e map[string]any) { e["kid"] = "x" }), reason: ReasonMalformed, msg: "unknown field"},
		{name: "duplicate envelope field", raw: bytes.Replace(good, []byte(`"version": 1,`), []byte(`"version": 1, "version": 1,`), 1), reason: ReasonMalformed, msg: "duplicate field"},
		{name: "differently-cased envelope field", raw: bytes.Replace(good, []byte(`"payload"`), []byte(`"Payload"`), 1), reason: ReasonMalformed, msg: "unknown field"},
		{name: "version missing", raw: reenvelope(func(e map[string]any) { delete(e, "version") }), reason: ReasonMalformed, msg: `"version" field is missing`},
		{name: "version 2", raw: reenvelope(func(e map[string]any) { e["version"] = 2 }), reason: ReasonMalformed, msg: "upgrade the operator"},
		{name: "version as string", raw: reenvelope(func(e map[string]any) { e["version"] = "1" }), reason: ReasonMalformed},
		{name: "payload missing", raw: reenvelope(func(e map[string]any) { delete(e, "payload") }), reason: ReasonMalformed, msg: `"payload" field is missing`},
		{name: "signature missing", raw: reenvelope(func(e map[string]any) { delete(e, "signature") }), reason: ReasonMalformed, msg: `"signature" field is missing`},
		{name: "payload not base64", raw: reenvelope(func(e map[string]any) { e["payload"] = "!!!" }), reason: ReasonMalformed, msg: "payload is not valid base64"},
		{name: "payload url base64", raw: reenvelope(func(e map[string]any) {
			e["payload"] = base64.RawURLEncoding.EncodeToString(payload)
		}), reason: ReasonMalformed, msg: "payload is not valid base64"},
		{name: "line break in payload base64", raw: reenvelope(func(e map[string]any) {
			p := e["payload"].(string)
			e["payload"] = p[:8] + "\n" + p[8:]
		}), reason: ReasonMalformed, msg: "line breaks"},
		{name: "signature not base64", raw: reenvelope(func(e map[string]any) { e["signature"] = "%%%" }), reason: ReasonMalformed, msg: "signature is not valid base64"},
		{name: "signature truncated", raw: reenvelope(func(e map[string]any) {
			e["signature"] = base64.StdEncoding.EncodeToString(sig[:63])
		}), reason: ReasonMalformed, msg: "63 bytes"},
		{name: "base64 twice", raw: []byte(base64.StdEncoding.EncodeToString(good)), reason: ReasonMalformed, msg: "--from-file"},

		{name: "signed by another key", raw: mint(t, baseLicense(), otherPriv), reason: ReasonBadSignature, msg: "different key"},
		{name: "payload modified", raw: rawEnvelope(1, flipped(payload, 20), sig), reason: ReasonBadSignature},
		{name: "payload extended", raw: rawEnvelope(1, append(bytes.Clone(payload), ' '), sig), reason: ReasonBadSignature},
		{name: "features edited", raw: rawEnvelope(1, []byte(strings.Replace(validDoc, FeatureServiceMesh, FeaturePreview, 1)), sig), reason: ReasonBadSignature},
		{name: "signature modified", raw: rawEnvelope(1, payload, flipped(sig, 10)), reason: ReasonBadSignature},
		{name: "signature of zeros", raw: rawEnvelope(1, payload, make([]byte, 64)), reason: ReasonBadSignature},
		{name: "no trusted keys", raw: good, keys: []ed25519.PublicKey{}, reason: ReasonBadSignature, msg: "no license signing keys"},
		{name: "wrong-length key skipped", raw: good, keys: []ed25519.PublicKey{pub[:31], pub}, reason: ReasonValid},
		{name: "only wrong-length key", raw: good, keys: []ed25519.PublicKey{append(bytes.Clone(pub), 0)}, reason: ReasonBadSignature},

		{name: "signed doc not json", raw: signedDoc("not json", priv), reason: ReasonMalformed, msg: "signed document"},
		{name: "signed doc unknown field", raw: signedDoc(strings.Replace(validDoc, "{", `{"seats":5,`, 1), priv), reason: ReasonMalformed, msg: "unknown field"},
		{name: "signed doc duplicate licensee", raw: signedDoc(strings.Replace(validDoc, `"licensee":"Example Corp"`, `"licensee":"Example Corp","licensee":"Other"`, 1), priv), reason: ReasonMalformed, msg: "duplicate"},
		{name: "signed doc cased key", raw: signedDoc(strings.Replace(validDoc, `"licensee"`, `"Licensee"`, 1), priv), reason: ReasonMalformed, msg: "unknown field"},
		{name: "signed doc version 2", raw: signedDoc(strings.Replace(validDoc, `"version":1`, `"version":2`, 1), priv), reason: ReasonMalformed, msg: "version 2"},
		{name: "signed doc without licensee", raw: signedDoc(strings.Replace(validDoc, `"licensee":"Example Corp"`, `"licensee":"  "`, 1), priv), reason: ReasonMalformed, msg: `"licensee"`},
		{name: "signed doc without id", raw: signedDoc(strings.Replace(validDoc, `"id":"lic-test-0001"`, `"id":""`, 1), priv), reason: ReasonMalformed, msg: `"id"`},
		{name: "signed doc control char", raw: signedDoc(strings.Replace(validDoc, `Example Corp`, `Example\u0007Corp`, 1), priv), reason: ReasonMalformed, msg: "control"},
		{name: "signed doc time without zone", raw: signedDoc(strings.Replace(validDoc, `"notAfter":"2026-10-01T00:00:00Z"`, `"notAfter":"2026-10-01T00:00:00"`, 1), priv), reason: ReasonMalformed, msg: "RFC 3339"},
		{name: "signed doc date only", raw: signedDoc(strings.Replace(validDoc, `"notAfter":"2026-10-01T00:00:00Z"`, `"notAfter":"2026-10-01"`, 1), priv), reason: ReasonMalformed, msg: "notAfter"},
		{name: "signed doc without issuedAt", raw: signedDoc(strings.Replace(validDoc, `"issuedAt":"2026-01-01T00:00:00Z"`, `"issuedAt":""`, 1), priv), reason: ReasonMalformed, msg: "issuedAt"},
		{name: "signed doc notAfter before notBefore", raw: signedDoc(strings.Replace(validDoc, `"notAfter":"2026-10-01T00:00:00Z"`, `"notAfter":"2025-10-01T00:00:00Z"`, 1), priv), reason: ReasonMalformed, msg: "not after"},
		{name: "signed doc notAfter equals notBefore", raw: signedDoc(strings.Replace(validDoc, `"notAfter":"2026-10-01T00:00:00Z"`, `"notAfter":"2026-01-01T00:00:00Z"`, 1), priv), reason: ReasonMalformed, msg: "not after"},
		{name: "signed doc too many features", raw: signedDoc(tooManyFeatures, priv), reason: ReasonMalformed, msg: "features"},

		{name: "expired", raw: good, at: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), reason: ReasonExpired, msg: "expired on 2026-10-01; request a renewal"},
		{name: "expired at notAfter exactly", raw: good, at: baseLicense().NotAfter, reason: ReasonExpired},
		{name: "expired mid-day", raw: with(func(l *License) { l.NotAfter = time.Date(2026, 3, 1, 15, 30, 0, 0, time.UTC) }), reason: ReasonExpired, msg: "2026-03-01T15:30:00Z"},
		{name: "not yet valid", raw: good, at: time.Date(2025, 12, 31, 23, 59, 59, 0, time.UTC), reason: ReasonNotYetValid, msg: "not valid until 2026-01-01"},
		{name: "no features", raw: with(func(l *License) { l.Features = nil }), reason: ReasonFeatureMissing, msg: "no features"},
		{name: "only other features", raw: with(func(l *License) { l.Features = []string{"observability", "gateway"} }), reason: ReasonFeatureMissing, msg: "observability, gateway"},
		{name: "feature names are case-sensitive", raw: with(func(l *License) { l.Features = []string{"Service-Mesh", "PREVIEW"} }), reason: ReasonFeatureMissing},
		{name: "feature missing beats expiry", raw: with(func(l *License) { l.Features = []string{"other"} }), at: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), reason: ReasonFeatureMissing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := keys
			if tc.keys != nil {
				k = tc.keys
			}
			at := now
			if !tc.at.IsZero() {
				at = tc.at
			}
			l, err := Verify(tc.raw, k, at)
			if got := ReasonOf(err); got != tc.reason {
				t.Fatalf("reason = %s, want %s (err: %v)", got, tc.reason, err)
			}
			if tc.reason == ReasonValid {
				if l == nil || !l.Allows() {
					t.Fatalf("accepted license %+v does not allow the mesh", l)
				}
				return
			}
			if l != nil {
				t.Fatalf("refused license returned non-nil License %+v", l)
			}
			var le *Error
			if !errors.As(err, &le) {
				t.Fatalf("error %T is not *Error", err)
			}
			if !strings.Contains(le.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", le.Message, tc.msg)
			}
			signedButUnusable := tc.reason == ReasonExpired || tc.reason == ReasonNotYetValid || tc.reason == ReasonFeatureMissing
			if (le.License != nil) != signedButUnusable {
				t.Errorf("Error.License = %v, want set only for signed-but-unusable licenses", le.License)
			}
		})
	}
}

func TestVerifyReturnsSignedFields(t *testing.T) {
	pub, priv := testKeyPair(1)
	want := baseLicense()
	want.Features = []string{FeaturePreview, "other"}
	want.NotAfter = time.Date(2026, 10, 1, 8, 0, 0, 500, time.FixedZone("CEST", 2*3600))
	l, err := Verify(mint(t, want, priv), []ed25519.PublicKey{pub}, now)
	if err != nil {
		t.Fatal(err)
	}
	if l.Version != FormatVersion || l.ID != want.ID || l.Licensee != want.Licensee ||
		strings.Join(l.Features, ",") != "preview,other" ||
		!l.IssuedAt.Equal(want.IssuedAt) || !l.NotBefore.Equal(want.NotBefore) || !l.NotAfter.Equal(want.NotAfter) {
		t.Fatalf("got %+v, want %+v", l, want)
	}
	if !l.ExpiresAt().Equal(want.NotAfter) || ExpiryTimestamp(l) != float64(want.NotAfter.Unix()) {
		t.Errorf("expiry accessors disagree with NotAfter")
	}
	if !l.Has("other") || l.Has("Other") {
		t.Errorf("Has is not an exact match")
	}
}

func TestErrorsIs(t *testing.T) {
	pub, priv := testKeyPair(1)
	_, err := Verify(mint(t, baseLicense(), priv), []ed25519.PublicKey{pub}, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	if !errors.Is(err, ErrExpired) || errors.Is(err, ErrNotYetValid) || errors.Is(err, ErrMalformed) {
		t.Fatalf("errors.Is does not match on reason: %v", err)
	}
	if l := SignedLicense(nil, err); l == nil || l.ID != "lic-test-0001" {
		t.Fatalf("SignedLicense(nil, expired) = %v", l)
	}
	if SignedLicense(nil, ErrBadSignature) != nil || SignedLicense(nil, nil) != nil {
		t.Fatal("SignedLicense invented a license")
	}
	if ReasonOf(errors.New("boom")) != ReasonMalformed || ReasonOf(nil) != ReasonValid {
		t.Fatal("ReasonOf fallback")
	}
}

func TestNilLicense(t *testing.T) {
	var l *License
	if l.Allows() || l.Has(FeaturePreview) || !l.ExpiresAt().IsZero() || ExpiryTimestamp(l) != 0 {
		t.Fatal("nil license must be inert")
	}
}

func TestHostileFieldNameIsClipped(t *testing.T) {
	_, err := Verify([]byte(`{"`+strings.Repeat("a", 10000)+`":1}`), nil, now)
	if ReasonOf(err) != ReasonMalformed {
		t.Fatalf("reason %s", ReasonOf(err))
	}
	if n := len(err.Error()); n > 512 {
		t.Fatalf("message is %d bytes; untrusted text must be clipped", n)
	}
}

func TestSign(t *testing.T) {
	_, priv := testKeyPair(1)
	if _, err := Sign(baseLicense(), priv[:32]); err == nil {
		t.Error("Sign accepted a 32-byte key")
	}
	for name, mod := range map[string]func(*License){
		"no licensee":    func(l *License) { l.Licensee = "" },
		"no id":          func(l *License) { l.ID = "" },
		"no issuedAt":    func(l *License) { l.IssuedAt = time.Time{} },
		"inverted dates": func(l *License) { l.NotAfter = l.NotBefore.Add(-time.Second) },
		"version 2":      func(l *License) { l.Version = 2 },
		"long licensee":  func(l *License) { l.Licensee = strings.Repeat("x", maxLicenseeLen+1) },
	} {
		l := baseLicense()
		mod(&l)
		if _, err := Sign(l, priv); err == nil {
			t.Errorf("%s: Sign accepted an invalid license", name)
		}
	}
	raw := mint(t, baseLicense(), priv)
	if !bytes.HasSuffix(raw, []byte("}\n")) {
		t.Error("license file should end with a newline")
	}
	// Ed25519 is deterministic: the same license signs to the same bytes.
	if !bytes.Equal(raw, mint(t, baseLicense(), priv)) {
		t.Error("signing is not deterministic")
	}
}

// The message lands in status; one that changed with the clock would make
// every re-check a write.
func TestMessagesDoNotDependOnTheClock(t *testing.T) {
	pub, priv := testKeyPair(1)
	keys := []ed25519.PublicKey{pub}
	raw := mint(t, baseLicense(), priv)
	for _, pair := range [][2]time.Time{
		{time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)},
		{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, a := Verify(raw, keys, pair[0])
		_, b := Verify(raw, keys, pair[1])
		if a == nil || a.Error() != b.Error() {
			t.Errorf("message changed with the clock:\n%v\n%v", a, b)
		}
	}
}
