package license

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// fuzzSeeds are licenses signed with the fuzz key (deterministic, so a
// corpus entry stays meaningful across runs), valid or refused for each
// reason. Their payloads are the only ones FuzzVerify may ever accept.
func fuzzSeeds(t testing.TB) (pub ed25519.PublicKey, signed [][]byte, payloads map[string]bool) {
	pub, priv := testKeyPair(7)
	payloads = map[string]bool{}
	add := func(raw []byte) {
		signed = append(signed, raw)
		p, _, err := parseEnvelope(raw)
		if err != nil {
			t.Fatalf("seed does not parse: %v", err)
		}
		payloads[string(p)] = true
	}
	variants := []func(*License){
		func(*License) {},
		func(l *License) { l.Features = []string{FeaturePreview, "other"} },
		func(l *License) { l.Features = nil },
		func(l *License) { l.NotAfter = now.Add(-time.Hour) },
		func(l *License) { l.NotBefore = now.Add(time.Hour) },
		func(l *License) { l.Licensee = "Ünïcode Licensee ✓" },
	}
	for _, mod := range variants {
		l := baseLicense()
		mod(&l)
		add(mint(t, l, priv))
	}
	return pub, signed, payloads
}

// FuzzVerify feeds arbitrary bytes to Verify. It must never panic, must
// refuse with a known reason and a bounded message, and must never accept a
// payload the fuzz key did not sign: a mutation can only be accepted if it
// re-encodes exactly a signed payload and its signature (JSON whitespace,
// key order), never if it changes what was signed.
func FuzzVerify(f *testing.F) {
	pub, signed, payloads := fuzzSeeds(f)
	for _, s := range signed {
		f.Add(s)
	}
	f.Add([]byte(`{"version":1,"payload":"e30=","signature":"` + strings.Repeat("A", 86) + `=="}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(base64.StdEncoding.EncodeToString(signed[0])))
	f.Add([]byte("null"))
	keys := []ed25519.PublicKey{pub}
	known := map[Reason]bool{
		ReasonMalformed: true, ReasonBadSignature: true, ReasonExpired: true,
		ReasonNotYetValid: true, ReasonFeatureMissing: true,
	}

	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := Verify(raw, keys, now)
		if err != nil {
			if l != nil {
				t.Fatal("refused license returned a License")
			}
			le, ok := err.(*Error)
			if !ok || !known[le.Reason] || le.Message == "" {
				t.Fatalf("unexpected error %T %v", err, err)
			}
			if len(le.Message) > 1024 {
				t.Fatalf("message is %d bytes", len(le.Message))
			}
			if le.License != nil {
				assertSigned(t, raw, payloads)
			}
			return
		}
		assertSigned(t, raw, payloads)
		if !l.Allows() || now.Before(l.NotBefore) || !now.Before(l.NotAfter) {
			t.Fatalf("accepted a license that is not usable now: %+v", l)
		}
	})
}

func assertSigned(t *testing.T, raw []byte, payloads map[string]bool) {
	t.Helper()
	p, _, err := parseEnvelope(raw)
	if err != nil {
		t.Fatalf("accepted input whose envelope does not parse: %v", err)
	}
	if !payloads[string(p)] {
		t.Fatalf("accepted a payload that was never signed: %q", p)
	}
}

// FuzzParse feeds arbitrary documents to the signed-document parser (the
// part that runs after the signature check) and checks that whatever it
// accepts satisfies the documented rules and survives Sign -> Verify
// unchanged.
func FuzzParse(f *testing.F) {
	_, signed, _ := fuzzSeeds(f)
	for _, s := range signed {
		p, _, _ := parseEnvelope(s)
		f.Add(p)
	}
	f.Add([]byte(`{"version":1,"id":"a","licensee":"b","features":["preview"],"issuedAt":"2026-01-01T00:00:00+02:00","notBefore":"2026-01-01T00:00:00.5Z","notAfter":"2026-01-01T00:00:00.6Z"}`))
	f.Add([]byte(`{"version":1,"id":"a","licensee":"b","features":[],"issuedAt":"x","notBefore":"","notAfter":""}`))
	f.Add([]byte(`{"version":1,"ID":"a","Licensee":"b","licensee":"c"}`))
	pub, priv := testKeyPair(7)

	f.Fuzz(func(t *testing.T, payload []byte) {
		l, err := parseDocument(payload)
		if err != nil {
			if l != nil || err.Reason != ReasonMalformed || len(err.Message) > 1024 {
				t.Fatalf("bad refusal: %v, %#v", l, err)
			}
			return
		}
		if l.Version != FormatVersion || strings.TrimSpace(l.ID) == "" || strings.TrimSpace(l.Licensee) == "" ||
			len(l.Features) > maxFeatures || !l.NotAfter.After(l.NotBefore) {
			t.Fatalf("accepted a document that breaks the rules: %+v", l)
		}
		raw, serr := Sign(*l, priv)
		if serr != nil {
			t.Fatalf("Sign refused what parseDocument accepted: %v (%+v)", serr, l)
		}
		at := l.NotBefore
		got, verr := Verify(raw, []ed25519.PublicKey{pub}, at)
		if !l.Allows() {
			if ReasonOf(verr) != ReasonFeatureMissing {
				t.Fatalf("featureless license: %v", verr)
			}
			got = SignedLicense(nil, verr)
		} else if verr != nil {
			t.Fatalf("re-signed license refused at its notBefore: %v", verr)
		}
		if got.ID != l.ID || got.Licensee != l.Licensee || strings.Join(got.Features, "\x00") != strings.Join(l.Features, "\x00") ||
			!got.IssuedAt.Equal(l.IssuedAt) || !got.NotBefore.Equal(l.NotBefore) || !got.NotAfter.Equal(l.NotAfter) {
			t.Fatalf("round trip changed the license:\n got %+v\nwant %+v", got, l)
		}
	})
}

// FuzzParseKeys feeds arbitrary text to both key parsers: no panic, and an
// accepted key is of the right size and usable.
func FuzzParseKeys(f *testing.F) {
	pub, priv := testKeyPair(7)
	pubPEM, _ := MarshalPublicKeyPEM(pub)
	privPEM, _ := MarshalPrivateKeyPEM(priv)
	f.Add(pubPEM)
	f.Add(privPEM)
	f.Add([]byte(EncodePublicKey(pub)))
	f.Add([]byte(base64.StdEncoding.EncodeToString(priv)))
	f.Add([]byte(base64.StdEncoding.EncodeToString(priv.Seed())))
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\n\n-----END PUBLIC KEY-----"))

	f.Fuzz(func(t *testing.T, text []byte) {
		if k, err := ParsePublicKey(text); err == nil {
			if len(k) != ed25519.PublicKeySize {
				t.Fatalf("public key of %d bytes", len(k))
			}
			again, err := ParsePublicKey([]byte(EncodePublicKey(k)))
			if err != nil || !again.Equal(k) {
				t.Fatalf("public key does not round-trip: %v", err)
			}
		}
		if k, err := ParsePrivateKey(text); err == nil {
			if len(k) != ed25519.PrivateKeySize {
				t.Fatalf("private key of %d bytes", len(k))
			}
			msg := []byte("license")
			if !ed25519.Verify(k.Public().(ed25519.PublicKey), msg, ed25519.Sign(k, msg)) {
				t.Fatal("accepted private key cannot sign verifiably")
			}
		}
	})
}

// FuzzVerifyParts fuzzes the envelope's contents rather than its bytes, so
// the fuzzer spends its time past the JSON and base64 layers: any payload
// or signature change to a signed license must be refused, and the only
// payloads ever accepted are the ones the fuzz key signed.
func FuzzVerifyParts(f *testing.F) {
	pub, signed, payloads := fuzzSeeds(f)
	for _, s := range signed {
		p, sig, _ := parseEnvelope(s)
		f.Add(1, p, sig)
	}
	f.Add(2, []byte(`{}`), make([]byte, 64))
	keys := []ed25519.PublicKey{pub}

	f.Fuzz(func(t *testing.T, version int, payload, sig []byte) {
		raw := rawEnvelope(version, payload, sig)
		l, err := Verify(raw, keys, now)
		signedPayload := payloads[string(payload)]
		if err == nil || SignedLicense(l, err) != nil {
			if !signedPayload {
				t.Fatalf("accepted an unsigned payload %q (version %d)", payload, version)
			}
			if version != FormatVersion || !ed25519.Verify(pub, payload, sig) {
				t.Fatalf("accepted a signature that does not verify")
			}
		}
		if err == nil && !l.Allows() {
			t.Fatal("accepted a license that does not allow the mesh")
		}
	})
}
