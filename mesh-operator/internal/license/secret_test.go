package license

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSecretRef(t *testing.T) {
	pub, priv := testKeyPair(1)
	keys := []ed25519.PublicKey{pub}
	ref := SecretRef{Namespace: "mesh-system", Name: "mesh-operator-license"}
	good := mint(t, baseLicense(), priv)

	t.Run("not found", func(t *testing.T) {
		err := ref.NotFound()
		if ReasonOf(err) != ReasonMissing || !errors.Is(err, ErrMissing) {
			t.Fatalf("reason %s", ReasonOf(err))
		}
		want := "kubectl create secret generic mesh-operator-license -n mesh-system --from-file=license=license.json"
		if !strings.Contains(err.Message, want) {
			t.Errorf("message %q lacks the fix %q", err.Message, want)
		}
	})
	for name, data := range map[string]map[string][]byte{
		"nil data":    nil,
		"missing key": {"other": good},
		"empty key":   {"license": {}},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := ref.Verify(data, keys, now)
			if l != nil || ReasonOf(err) != ReasonMissing {
				t.Fatalf("got %v, %v; want LicenseMissing", l, err)
			}
			if !strings.Contains(err.Error(), `"license" key`) {
				t.Errorf("message %q should name the key", err)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		l, err := ref.Verify(map[string][]byte{"license": good}, keys, now)
		if err != nil || !l.Allows() {
			t.Fatalf("got %v, %v", l, err)
		}
	})
	t.Run("custom key", func(t *testing.T) {
		r := ref
		r.Key = "mesh.json"
		if _, err := r.Verify(map[string][]byte{"mesh.json": good}, keys, now); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Verify(map[string][]byte{"license": good}, keys, now); ReasonOf(err) != ReasonMissing {
			t.Fatalf("reason %s", ReasonOf(err))
		}
	})
	t.Run("errors name the Secret and keep reason and license", func(t *testing.T) {
		_, err := ref.Verify(map[string][]byte{"license": good}, keys, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		var le *Error
		if !errors.As(err, &le) || le.Reason != ReasonExpired || le.License == nil {
			t.Fatalf("got %#v", err)
		}
		if !strings.HasPrefix(le.Message, "Secret mesh-system/mesh-operator-license: license ") {
			t.Errorf("message %q should start with the Secret", le.Message)
		}
	})
}
