package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/roll"
	"github.com/ericdev/fleetmesh/shared/authzeval"
	istiopolicy "github.com/ericdev/fleetmesh/shared/policy"
)

// outcome ends a pass. A failed step is already in status (Reconciled, and
// the members' facts read regardless: readMemberFacts); the fleet is looked
// at again after a backoff of its own, and never later than its next look
// nor its /state interval. Returning the error instead would hand the fleet
// to the work queue's backoff, which grows toward 1,000 s and replaces the
// periodic look: a step that keeps failing (a policy refusing a write)
// froze the fleet with the status of its last good pass.
func (r *FleetReconciler) outcome(ctx context.Context, key types.NamespacedName, obs *observed, err error) ctrl.Result {
	look := r.look(obs)
	next := look.After
	retry := r.failures.next(key, err)
	if err == nil {
		return ctrl.Result{RequeueAfter: next, Priority: look.Priority}
	}
	after := min(retry, next, r.Config.StateInterval)
	failedPassesMetric.Inc()
	log.FromContext(ctx).Error(err, "Reconcile failed; status says which step", "retryIn", after)
	// A retry is a look, not an event: events of other fleets go first.
	return ctrl.Result{RequeueAfter: after, Priority: ptr.To(handler.LowPriority)}
}

// failureBackoff spaces the retries of a fleet's consecutive failed passes:
// 1 s, doubling, at most maxFailureBackoff; a pass that succeeds resets it.
type failureBackoff struct {
	mu sync.Mutex
	n  map[types.NamespacedName]int
}

const maxFailureBackoff = 30 * time.Second

func (b *failureBackoff) next(key types.NamespacedName, err error) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.n, key)
		return 0
	}
	if b.n == nil {
		b.n = map[types.NamespacedName]int{}
	}
	d := time.Second << min(b.n[key], 5)
	b.n[key]++
	return min(d, maxFailureBackoff)
}

// forget drops a deleted fleet's count.
func (b *failureBackoff) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.n, key)
}

// readMemberFacts reads, for a pass that failed a step before it read
// them, what the members show: their /state and where a roll stands
// against the live StatefulSet (decided, never acted on). Status then
// reports them as they are, not as the last good pass saw them: a member
// that stopped being healthy while a step kept failing showed Ready=True.
// Nothing is read when the pass failed before it observed the members and
// the namespace (listing the Pods, reading the StatefulSet or the
// namespace): status then keeps the last known facts.
func (r *FleetReconciler) readMemberFacts(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) {
	if obs.reports != nil || obs.namespace.ns == nil || obs.blocked != nil {
		return
	}
	obs.reports = r.readStates(ctx, obs.pods)
	if obs.sts == nil {
		return
	}
	obs.stsSettling = obs.sts.Status.ObservedGeneration < obs.sts.Generation
	if !obs.stsSettling {
		obs.decision = roll.Next(r.rollInput(fleet, obs))
	}
}

// unreadableSource: under isolation strict the API server refused the
// operator the routing source's Pods (typically a source namespace outside
// the chart's fleetNamespaces, where the operator has no Role). Their
// identities are unknown, not absent: FLEET-mesh keeps admitting on 8080
// those of the source's namespace it admits now (none for a new policy),
// and the rest of the fleet goes on; the refusal is reported.
type unreadableSource struct {
	namespace string
	err       error
}

func (e *unreadableSource) Error() string {
	return fmt.Sprintf("%v; the identities from routing source namespace %s that the fleet's AuthorizationPolicy admits on port %d are kept as they are "+
		"(none for a new fleet) until the operator may list Pods there (add %s to the chart's fleetNamespaces)", e.err, e.namespace, names.AppPort, e.namespace)
}

func (e *unreadableSource) Unwrap() error { return e.err }

// heldSourceCallers is what the live FLEET-mesh admits on the application
// port from namespace, when listing the routing source's Pods there failed
// with listErr. Only a refusal is held (a refusal lasts; anything else is a
// failed step as before); the policy is read past the cache, so a policy
// the cache has yet to show is not taken for none.
func (r *FleetReconciler) heldSourceCallers(ctx context.Context, fleet *v1alpha1.CelldFleet, namespace string, listErr error) ([]string, error) {
	if !refused(listErr) {
		return nil, listErr
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(mesh.AuthorizationPolicyKind)
	err := r.freshReader().Get(ctx, types.NamespacedName{Namespace: fleet.Namespace, Name: mesh.PolicyName(fleet.Name)}, live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w; reading the live policy to keep what it admits from %s: %w", listErr, namespace, err)
	}
	prefix := istiopolicy.Principal(r.Config.IstioTrustDomain, namespace, "")
	var held []string
	for _, rule := range authzeval.FromUnstructured(live, nil).Rules {
		if !slices.Contains(rule.To, names.AppPort) {
			continue
		}
		for _, src := range rule.From {
			for _, p := range src.Principals {
				if strings.HasPrefix(p, prefix) {
					held = append(held, p)
				}
			}
		}
	}
	return held, nil
}
