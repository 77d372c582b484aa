package access

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// ParseSnapshot reads a snapshot written by Snapshot.YAML (a recorded state,
// or `kubectl celld access --save`).
func ParseSnapshot(raw []byte) (*Snapshot, error) {
	s := &Snapshot{}
	if err := yaml.UnmarshalStrict(raw, s); err != nil {
		return nil, fmt.Errorf("reading snapshot: %w", err)
	}
	return s, nil
}

// YAML is the snapshot as ParseSnapshot reads it.
func (s *Snapshot) YAML() ([]byte, error) { return yaml.Marshal(s) }
