// Package served answers "does the API server serve this kind (or group)?"
// for both operators, one way: from a snapshot of API discovery that is at
// most MaxAge old, plus what writes learned since.
//
// Why not the REST mapper: controller-runtime's mapper never forgets a kind
// it has seen, so a CRD removed under a running operator stays "served" for
// it (writes then fail with 404 forever). Why not discovery at every ask:
// the fleet operator asks about Istio's and the Gateway API's kinds in
// every reconcile of every fleet (1,000 fleets in the benchmark). One
// snapshot shared by all askers and refreshed at most every MaxAge costs a
// full discovery (two GETs with aggregated discovery) per MaxAge, however
// many fleets there are.
//
// Staleness (docs/development.md, "Is this API served?"):
//   - a kind (CRD) installed later is reported served at most MaxAge after
//     discovery lists it;
//   - a kind removed later is reported not served at most MaxAge after
//     discovery stops listing it, and at once after a write of that kind was
//     answered with "the server could not find the requested resource"
//     (Gone); such a kind then stays not served for MaxAge from that write,
//     whatever discovery says in the meantime (discovery lags a CRD's
//     removal), and a discovery run after that decides again;
//   - a discovery error is returned, never taken as "not served"; a group
//     whose own discovery failed (a broken aggregated API) leaves only the
//     questions about that group version unanswered (an error), the rest of
//     the snapshot stands.
//
// MaxAge 0 (Fresh) runs discovery for every ask (concurrent asks share one
// run that started after they asked).
package served

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Fresh is the MaxAge of a Catalog that runs discovery for every ask.
const Fresh time.Duration = 0

// Discoverer is the part of client-go's discovery client a Catalog uses.
type Discoverer interface {
	ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error)
}

// Catalog is what the API server serves, as one operator sees it. It is
// safe for concurrent use; the zero value with Discovery set is ready.
type Catalog struct {
	// Discovery is asked for the groups and resources the server serves.
	Discovery Discoverer
	// MaxAge bounds how old a snapshot may be when it answers (see the
	// package comment); 0 is Fresh.
	MaxAge time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time

	// run serialises discovery: askers that wait for it take the snapshot
	// it made if that is fresh enough for them.
	run  sync.Mutex
	mu   sync.Mutex
	snap *Snapshot
	// gone: kinds a write found missing, and until when they count as not
	// served.
	gone map[schema.GroupVersionKind]time.Time
}

func (c *Catalog) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Snapshot is what discovery listed at one moment, less the kinds writes
// found gone since.
type Snapshot struct {
	// Taken is when the discovery run started.
	Taken time.Time
	// lists are the served resources per group version, subresources
	// left out, in discovery order.
	lists map[schema.GroupVersion][]metav1.APIResource
	// order is the group versions in discovery order.
	order []schema.GroupVersion
	// failed are the group versions whose discovery failed.
	failed map[schema.GroupVersion]error
}

// GroupFailedError says that discovery of the group version failed: whether
// it serves the kind is not known.
type GroupFailedError struct {
	GroupVersion schema.GroupVersion
	Err          error
}

func (e *GroupFailedError) Error() string {
	return fmt.Sprintf("discovery of %s failed: %v", e.GroupVersion, e.Err)
}

func (e *GroupFailedError) Unwrap() error { return e.Err }

// Kind reports whether the snapshot lists the kind in its group version. A
// group version whose discovery failed is an error (*GroupFailedError).
func (s *Snapshot) Kind(gvk schema.GroupVersionKind) (bool, error) {
	if err, ok := s.failed[gvk.GroupVersion()]; ok {
		return false, &GroupFailedError{GroupVersion: gvk.GroupVersion(), Err: err}
	}
	for _, r := range s.lists[gvk.GroupVersion()] {
		if r.Kind == gvk.Kind {
			return true, nil
		}
	}
	return false, nil
}

// Group reports whether any version of the group is served.
func (s *Snapshot) Group(group string) bool {
	for gv := range s.lists {
		if gv.Group == group {
			return true
		}
	}
	return false
}

// Resources maps each served group to the resources it serves in any
// version (plural names, discovery order, repeated where several versions
// serve one). A group whose discovery failed in every version is left out.
func (s *Snapshot) Resources() map[string][]string {
	out := map[string][]string{}
	for _, gv := range s.order {
		if _, ok := s.lists[gv]; !ok {
			continue
		}
		if _, ok := out[gv.Group]; !ok {
			out[gv.Group] = nil
		}
		for _, r := range s.lists[gv] {
			out[gv.Group] = append(out[gv.Group], r.Name)
		}
	}
	return out
}

// Listable is a resource type that discovery lists with the list verb.
type Listable struct {
	GroupVersion schema.GroupVersion
	// Resource is the plural name, Kind the kind of its objects.
	Resource, Kind string
}

// NamespacedListable returns the namespaced resource types that can be
// listed, each group and resource once, in the first version discovery
// listed it in (the group's preferred version), in discovery order. failed
// are the group versions whose discovery failed: what they serve is not
// known, so a caller that needs every namespaced object (is a namespace
// empty?) cannot know it while failed is not empty.
func (s *Snapshot) NamespacedListable() (resources []Listable, failed []schema.GroupVersion) {
	seen := map[schema.GroupResource]bool{}
	for _, gv := range s.order {
		for _, r := range s.lists[gv] {
			gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
			if !r.Namespaced || seen[gr] || !slices.Contains(r.Verbs, "list") {
				continue
			}
			seen[gr] = true
			resources = append(resources, Listable{GroupVersion: gv, Resource: r.Name, Kind: r.Kind})
		}
	}
	for gv := range s.failed {
		failed = append(failed, gv)
	}
	sort.Slice(failed, func(i, j int) bool { return failed[i].String() < failed[j].String() })
	return resources, failed
}

// without is s less the kinds in gone.
func (s *Snapshot) without(gone []schema.GroupVersionKind) *Snapshot {
	if len(gone) == 0 {
		return s
	}
	out := &Snapshot{Taken: s.Taken, order: s.order, failed: s.failed, lists: map[schema.GroupVersion][]metav1.APIResource{}}
	for gv, rs := range s.lists {
		var keep []metav1.APIResource
		for _, r := range rs {
			if !containsKind(gone, gv.WithKind(r.Kind)) {
				keep = append(keep, r)
			}
		}
		if len(keep) == 0 && len(rs) > 0 {
			continue // the group version served only kinds now gone
		}
		out.lists[gv] = keep
	}
	return out
}

func containsKind(gvks []schema.GroupVersionKind, gvk schema.GroupVersionKind) bool {
	for _, g := range gvks {
		if g == gvk {
			return true
		}
	}
	return false
}

// Kind reports whether the API server serves the kind (see the package
// comment for how fresh the answer is).
func (c *Catalog) Kind(gvk schema.GroupVersionKind) (bool, error) {
	s, err := c.Snapshot()
	if err != nil {
		return false, err
	}
	return s.Kind(gvk)
}

// Snapshot returns a snapshot at most MaxAge old, running discovery if the
// one it holds is older or was invalidated.
func (c *Catalog) Snapshot() (*Snapshot, error) {
	asked := c.now()
	if s := c.current(asked); s != nil {
		return s, nil
	}
	c.run.Lock()
	defer c.run.Unlock()
	for {
		// Someone may have run discovery while this ask waited; and a gone
		// mark that expired during a run voids the run (see current).
		if s := c.current(asked); s != nil {
			return s, nil
		}
		taken := c.now()
		s, err := discover(c.Discovery)
		if err != nil {
			return nil, err
		}
		s.Taken = taken
		c.mu.Lock()
		c.snap = s
		c.mu.Unlock()
	}
}

// current is the held snapshot if it is fresh enough for an ask made at
// asked, less the kinds still marked gone; nil if discovery must run. An
// expired gone mark also expires every snapshot taken before it ended, so
// the kind is judged by a discovery run made after its mark.
func (c *Catalog) current(asked time.Time) *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Younger than MaxAge, or run after the ask (what a Fresh ask needs).
	if c.snap == nil || (!c.snap.Taken.After(asked.Add(-c.MaxAge)) && c.snap.Taken.Before(asked)) {
		return nil
	}
	now := c.now()
	var gone []schema.GroupVersionKind
	for gvk, until := range c.gone {
		if now.Before(until) {
			gone = append(gone, gvk)
			continue
		}
		delete(c.gone, gvk)
		if c.snap.Taken.Before(until) {
			c.snap = nil
		}
	}
	if c.snap == nil {
		return nil
	}
	return c.snap.without(gone)
}

// Gone takes err, the API server's answer to a write of a gvk object, and
// reports whether it says that the server does not serve the kind (404
// "the server could not find the requested resource": its CRD was
// removed). Such a kind counts as not served from now on for MaxAge (see
// the package comment), and the snapshot is dropped so that other kinds
// the removal took along are noticed by the next ask. A 404 about the
// namespace or about an object is not about the kind and changes nothing.
func (c *Catalog) Gone(gvk schema.GroupVersionKind, err error) bool {
	if !KindMissing(err) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone == nil {
		c.gone = map[schema.GroupVersionKind]time.Time{}
	}
	c.gone[gvk] = c.now().Add(c.MaxAge)
	c.snap = nil
	return true
}

// KindMissing reports an API server answer saying that the requested
// resource type does not exist (its CRD is gone): a 404 without a Status
// body, which client-go reports as "the server could not find the
// requested resource" with an UnexpectedServerResponse cause. A missing
// namespace or object is answered with a Status naming it, and is not
// about the kind.
func KindMissing(err error) bool {
	return apierrors.IsNotFound(err) && apierrors.IsUnexpectedServerError(err)
}

// discover runs discovery once. A group version whose discovery failed is
// recorded as failed; any other error fails the run.
func discover(d Discoverer) (*Snapshot, error) {
	_, lists, err := d.ServerGroupsAndResources()
	s := &Snapshot{lists: map[schema.GroupVersion][]metav1.APIResource{}, failed: map[schema.GroupVersion]error{}}
	if err != nil {
		var failed *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &failed) {
			return nil, fmt.Errorf("API discovery: %w", err)
		}
		for gv, gerr := range failed.Groups {
			s.failed[gv] = gerr
		}
	}
	for _, l := range lists {
		if l == nil || l.GroupVersion == "" {
			continue
		}
		gv, perr := schema.ParseGroupVersion(l.GroupVersion)
		if perr != nil {
			continue
		}
		if _, seen := s.lists[gv]; !seen {
			s.order = append(s.order, gv)
			s.lists[gv] = []metav1.APIResource{}
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource
			}
			s.lists[gv] = append(s.lists[gv], r)
		}
	}
	return s, nil
}
