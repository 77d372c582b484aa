package license

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Limits on what the parsers accept. A license is a few hundred bytes;
// the limits keep a hostile or mistaken Secret from costing memory or
// flooding a status message.
const (
	// MaxSize is the largest license file accepted, in bytes.
	MaxSize = 16 << 10
	// FormatVersion is the only format this operator reads.
	FormatVersion = 1

	maxLicenseeLen = 256
	maxIDLen       = 128
	maxFeatures    = 32
	maxFeatureLen  = 63
)

// envelope is the file as stored in the Secret.
type envelope struct {
	Version   int    `json:"version"`
	Payload   string `json:"payload"`
	Signature string `json:"signature"`
}

// document is the signed payload. Times are kept as strings so parsing is
// ours: RFC 3339 with an explicit offset, nothing else.
type document struct {
	Version   int      `json:"version"`
	ID        string   `json:"id"`
	Licensee  string   `json:"licensee"`
	Features  []string `json:"features"`
	IssuedAt  string   `json:"issuedAt"`
	NotBefore string   `json:"notBefore"`
	NotAfter  string   `json:"notAfter"`
}

// strictDecode decodes exactly one JSON object into v. Beyond what
// encoding/json checks, the object's keys must be exactly the allowed names:
// no unknown, duplicate or differently-cased keys (encoding/json would
// match "Payload" to "payload" and keep the last of two duplicates), and no
// trailing data. A license is a fixed format; anything else is the wrong
// file or tampering.
func strictDecode(data []byte, v any, allowed ...string) error {
	if err := checkKeys(data, allowed); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

func checkKeys(data []byte, allowed []string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not a JSON object")
	}
	seen := make(map[string]bool, len(allowed))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("invalid object key")
		}
		if !slices.Contains(allowed, key) {
			return fmt.Errorf("unknown field %q", clip(key, 40))
		}
		if seen[key] {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// b64 is strict standard base64. encoding/base64 skips CR and LF even in
// strict mode; decodeB64 refuses them so that each license has one encoding.
var b64 = base64.StdEncoding.Strict()

func decodeB64(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("line breaks inside base64")
	}
	return b64.DecodeString(s)
}

// parseEnvelope checks the outer file and returns the payload bytes and the
// signature. Nothing here is trusted yet.
func parseEnvelope(raw []byte) (payload, sig []byte, err *Error) {
	if len(raw) == 0 {
		return nil, nil, malformed(nil, "the license data is empty")
	}
	if len(raw) > MaxSize {
		return nil, nil, malformed(nil, "the license data is %d bytes, over the %d-byte limit, so it is not a license file", len(raw), MaxSize)
	}
	var env envelope
	if err := strictDecode(raw, &env, "version", "payload", "signature"); err != nil {
		if hint := encodingHint(raw); hint != "" {
			return nil, nil, unreadable(err, "%s", hint)
		}
		return nil, nil, malformed(err, "not a license file (%s)", causeText(err))
	}
	switch {
	case env.Version == 0:
		return nil, nil, malformed(nil, "the \"version\" field is missing")
	case env.Version != FormatVersion:
		return nil, nil, unreadable(nil, "license format version %d is not supported by this operator, which reads version %d; "+
			"upgrade the operator or ask for a version %d license", env.Version, FormatVersion, FormatVersion)
	case env.Payload == "":
		return nil, nil, malformed(nil, "the \"payload\" field is missing")
	case env.Signature == "":
		return nil, nil, malformed(nil, "the \"signature\" field is missing")
	}
	payload, e := decodeB64(env.Payload)
	if e != nil {
		return nil, nil, malformed(e, "the payload is not valid base64 (%s)", causeText(e))
	}
	sig, e = decodeB64(env.Signature)
	if e != nil {
		return nil, nil, malformed(e, "the signature is not valid base64 (%s)", causeText(e))
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, nil, malformed(nil, "the signature is %d bytes, an Ed25519 signature is %d", len(sig), ed25519.SignatureSize)
	}
	return payload, sig, nil
}

// encodingHint recognises the usual way a correct license file gets
// mangled on its way into a Secret (encoded by hand, then encoded again by
// the API), so the message can say what happened.
func encodingHint(raw []byte) string {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] == '{' {
		return ""
	}
	if dec, err := base64.StdEncoding.DecodeString(string(trimmed)); err == nil && bytes.HasPrefix(bytes.TrimSpace(dec), []byte("{")) {
		return "the license data is base64-encoded once too often; create the Secret with --from-file=license=license.json " +
			"(or put the file in stringData) instead of encoding it yourself"
	}
	return ""
}

// parseDocument validates the signed payload. It runs only on bytes whose
// signature has been verified, but is strict anyway: the same checks guard
// Sign, so a license this package mints is one it accepts.
func parseDocument(payload []byte) (*License, *Error) {
	var doc document
	if err := strictDecode(payload, &doc, "version", "id", "licensee", "features", "issuedAt", "notBefore", "notAfter"); err != nil {
		return nil, malformed(err, "the signed document is not valid (%s)", causeText(err))
	}
	if doc.Version == 0 {
		return nil, malformed(nil, "the signed document has no \"version\"")
	}
	if doc.Version != FormatVersion {
		return nil, malformed(nil, "the signed document is format version %d, this operator reads version %d", doc.Version, FormatVersion)
	}
	if err := checkText("id", doc.ID, maxIDLen); err != nil {
		return nil, err
	}
	if err := checkText("licensee", doc.Licensee, maxLicenseeLen); err != nil {
		return nil, err
	}
	if len(doc.Features) > maxFeatures {
		return nil, malformed(nil, "the license lists %d features, at most %d are allowed", len(doc.Features), maxFeatures)
	}
	for _, f := range doc.Features {
		if err := checkText("features[]", f, maxFeatureLen); err != nil {
			return nil, err
		}
	}
	issued, err := parseTime("issuedAt", doc.IssuedAt)
	if err != nil {
		return nil, err
	}
	notBefore, err := parseTime("notBefore", doc.NotBefore)
	if err != nil {
		return nil, err
	}
	notAfter, err := parseTime("notAfter", doc.NotAfter)
	if err != nil {
		return nil, err
	}
	if !notAfter.After(notBefore) {
		return nil, malformed(nil, "notAfter (%s) is not after notBefore (%s)", doc.NotAfter, doc.NotBefore)
	}
	return &License{
		Version:   doc.Version,
		ID:        doc.ID,
		Licensee:  doc.Licensee,
		Features:  append([]string(nil), doc.Features...),
		IssuedAt:  issued,
		NotBefore: notBefore,
		NotAfter:  notAfter,
	}, nil
}

// checkText requires a short, printable, non-blank string: these fields
// end up in condition messages and events.
func checkText(field, s string, limit int) *Error {
	if strings.TrimSpace(s) == "" {
		return malformed(nil, "the %q field is missing or blank", field)
	}
	if len(s) > limit {
		return malformed(nil, "the %q field is %d bytes, at most %d are allowed", field, len(s), limit)
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return malformed(nil, "the %q field contains a control or invalid character", field)
		}
	}
	return nil
}

// parseTime reads an RFC 3339 instant; the offset is mandatory, so a
// license means the same instant in every time zone.
func parseTime(field, s string) (time.Time, *Error) {
	if s == "" {
		return time.Time{}, malformed(nil, "the %q field is missing", field)
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, malformed(err, "the %q field is not an RFC 3339 time such as 2026-01-02T15:04:05Z", field)
	}
	return t, nil
}

// Verify checks a license file against the trusted keys at the instant now
// and returns the license when it unlocks the mesh. Otherwise the error is
// an *Error whose Reason says why (never ReasonMissing: absence is the
// caller's to detect) and whose License is set when the signature held.
//
// Order matters: size and shape first, then the signature, and only then is
// the signed document parsed, so no untrusted content is interpreted.
// Feature checks come before time checks, since renewing a license that
// lacks the feature would not help.
func Verify(raw []byte, keys []ed25519.PublicKey, now time.Time) (*License, error) {
	payload, sig, perr := parseEnvelope(raw)
	if perr != nil {
		return nil, perr
	}
	if !verifySignature(payload, sig, keys) {
		msg := "the license signature does not match any key this operator build trusts: the file was modified, " +
			"or it was signed with a different key (for example a test license given to a release build); " +
			"use the license file exactly as issued"
		if len(keys) == 0 {
			msg = "no license signing keys are configured in this operator build, so no license can be accepted"
		}
		return nil, &Error{Reason: ReasonBadSignature, Message: msg}
	}
	l, derr := parseDocument(payload)
	if derr != nil {
		return nil, derr
	}
	switch {
	case !l.Allows():
		return nil, featureMissingError(l)
	case now.Before(l.NotBefore):
		return nil, notYetValidError(l)
	case !now.Before(l.NotAfter):
		return nil, expiredError(l)
	}
	return l, nil
}

// Inspect decodes a license file without checking its signature, so a
// customer can see what a file says (and to whom and until when it was
// issued) even when it does not verify. What it returns is untrusted:
// decisions take Verify's result only.
func Inspect(raw []byte) (*License, error) {
	payload, _, perr := parseEnvelope(raw)
	if perr != nil {
		return nil, perr
	}
	l, derr := parseDocument(payload)
	if derr != nil {
		return nil, derr
	}
	return l, nil
}

func verifySignature(payload, sig []byte, keys []ed25519.PublicKey) bool {
	for _, k := range keys {
		// ed25519.Verify panics on a key of the wrong length.
		if len(k) == ed25519.PublicKeySize && ed25519.Verify(k, payload, sig) {
			return true
		}
	}
	return false
}

// Sign mints a license file for l with priv. Times are written in UTC
// (sub-second digits only when present, so what Verify returns equals what
// was signed); Version defaults to FormatVersion. l must pass the same
// checks Verify applies to a signed document (it need not be current or
// grant the mesh: tests mint expired and featureless licenses on purpose).
func Sign(l License, priv ed25519.PrivateKey) ([]byte, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("signing key is %d bytes, an Ed25519 private key is %d", len(priv), ed25519.PrivateKeySize)
	}
	if l.Version == 0 {
		l.Version = FormatVersion
	}
	features := l.Features
	if features == nil {
		features = []string{}
	}
	doc := document{
		Version:   l.Version,
		ID:        l.ID,
		Licensee:  l.Licensee,
		Features:  features,
		IssuedAt:  stamp(l.IssuedAt),
		NotBefore: stamp(l.NotBefore),
		NotAfter:  stamp(l.NotAfter),
	}
	payload, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if _, perr := parseDocument(payload); perr != nil {
		return nil, fmt.Errorf("refusing to sign: %s", perr.Message)
	}
	env := envelope{
		Version:   l.Version,
		Payload:   b64.EncodeToString(payload),
		Signature: b64.EncodeToString(ed25519.Sign(priv, payload)),
	}
	out, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return nil, err
	}
	out = append(out, '\n')
	if len(out) > MaxSize {
		return nil, fmt.Errorf("refusing to sign: the license file would be %d bytes, over the %d-byte limit", len(out), MaxSize)
	}
	return out, nil
}

// stamp formats a time for the document; the zero time stays empty so the
// "missing field" check reports it.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
