// Package controller holds the CelldFleet reconciler: fetch what the fleet
// needs, build the desired objects with the pure builders, apply them, take at
// most one roll step, and report what it saw in status.
package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/roll"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/routing"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/pacing"
	"github.com/ericdev/fleetmesh/shared/served"
)

// HashAnnotation records the hash of what the operator last applied to an object.
const HashAnnotation = labels.FleetGroup + "/applied-hash"

// revisionLabel is set by the StatefulSet controller on every Pod it creates.
const revisionLabel = appsv1.ControllerRevisionHashLabelKey

// controllerName names the fleet controller's pacing metrics.
const controllerName = "celldfleet"

// FleetReconciler reconciles CelldFleets.
type FleetReconciler struct {
	Client client.Client
	// Reader reads past the cache (the manager's API reader); nil falls
	// back to Client.
	Reader   client.Reader
	Config   Config
	Applier  *apply.Applier
	State    *state.Reader
	Recorder recorder.EventRecorder
	// Now is the clock; tests replace it.
	Now func() time.Time

	// deleted remembers the UID of the member each fleet replaced last, until
	// the cache shows that Pod terminating or gone: right after a delete the
	// cache may still show it Ready, and acting on that would replace a
	// second member while the first is down.
	mu      sync.Mutex
	deleted map[types.NamespacedName]types.UID
	// gate holds a pass whose cache has yet to show the operator's own
	// writes to the fleet (its status, its finalizer) and the children it
	// created (pacing.Gate).
	gate pacing.Gate
	// Served answers whether the API server serves a kind (see servedMaxAge).
	Served *served.Catalog
	// istioCaches serve the Applier's reads of Istio's kinds while they are
	// served (see optionalCaches); nil reads them from the API server.
	istioCaches *optionalCaches
	// failures spaces the retries of each fleet's failed passes (outcome).
	failures failureBackoff
	// refusals: namespace labels the API server refused, asked again at
	// the poll (refusedDeclarations).
	refusals refusedDeclarations
}

// SetupWithManager builds the reconciler from cfg and registers it.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	disc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	r := &FleetReconciler{
		Served: &served.Catalog{Discovery: disc, MaxAge: servedMaxAge},
		Client: mgr.GetClient(),
		Reader: mgr.GetAPIReader(),
		Config: cfg,
		// The Applier reads the live objects of the kinds this controller
		// watches from the manager's informers (see cachedKinds), so an
		// unchanged fleet costs no request to the API server.
		Applier:  &apply.Applier{Client: mgr.GetClient(), FieldManager: names.Operator, HashAnnotation: HashAnnotation, Cache: mgr.GetCache()},
		State:    state.NewReader(cfg.StateTimeout),
		Recorder: mgr.GetEventRecorder(names.Operator),
		Now:      time.Now,
	}
	// Istio's kinds come from caches of their own, which run only while
	// Istio's API is served.
	r.istioCaches = newOptionalCaches(mgr, cfg, r.kindGone)
	if err := mgr.Add(r.istioCaches); err != nil {
		return err
	}
	r.Applier.Cache = routedReader{Reader: mgr.GetCache(), optional: r.istioCaches}
	// The fleets' gauges are read from their status in the cache at scrape time.
	fleetSeries.use(mgr.GetCache(), mgr.Elected())
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers the reconciler's watches.
func (r *FleetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.gate.Controller = controllerName
	b := ctrl.NewControllerManagedBy(mgr)
	owned := []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}, &corev1.ServiceAccount{}, &networkingv1.NetworkPolicy{}, &networkingv1.Ingress{}}
	// Watch HTTPRoutes (for their status) only where the Gateway API is
	// installed at start-up; elsewhere routing polls while it waits, and a
	// later install is found by discovery without a restart. A failed
	// discovery counts as not installed: routing polls then too.
	if ok, err := r.Served.Kind(routing.HTTPRouteGVK); err == nil && ok {
		route := &unstructured.Unstructured{}
		route.SetGroupVersionKind(routing.HTTPRouteGVK)
		owned = append(owned, route)
	}
	workers := r.Config.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}
	b = b.For(&v1alpha1.CelldFleet{}, builder.WithPredicates(statusOnlyDropped)).WithOptions(controller.Options{MaxConcurrentReconciles: workers})
	for _, o := range owned {
		drop := []predicate.Predicate{ownCreatesDropped}
		if _, ok := o.(*appsv1.StatefulSet); ok {
			drop = append(drop, countersOnlyDropped)
		}
		b = b.Owns(o, builder.WithPredicates(drop...))
	}
	if r.Applier != nil && r.Applier.Cache != nil {
		// Exactly the kinds watched above: their informers exist, so reading
		// them starts no new (unrestricted) cache.
		kinds, err := cachedKinds(mgr.GetScheme(), owned)
		if err != nil {
			return err
		}
		if r.istioCaches != nil {
			for _, gvk := range istioKinds {
				kinds = append(kinds, gvk.GroupKind())
			}
			b = b.WatchesRawSource(r.istioCaches.source(r.served)).
				WatchesRawSource(source.Channel(r.istioCaches.readOnlyEvents, handler.EnqueueRequestsFromMapFunc(r.fleetsHeldByDestinationRules)))
		}
		r.Applier.CachedKinds = kinds
	}
	clients, err := clientPodSource(mgr, r.Config)
	if err != nil {
		return err
	}
	return b.
		// Client Pods carry the wiring graph isolation strict admits.
		WatchesRawSource(clients).
		// Member claims are read (growClaims), and no change of theirs needs
		// a reconcile. Without a source their informer would start at the
		// first read, after the workers, and the first pass over the fleets
		// after a restart would wait for it; as a source it lists with the
		// others, before the workers start.
		WatchesRawSource(source.Kind(mgr.GetCache(), client.Object(&corev1.PersistentVolumeClaim{}), handler.Funcs{})).
		// Member Pods belong to the StatefulSet; map them to their fleet by label.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToFleet), builder.WithPredicates(unreadPodChangesDropped)).
		// Namespace labels carry the mesh contract (enrollment, state, edges).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.namespaceToFleets), builder.WithPredicates(namespaceLabelsOnly)).
		Complete(r)
}

// cachedKinds are the group-kinds of the watched objects.
func cachedKinds(scheme *runtime.Scheme, objs []client.Object) ([]schema.GroupKind, error) {
	var out []schema.GroupKind
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, scheme)
		if err != nil {
			return nil, err
		}
		out = append(out, gvk.GroupKind())
	}
	return out, nil
}

func podToFleet(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[labels.Name] != names.Runtime || l[labels.Instance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[labels.Instance]}}}
}

// observed is what one reconcile saw, the input of status.
type observed struct {
	blocked     *blockage
	sts         *appsv1.StatefulSet
	pods        []corev1.Pod
	reports     map[string]state.Result
	decision    roll.Decision
	stsSettling bool
	// pausedChanges is set when maintenance is paused and the spec asks for
	// member changes that are being held back.
	pausedChanges bool
	// heldMesh is the mesh change (joining or leaving) that the maintenance
	// pause holds back from the member template; "" when there is none.
	heldMesh meshChange
	// templateHeld: the live member template is kept (not the pause's
	// doing): a DestinationRule holds a mesh roll, or could not be read.
	templateHeld bool
	// mutualTLSHold is the blockage of DestinationRules that force
	// ISTIO_MUTUAL toward the fleet while it is to roll into or out of the
	// mesh (mutualTLSHold); nil when none holds it.
	mutualTLSHold *blockage
	// diskResize explains member claims smaller than spec.storage.size.
	diskResize string
	// mesh is where the fleet stands with respect to the Istio mesh.
	mesh mesh.State
	// routing is what the RoutingReady condition says.
	routing routingOutcome
	// namespace and intent: the namespace's mesh state and what the fleet
	// wants from the mesh given it.
	namespace namespaceView
	intent    mesh.Intent
	// sharedServiceAccount: Pods other than members that run as the
	// fleet's ServiceAccount (asked for ambient AllowAll fleets only).
	sharedServiceAccount []string
	// wiring: the identities isolation strict admits on 8080 (Strict false
	// outside isolation strict).
	wiring mesh.Wiring
	// formerAccounts: ServiceAccounts other than the spec's that members run
	// as or the live template names (mesh.FormerAccounts).
	formerAccounts []string
	// failed is the step that failed, if one did; what the reconcile did
	// not get to see is then reported as last known.
	failed *stepError
	// membersCreated: this pass created the members' StatefulSet; the
	// StatefulSet controller has not tried to create the members yet.
	membersCreated bool
	// refusal: why members the StatefulSet should run are missing, when
	// the API server refuses them (observeRefusal).
	refusal *memberRefusal
	// declared is what the namespace declarations step found (see
	// setNamespaceCondition); its zero value: the step was not reached.
	declared namespaceOutcome
	// meshJudged: the pass got past the steps MeshReady is computed from
	// (sharingServiceAccount); a failed pass that did not keeps MeshReady
	// as it was.
	meshJudged bool
}

type blockage struct {
	reason  v1alpha1.ConditionReason
	message string
}

// +kubebuilder:rbac:groups=celld.eric.dev,resources=celldfleets,verbs=get;list;watch
// +kubebuilder:rbac:groups=celld.eric.dev,resources=celldfleets/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=celld.eric.dev,resources=celldfleets/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services;serviceaccounts,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one fleet closer to its spec.
func (r *FleetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	fleet := &v1alpha1.CelldFleet{}
	if err := r.Client.Get(ctx, req.NamespacedName, fleet); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			r.gate.Forget(req.NamespacedName)
			r.failures.forget(req.NamespacedName)
			r.refusals.forget(req.NamespacedName)
			forgetMetrics(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if res, wait := r.gate.Defer(ctx, r.Client, req.NamespacedName, fleet); wait {
		return res, nil
	}
	if fleet.DeletionTimestamp != nil {
		// Owned objects go with the fleet through garbage collection; disks
		// follow spec.storage.whenDeleted through the StatefulSet. Labels on
		// the namespace are not owned: withdraw them.
		return ctrl.Result{}, r.withdrawDeclarations(ctx, fleet)
	}

	obs := &observed{}
	err := r.reconcileFleet(ctx, fleet, obs)
	var conflict *apply.ConflictError
	var step *stepError
	switch {
	case errors.As(err, &conflict):
		obs.blocked = &blockage{reason: v1alpha1.ReasonOwnershipConflict, message: conflict.Error()}
		r.Recorder.Eventf(fleet, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonOwnershipConflict), "Apply", "%s", conflict.Error())
		err = nil
	case errors.As(err, &step):
		obs.failed = step
	case err != nil:
		obs.failed = &stepError{step: "reconcile", err: err}
	}
	if obs.failed != nil {
		r.readMemberFacts(ctx, fleet, obs)
	}
	if statusErr := r.updateStatus(ctx, fleet, obs); statusErr != nil && err == nil {
		err = statusErr
	}
	return r.outcome(ctx, req.NamespacedName, obs, err), nil
}

// stepError is a reconcile step that failed: status names the step.
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// stepStatefulSet is the step that applies the members' StatefulSet; a
// refusal of it is reported on Provisioning (statefulSetRefused).
const stepStatefulSet = "applying the StatefulSet"

func failed(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step: step, err: err}
}

func (r *FleetReconciler) reconcileFleet(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) error {
	pods, err := r.memberPods(ctx, fleet)
	if err != nil {
		return failed("listing member Pods", err)
	}
	obs.pods = pods
	live, err := r.liveStatefulSet(ctx, fleet)
	if err != nil {
		return failed("reading the StatefulSet", err)
	}
	// The members' StatefulSet as it stands, until this pass applies it: a
	// pass that fails before reports the members against it.
	obs.sts = live
	view, err := r.observeNamespace(ctx, fleet)
	if err != nil {
		return failed("reading the namespace", err)
	}
	obs.namespace = view
	obs.intent = mesh.IntentFor(fleet, view.state)
	obs.heldMesh = heldMeshChange(fleet, live, obs.intent)
	// A DestinationRule forcing ISTIO_MUTUAL toward the fleet holds a roll
	// into or out of the mesh: decided here, before anything changes the
	// template, and reported once the steps that never restart a member ran.
	mutualTLSHold, mutualTLSErr := r.mutualTLSHold(ctx, fleet, live, obs.intent)
	obs.templateHeld = mutualTLSHold != nil || mutualTLSErr != nil
	meshTemplate := live
	if obs.heldMesh != "" || obs.templateHeld {
		// The members run the held template, which is not the one the mesh
		// decision judges proxies against: none is missing or unwanted yet.
		meshTemplate = nil
	}
	obs.mesh = observeMesh(fleet, pods, meshTemplate, obs.intent)
	obs.formerAccounts = formerAccounts(fleet, pods, live)
	// Until the routing step judges the route, RoutingReady stays as it was.
	obs.routing = routingOutcome{keep: true}

	// Networking and routing are reconciled whatever else holds the fleet
	// back, including maintenance.paused: they never restart a member.
	// Routing does not depend on the Services and NetworkPolicy: it runs
	// even when they failed (a foreign Service with the fleet's name), so a
	// routing change is applied while that failure is reported.
	networkErr := r.reconcileNetworking(ctx, fleet, obs)
	// A route the API server refuses is reported in RoutingReady; any other
	// routing failure is returned at the end (deferredErr), after the
	// members had their turn: routing is separate from the fleet's own work.
	var deferredErr error
	if obs.routing, err = r.reconcileRouting(ctx, fleet, obs); err != nil {
		deferredErr = failed("routing", err)
		obs.routing = routingOutcome{keep: true}
	}
	if networkErr != nil {
		return failed("applying Services and NetworkPolicy", networkErr)
	}

	// Even a fleet outside the mesh asks: it may hold Istio objects to
	// clean up (it was ambient, or a reconcile failed halfway), and that is
	// decided from what exists. The mapper answers from memory once Istio's
	// group is known.
	istio, err := r.istioServed()
	if err != nil {
		return failed("discovering Istio's API", err)
	}
	r.istioCaches.follow(r.served)
	if needsIstioAPI(obs.mesh) && !istio {
		obs.blocked = istioAPIUnavailable(fleet)
		return deferredErr
	}
	if err := r.recordOptIn(ctx, fleet, obs.intent); err != nil {
		return failed("recording the mesh opt-in", err)
	}
	if obs.wiring, err = r.resolveWiring(ctx, fleet, obs); err != nil {
		var unreadable *unreadableSource
		if !errors.As(err, &unreadable) {
			return failed("resolving the wiring graph", err)
		}
		// The wiring holds what the live policy admits from the routing
		// source: the members need not wait for a read that keeps failing.
		deferredErr = errors.Join(deferredErr, failed("resolving the wiring graph", err))
	}
	if err := r.reconcileMeshPolicies(ctx, fleet, obs, istio); err != nil {
		return failed("mesh policies", err)
	}
	if obs.sharedServiceAccount, err = r.sharingServiceAccount(ctx, fleet, obs); err != nil {
		return failed("mesh policies", err)
	}
	obs.meshJudged = true
	// The namespace labels are a request to the mesh operator, not a
	// precondition of the members: a refused write is reported in
	// NamespaceDeclared, any other failure after the members had their
	// turn, as routing's.
	decl := declaration(fleet, obs.intent, obs.mesh, r.Config.OperatorNamespace)
	if err := r.reconcileDeclarations(ctx, fleet, obs, view, decl); err != nil {
		deferredErr = errors.Join(deferredErr, failed("namespace declarations", err))
	}

	if !r.Config.NetworkPolicyEnforced {
		obs.blocked = &blockage{
			reason: v1alpha1.ReasonNetworkPolicyNotConfirmed,
			message: "No member Pods are created until an administrator confirms that this cluster's CNI enforces NetworkPolicy: " +
				"members rely on the fleet NetworkPolicy to restrict who reaches ports 8080 and 8081. Verify enforcement, then set the " +
				"fleet-operator chart value networkPolicyEnforced=true (operator flag --network-policy-enforced).",
		}
		return deferredErr
	}

	if mutualTLSErr != nil {
		return failed("reading DestinationRules", mutualTLSErr)
	}
	if mutualTLSHold != nil {
		obs.blocked, obs.mutualTLSHold = mutualTLSHold, mutualTLSHold
	}

	if err := r.reconcileServiceAccount(ctx, fleet, live, obs.formerAccounts); err != nil {
		return failed("ServiceAccount", err)
	}
	sts, held, err := r.reconcileStatefulSet(ctx, fleet, live, obs)
	if err != nil {
		return failed(stepStatefulSet, err)
	}
	obs.pausedChanges = held
	obs.sts = sts
	// Until the StatefulSet controller has seen our template, its update
	// revision is the old one and a roll decision would be wrong.
	obs.stsSettling = sts.Status.ObservedGeneration < sts.Generation

	if !obs.membersCreated {
		// A StatefulSet made by this pass has not been tried yet.
		obs.refusal = r.observeRefusal(ctx, sts, pods)
	}
	obs.reports = r.readStates(ctx, pods)
	obs.diskResize = r.growClaims(ctx, fleet, pods)
	if obs.stsSettling {
		return deferredErr
	}
	if err := r.rollStep(ctx, fleet, obs); err != nil {
		return failed("roll", err)
	}
	return deferredErr
}

func (r *FleetReconciler) reconcileNetworking(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) error {
	params := network.Params{
		OperatorNamespace: r.Config.OperatorNamespace,
		OperatorPodLabels: r.Config.OperatorPodLabels(),
	}
	var err error
	if params.IstiodNamespaces, err = r.istiodNamespaces(ctx, fleet, obs); err != nil {
		return err
	}
	params.HBONE = hboneOpen(obs)
	np, err := network.NetworkPolicy(fleet, params)
	if err != nil {
		return err
	}
	for _, obj := range []client.Object{network.AppService(fleet), network.PeerService(fleet), np} {
		if err := r.apply(ctx, fleet, obj); err != nil {
			return err
		}
	}
	return nil
}

// liveStatefulSet is the members' StatefulSet as the cache shows it, nil if
// there is none yet.
func (r *FleetReconciler) liveStatefulSet(ctx context.Context, fleet *v1alpha1.CelldFleet) (*appsv1.StatefulSet, error) {
	live := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: fleet.Namespace, Name: names.StatefulSet(fleet.Name)}, live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return live, err
}

func (r *FleetReconciler) apply(ctx context.Context, fleet *v1alpha1.CelldFleet, obj client.Object) error {
	_, _, err := r.applyAndRead(ctx, fleet, obj)
	return err
}

// applyAndRead is apply that also returns the object as it stands after it
// (apply.Applier.ApplyAndRead). A child it created is recorded in the
// gate: the fleet's next pass waits until the cache holds it, rather than
// finding it missing, sending the refused create-only apply and reading it
// from the API server.
func (r *FleetReconciler) applyAndRead(ctx context.Context, fleet *v1alpha1.CelldFleet, obj client.Object) (apply.Result, client.Object, error) {
	res, after, err := r.Applier.ApplyAndRead(ctx, obj, fleet)
	if err == nil && res == apply.Created {
		if typed := r.typedCopy(after); typed != nil {
			r.gate.Wrote(client.ObjectKeyFromObject(fleet), typed)
		}
	}
	return res, after, r.applied(ctx, obj, res, err)
}

// typedCopy is obj as its typed kind, which the gate reads from the
// informer this controller runs (an unstructured read would start another
// one); nil for a kind the scheme does not know (an HTTPRoute, Istio's).
func (r *FleetReconciler) typedCopy(obj client.Object) client.Object {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj
	}
	typed, err := r.Client.Scheme().New(u.GroupVersionKind())
	if err != nil {
		return nil
	}
	if _, isU := typed.(*unstructured.Unstructured); isU {
		return nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil
	}
	o, ok := typed.(client.Object)
	if !ok {
		return nil
	}
	return o
}

// applied notes what an apply did: an error may say that the kind's API is
// gone (kindGone), and a write is logged.
func (r *FleetReconciler) applied(ctx context.Context, obj client.Object, res apply.Result, err error) error {
	if err != nil {
		r.kindGone(obj.GetObjectKind().GroupVersionKind(), err)
		return err
	}
	if res != apply.Unchanged {
		log.FromContext(ctx).Info("applied", "kind", obj.GetObjectKind().GroupVersionKind().Kind, "name", obj.GetName(), "result", res)
	}
	return nil
}

// reconcileServiceAccount makes the fleet's default ServiceAccount while
// the members run as it, and deletes the one the operator made once
// nothing can run as it any more (defaultAccountInUse).
func (r *FleetReconciler) reconcileServiceAccount(ctx context.Context, fleet *v1alpha1.CelldFleet, live *appsv1.StatefulSet, former []string) error {
	var conflict *apply.ConflictError
	if sa := members.ServiceAccount(fleet); sa != nil {
		err := r.apply(ctx, fleet, sa)
		if errors.As(err, &conflict) && fleet.Spec.ServiceAccountName == sa.Name {
			return nil // the spec names an account of someone else's that happens to bear the fleet's name
		}
		return err
	}
	if defaultAccountInUse(fleet, live, former) {
		return nil
	}
	_, err := r.Applier.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: names.ServiceAccount(fleet.Name)}}, fleet)
	if errors.As(err, &conflict) {
		return nil // not ours (perhaps the very account the spec names): leave it
	}
	return err
}

// defaultAccountInUse reports whether something may still run as the
// fleet's default ServiceAccount after the spec named another: a member
// Pod (a terminating one included) or the live StatefulSet template, which
// a paused fleet holds and from which the StatefulSet controller recreates
// an evicted member; or a template the StatefulSet controller has yet to
// observe, so that it may still create a member from an older one.
// Deleting the account under any of them would stop their bound tokens
// from validating and fail the Pod's re-creation.
func defaultAccountInUse(fleet *v1alpha1.CelldFleet, live *appsv1.StatefulSet, former []string) bool {
	if slices.Contains(former, names.ServiceAccount(fleet.Name)) {
		return true
	}
	return live != nil && live.Status.ObservedGeneration < live.Generation
}

// membersEvent is the event recorded when an apply of the members'
// StatefulSet changed it.
var membersEvent = map[apply.Result]v1alpha1.EventReason{
	apply.Created: v1alpha1.EventMembersCreated,
	apply.Updated: v1alpha1.EventMembersUpdated,
}

// reconcileStatefulSet applies the members' StatefulSet, unless maintenance
// is paused and it already exists: a paused fleet keeps the template and
// replica count its members run, so not even a recreated Pod picks up a
// change. held reports that the spec asks for changes being held back;
// obs.membersCreated that this apply created the StatefulSet.
func (r *FleetReconciler) reconcileStatefulSet(ctx context.Context, fleet *v1alpha1.CelldFleet, live *appsv1.StatefulSet, obs *observed) (sts *appsv1.StatefulSet, held bool, err error) {
	desired := memberStatefulSet(fleet, obs.intent)
	if live != nil {
		if !metav1.IsControlledBy(live, fleet) {
			return nil, false, &apply.ConflictError{Kind: "StatefulSet", Namespace: live.Namespace, Name: live.Name, Owner: fleet.Name, Holder: apply.HolderOf(live)}
		}
		if fleet.Spec.Maintenance.Paused {
			held = !equality.Semantic.DeepDerivative(desired.Spec.Template, live.Spec.Template) ||
				*desired.Spec.Replicas != *live.Spec.Replicas
			return live, held, nil
		}
		if obs.templateHeld {
			// A DestinationRule holds the mesh roll (mutualTLSHold): not
			// even a recreated member may pick up the new template.
			return live, false, nil
		}
		// Claim templates are immutable once the StatefulSet exists; a
		// larger spec.storage.size is applied to the claims themselves.
		desired.Spec.VolumeClaimTemplates = live.Spec.VolumeClaimTemplates
	}
	// The StatefulSet as it stands after the apply: a new one is the API
	// server's answer to its create, which the cache may not hold yet.
	res, after, err := r.applyAndRead(ctx, fleet, desired)
	if err != nil {
		return nil, false, err
	}
	if res == apply.Created {
		obs.membersCreated = true
	}
	if res != apply.Unchanged {
		r.Recorder.Eventf(fleet, desired, corev1.EventTypeNormal, string(membersEvent[res]), "Apply",
			"%s the members' StatefulSet: %d replica(s) of %s", res, *desired.Spec.Replicas, fleet.Spec.Image)
	}
	if sts, ok := after.(*appsv1.StatefulSet); ok {
		return sts, false, nil
	}
	u, ok := after.(*unstructured.Unstructured)
	if !ok {
		return nil, false, fmt.Errorf("StatefulSet %s: the apply returned a %T", desired.Name, after)
	}
	sts = &appsv1.StatefulSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, sts); err != nil {
		return nil, false, err
	}
	return sts, false, nil
}

func (r *FleetReconciler) memberPods(ctx context.Context, fleet *v1alpha1.CelldFleet) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(fleet.Namespace), client.MatchingLabels(names.Selector(fleet.Name))); err != nil {
		return nil, err
	}
	pods := list.Items
	sort.Slice(pods, func(i, j int) bool { return ordinal(pods[i].Name) < ordinal(pods[j].Name) })
	return pods, nil
}

// growClaims raises each member claim's request to spec.storage.size.
// Whether the volume really grows is up to the storage class
// (allowVolumeExpansion); a refusal is reported, never retried in a loop.
func (r *FleetReconciler) growClaims(ctx context.Context, fleet *v1alpha1.CelldFleet, pods []corev1.Pod) string {
	if fleet.Spec.Storage == nil {
		return ""
	}
	want := fleet.Spec.Storage.Size
	var problems []string
	for _, p := range pods {
		pvc := &corev1.PersistentVolumeClaim{}
		key := types.NamespacedName{Namespace: fleet.Namespace, Name: members.DataVolume + "-" + p.Name}
		if err := r.Client.Get(ctx, key, pvc); err != nil {
			continue // not created yet: the StatefulSet controller makes it
		}
		have := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		if have.Cmp(want) >= 0 {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
		if err := r.Client.Patch(ctx, pvc, patch); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", key.Name, err))
			continue
		}
		r.Recorder.Eventf(fleet, pvc, corev1.EventTypeNormal, string(v1alpha1.EventDiskResizeRequested), "Resize", "Requested %s for claim %s (was %s)", want.String(), pvc.Name, have.String())
	}
	if len(problems) > 0 {
		return "Cannot grow member disks to " + want.String() + ": " + strings.Join(problems, "; ")
	}
	return ""
}

func (r *FleetReconciler) readStates(ctx context.Context, pods []corev1.Pod) map[string]state.Result {
	targets := make([]state.Target, 0, len(pods))
	for _, p := range pods {
		if readable(p) {
			targets = append(targets, state.Target{Key: p.Name, IP: p.Status.PodIP})
		}
	}
	return r.State.ReadAll(ctx, targets, names.PeerPort)
}

// rollStep replaces at most one outdated member.
func (r *FleetReconciler) rollStep(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) error {
	key := client.ObjectKeyFromObject(fleet)
	in := r.rollInput(fleet, obs)
	if pendingDelete := r.pendingDelete(key); pendingDelete != "" && !podWithUID(obs.pods, pendingDelete) {
		r.forget(key)
	}
	obs.decision = roll.Next(in)
	if obs.decision.Replace == "" {
		return nil
	}
	pod := podNamed(obs.pods, obs.decision.Replace)
	uid := pod.UID
	err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // already gone or replaced: the next reconcile sees the truth
	}
	if err != nil {
		return fmt.Errorf("replacing member %s: %w", pod.Name, err)
	}
	replacementsMetric.WithLabelValues(fleet.Namespace, fleet.Name).Inc()
	r.mu.Lock()
	if r.deleted == nil {
		r.deleted = map[types.NamespacedName]types.UID{}
	}
	r.deleted[key] = uid
	r.mu.Unlock()
	log.FromContext(ctx).Info("replacing member", "pod", pod.Name, "uid", uid, "from", pod.Labels[revisionLabel], "to", in.TargetRevision, "members", in.Members)
	r.Recorder.Eventf(fleet, pod, corev1.EventTypeNormal, string(v1alpha1.EventMemberReplaced), "Roll",
		"Replacing member %s (revision %s) with revision %s; its disk is kept", pod.Name, pod.Labels[revisionLabel], in.TargetRevision)
	return nil
}

// rollInput is what the roll decides from: the StatefulSet's replicas and
// update revision, and each member as its Pod and /state show it.
func (r *FleetReconciler) rollInput(fleet *v1alpha1.CelldFleet, obs *observed) roll.Input {
	in := roll.Input{
		Replicas:       int(*obs.sts.Spec.Replicas),
		TargetRevision: obs.sts.Status.UpdateRevision,
		Paused:         fleet.Spec.Maintenance.Paused,
	}
	pendingDelete := r.pendingDelete(client.ObjectKeyFromObject(fleet))
	for _, p := range obs.pods {
		m := roll.Member{
			Name:        p.Name,
			Ordinal:     ordinal(p.Name),
			Revision:    p.Labels[revisionLabel],
			Terminating: p.DeletionTimestamp != nil || p.UID == pendingDelete,
			Ready:       podReady(&p),
			// A member that should run a proxy but has none is not done:
			// the roll waits instead of spreading a broken injection.
			Healthy: healthy(obs.reports[p.Name]) && !slices.Contains(obs.mesh.MissingProxy, p.Name),
		}
		in.Members = append(in.Members, m)
	}
	return in
}

func (r *FleetReconciler) pendingDelete(key types.NamespacedName) types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted[key]
}

func (r *FleetReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.deleted, key)
}

// updateStatus writes status only when it differs from what is stored.
// The cache shows the status this controller wrote last (the gate holds a
// pass until it does), so comparing with it never sends the same status
// twice.
func (r *FleetReconciler) updateStatus(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) error {
	next := computeStatus(fleet, obs, r.Now())
	if equality.Semantic.DeepEqual(fleet.Status, next) {
		return nil
	}
	if r.statusVerdict(fleet.Status, next, obs) == pacing.Hold {
		return nil // the look the requeue table asks for writes it (or the event expected before it)
	}
	updated := fleet.DeepCopy()
	updated.Status = next
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(fleet)); err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	r.gate.Wrote(client.ObjectKeyFromObject(fleet), updated)
	return nil
}

func allAvailable(fleet *v1alpha1.CelldFleet, obs *observed) bool {
	want := int(derefReplicas(fleet))
	avail := 0
	for _, p := range obs.pods {
		if p.DeletionTimestamp == nil && podReady(&p) && healthy(obs.reports[p.Name]) {
			avail++
		}
	}
	return avail == want && len(obs.pods) == want
}

func derefReplicas(f *v1alpha1.CelldFleet) int32 {
	if f.Spec.Replicas == nil {
		return 3
	}
	return *f.Spec.Replicas
}

func healthy(r state.Result) bool { return r.Err == nil && r.Report != nil && r.Report.Healthy }

func podReady(p *corev1.Pod) bool {
	c := readyCondition(p)
	return c != nil && c.Status == corev1.ConditionTrue
}

// readyCondition is the Pod's Ready condition, nil while it has none.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func ordinal(pod string) int {
	i := strings.LastIndexByte(pod, '-')
	n, err := strconv.Atoi(pod[i+1:])
	if err != nil {
		return -1
	}
	return n
}

func podNamed(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

func podWithUID(pods []corev1.Pod, uid types.UID) bool {
	for i := range pods {
		if pods[i].UID == uid && pods[i].DeletionTimestamp == nil {
			return true
		}
	}
	return false
}
