package controller

import (
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// refusedDeclarations remembers, per fleet, the namespace labels the API
// server refused (a policy: RBAC, an admission webhook or policy), so that
// the same write is sent again only at the fleet's poll
// (Config.StateInterval), not at every look: a fleet looks far more often
// than its poll while a member starts, during a roll or while a member is
// unhealthy, and every event wakes it. Issue 43: the transition explorer
// counted 14 refused namespace writes in 12 s at rest under load. The
// write goes again at once when the fleet asks for other labels or the
// namespace changed (its resourceVersion): the answer may differ then.
type refusedDeclarations struct {
	mu sync.Mutex
	m  map[types.NamespacedName]refusedDeclaration
}

// refusedDeclaration is one remembered refusal.
type refusedDeclaration struct {
	labels    map[string]string
	nsVersion string
	at        time.Time
	err       error
}

// holds returns the refusal to report instead of writing want again, or
// nil when the write is to be sent.
func (r *refusedDeclarations) holds(key types.NamespacedName, want map[string]string, nsVersion string, now time.Time, poll time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.m[key]
	if !ok || d.nsVersion != nsVersion || !maps.Equal(d.labels, want) || now.Sub(d.at) >= poll || now.Before(d.at) {
		return nil
	}
	return d.err
}

// refused records the API server's refusal of want.
func (r *refusedDeclarations) refused(key types.NamespacedName, want map[string]string, nsVersion string, now time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.NamespacedName]refusedDeclaration{}
	}
	r.m[key] = refusedDeclaration{labels: maps.Clone(want), nsVersion: nsVersion, at: now, err: err}
}

// forget drops the fleet's refusal (its write went through, or it is gone).
func (r *refusedDeclarations) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, key)
}
