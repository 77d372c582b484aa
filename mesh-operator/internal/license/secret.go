package license

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
)

// DefaultSecretKey is the Secret data key the license file is read from.
const DefaultSecretKey = "license"

// SecretRef names the Secret holding the license. The chart picks the name;
// the namespace is the operator's own. It takes a Secret's data map rather
// than a Secret so this package stays free of Kubernetes types.
type SecretRef struct {
	Namespace string
	Name      string
	// Key in the Secret's data; DefaultSecretKey when empty.
	Key string
}

func (r SecretRef) key() string {
	if r.Key == "" {
		return DefaultSecretKey
	}
	return r.Key
}

func (r SecretRef) String() string {
	return r.Namespace + "/" + r.Name
}

// createHint is the command that fixes a missing license.
func (r SecretRef) createHint() string {
	return fmt.Sprintf("kubectl create secret generic %s -n %s --from-file=%s=license.json", r.Name, r.Namespace, r.key())
}

// NotFound is the error for a license Secret that does not exist; the
// caller reports it when its Get returns NotFound.
func (r SecretRef) NotFound() *Error {
	return &Error{
		Reason: ReasonMissing,
		Message: fmt.Sprintf("no license: Secret %s does not exist; the service mesh is a licensed preview, "+
			"create the Secret from your license file: %s", r, r.createHint()),
	}
}

// Verify verifies the license held in a Secret's data. A missing or empty
// key is ReasonMissing; every other error is Verify's, with the Secret
// named in front so the user knows which object to fix.
func (r SecretRef) Verify(data map[string][]byte, keys []ed25519.PublicKey, now time.Time) (*License, error) {
	raw, ok := data[r.key()]
	if !ok || len(raw) == 0 {
		state := "has no"
		if ok {
			state = "has an empty"
		}
		return nil, &Error{
			Reason: ReasonMissing,
			Message: fmt.Sprintf("no license: Secret %s %s %q key; recreate it from your license file: %s",
				r, state, r.key(), r.createHint()),
		}
	}
	l, err := Verify(raw, keys, now)
	if err != nil {
		var le *Error
		if errors.As(err, &le) {
			located := *le
			located.Message = fmt.Sprintf("Secret %s: %s", r, le.Message)
			return nil, &located
		}
		return nil, err
	}
	return l, nil
}
