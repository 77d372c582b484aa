// Package controller holds the ServiceMesh reconciler.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/metrics"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/pacing"
	"github.com/ericdev/fleetmesh/shared/served"
)

// Phases shown by kubectl get.
const (
	PhaseRefused       = "Refused"
	PhasePreviewLocked = "PreviewLocked"
	// PhaseDeferred: OpenShift Service Mesh 2.x was found; the operator stands aside.
	PhaseDeferred = "Deferred"
	// PhaseBlocked: nothing happens until the user acts (see the Ready condition).
	PhaseBlocked = "Blocked"
	// PhaseProgressing: installing, or waiting for the control plane.
	PhaseProgressing = "Progressing"
	PhaseReady       = "Ready"
	// PhaseError: the last reconcile failed; it is retried with backoff.
	PhaseError    = "Error"
	PhaseDeleting = "Deleting"
)

// Finalizer holds a ServiceMesh that manages a control plane until its
// teardown is done: owner references alone cannot uninstall a Helm release,
// remove CRDs, or wait for the Sail Operator to finish before it is removed.
const Finalizer = labels.MeshGroup + "/control-plane"

// FieldManager is the operator's server-side apply field manager.
const FieldManager = "mesh-operator"

// Requeue intervals. The Sail kinds are watched once their API is served
// (sailWatch; they may not exist when the operator starts), so waiting on
// Sail resources needs no timer. istiod, Cilium, the Sail installation and
// Pods' capture are not watched: they are re-read on a timer, often while
// converging, rarely once settled.
const (
	// lockedRecheck is how often a locked mesh looks at the license Secret again:
	// the operator may only get that one Secret (no watch), and adding a license
	// should take effect without a restart.
	lockedRecheck     = 30 * time.Second
	convergingRecheck = 5 * time.Second
	// licenseUnreadableRecheck: how soon a license Secret that could not be
	// read is read again.
	licenseUnreadableRecheck = 10 * time.Second
	// licenseMissingGrace: how long enrolled namespaces are kept after the
	// license Secret disappeared, so that a renewal done as delete + create
	// (kubectl replace --force, a GitOps tool recreating it) releases nothing.
	licenseMissingGrace = 10 * time.Minute
	settledRecheck      = 2 * time.Minute
)

// HelmClient is the part of sailinstall.Helm the reconciler uses.
type HelmClient interface {
	Get() (*sailinstall.Release, error)
	Install(ctx context.Context, ch *sailinstall.Chart, values map[string]any) error
	Upgrade(ctx context.Context, ch *sailinstall.Chart, values map[string]any) error
	Rollback(revision int) error
	Uninstall() error
	// GetLegacy, AdoptLegacy and RenderDigest check a stored release before
	// the operator acts on it (sailrelease.go).
	GetLegacy() (*sailinstall.Release, error)
	AdoptLegacy(revision int) error
	RenderDigest(ctx context.Context, ch *sailinstall.Chart, values map[string]any) (string, error)
}

// ServiceMeshReconciler reconciles the cluster's ServiceMesh.
type ServiceMeshReconciler struct {
	// Client writes, and reads ServiceMeshes from the cache.
	Client client.Client
	// Reader reads everything else uncached: the license Secret (the
	// operator may get that one Secret only, so it cannot watch Secrets),
	// detection's targeted reads and the Sail CRs.
	Reader client.Reader
	// Served answers which APIs the server serves. Detection decides from
	// it whether to install the Sail operator, whether OpenShift Service
	// Mesh 2 or Cilium is present, and the finalizer whether Sail objects
	// are left to delete: decisions that install or remove things, taken
	// for the one ServiceMesh a cluster has. So its answers are Fresh (a
	// discovery run per ask, two requests with aggregated discovery), not
	// the few seconds old snapshot the fleet operator's many fleets share.
	Served *served.Catalog
	Helm   HelmClient
	// HTTP fetches the Sail chart; nil uses http.DefaultClient.
	HTTP     *http.Client
	Config   Config
	Recorder recorder.EventRecorder
	Now      func() time.Time
	Metrics  *metrics.License

	chartMu     sync.Mutex
	chart       *sailinstall.Chart
	chartDigest string
	chartFrom   sailinstall.ChartSource

	// sailWatch starts the watches on the Sail kinds; nil when the
	// reconciler is not run by a manager (tests calling Reconcile).
	sailWatch *sailWatch

	// gate puts off a reconcile whose cache has yet to show this
	// reconciler's own writes to the ServiceMesh (status, finalizers). A
	// reconcile queued behind a long one (the enrollment pass queues one
	// through its own namespace label writes) starts within milliseconds
	// of the status patch; deciding from the stale status would set
	// conditions again with new transition times and patch status once
	// more for nothing.
	gate pacing.Gate

	// licenseGoneAt is when the license Secret was first found missing
	// (zero while it exists); see licenseMissingSince.
	licenseMu     sync.Mutex
	licenseGoneAt time.Time

	failures failureBackoff
}

// sailWatch adds watches on the Sail kinds to a running controller, once
// their API is served: a watch on a kind the API server does not serve
// would keep the manager from starting.
type sailWatch struct {
	mu      sync.Mutex
	ctrl    controller.Controller
	cache   cache.Cache
	handler handler.EventHandler
	watched map[string]bool
}

// ensure starts the missing watches and reports whether all run.
func (w *sailWatch) ensure() (bool, error) {
	if w == nil {
		return false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, kind := range sailKinds {
		if w.watched[kind] {
			continue
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(sail.GVK(kind))
		if err := w.ctrl.Watch(source.Kind[client.Object](w.cache, u, w.handler)); err != nil {
			return false, fmt.Errorf("watch %s: %w", kind, err)
		}
		w.watched[kind] = true
	}
	return true, nil
}

// SetupWithManager builds the reconciler from cfg and registers it and its metrics.
func SetupWithManager(mgr ctrl.Manager, cfg Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	// The chart comes from a flag-configured repository; a dead mirror
	// must fail the reconcile, not hang it.
	hc, err := sailinstall.HTTPClient(cfg.SailChartCAFile, 2*time.Minute)
	if err != nil {
		return err
	}
	lic := metrics.NewLicense(time.Now)
	if err := ctrlmetrics.Registry.Register(lic); err != nil {
		return err
	}
	if err := ctrlmetrics.Registry.Register(metrics.FailedPasses); err != nil {
		return err
	}
	r := &ServiceMeshReconciler{
		Client: mgr.GetClient(),
		Reader: mgr.GetAPIReader(),
		Served: &served.Catalog{Discovery: dc, MaxAge: served.Fresh},
		// The release records are Secrets in the operator's own namespace:
		// the Sail namespace is writable by its editors (sailrelease.go).
		Helm: &sailinstall.Helm{Config: mgr.GetConfig(), Namespace: cfg.SailNamespace, StorageNamespace: cfg.OperatorNamespace, ReleaseName: SailReleaseName,
			Log: ctrl.Log.WithName("sail-install"), Timeout: cfg.HelmTimeout},
		HTTP:     hc,
		Config:   cfg,
		Recorder: mgr.GetEventRecorder("mesh-operator"),
		Now:      time.Now,
		Metrics:  lic,
	}
	if cfg.KeyWarning != nil {
		ctrl.Log.WithName("license").Error(cfg.KeyWarning, "ignoring the configured test key")
	}
	return r.setup(mgr, "")
}

// setup registers the reconciler with its watches; name overrides the
// controller's name (tests run several managers in one process).
func (r *ServiceMeshReconciler) setup(mgr ctrl.Manager, name string) error {
	r.gate.Controller = meshControllerName
	// Namespace changes (enrollment requests, opt-outs, declared edges)
	// concern the singleton.
	toMesh := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: v1alpha1.SingletonName}}}
	})
	b := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.ServiceMesh{})
	if name != "" {
		b = b.Named(name)
	}
	// A NetworkPolicy change may hold or release an ambient enrollment.
	c, err := b.Watches(&corev1.Namespace{}, toMesh, builder.WithPredicates(namespaceFacts)).
		Watches(&networkingv1.NetworkPolicy{}, toMesh, builder.WithPredicates(networkPolicyFacts)).
		Build(r)
	if err != nil {
		return err
	}
	// Any change of a Sail resource (its status above all) concerns the
	// singleton; the reconcile reads them itself and acts only on its own.
	r.sailWatch = &sailWatch{ctrl: c, cache: mgr.GetCache(), handler: toMesh, watched: map[string]bool{}}
	return nil
}

// +kubebuilder:rbac:groups=core.navique.com,resources=servicemeshes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=core.navique.com,resources=servicemeshes/status,verbs=patch
// +kubebuilder:rbac:groups=core.navique.com,resources=servicemeshes/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile checks the singleton rule and the license before anything else:
// a refused or unlicensed ServiceMesh changes nothing in the cluster. Then it
// detects the environment, acts on the plan (install, apply, or only
// observe) and writes status.
func (r *ServiceMeshReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mesh := &v1alpha1.ServiceMesh{}
	if err := r.Client.Get(ctx, req.NamespacedName, mesh); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if res, wait := r.gate.Defer(ctx, r.Client, req.NamespacedName, mesh); wait {
		return res, nil
	}
	if mesh.DeletionTimestamp != nil {
		return r.finalize(ctx, mesh)
	}
	now := r.Now()
	st := newStatus(mesh, now)

	if mesh.Name != v1alpha1.SingletonName {
		msg := fmt.Sprintf("ServiceMesh is a cluster singleton and must be named %q; %q is ignored and changes nothing.", v1alpha1.SingletonName, mesh.Name)
		st.set(v1alpha1.ConditionRefused, metav1.ConditionTrue, v1alpha1.ReasonNotSingleton, msg)
		st.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRefused, msg)
		st.forgetControlPlane()
		st.next.Phase = PhaseRefused
		return ctrl.Result{}, r.writeStatus(ctx, mesh, st.next, "Refused", msg)
	}

	chk := r.checkLicense(ctx, now)
	if chk.unreadable != nil {
		return r.holdUnreadable(ctx, mesh, st, chk.unreadable)
	}
	lic, err := chk.license, chk.refusal
	r.Metrics.Observe(license.SignedLicense(lic, err).ExpiresAt())
	if err != nil {
		return r.lock(ctx, mesh, st, chk)
	}
	st.set(v1alpha1.ConditionPreviewLocked, metav1.ConditionFalse, license.ReasonValid,
		fmt.Sprintf("Licensed to %s until %s.", lic.Licensee, lic.NotAfter.UTC().Format(time.RFC3339)))
	licenseWait := license.NextCheck(lic, now)

	// A change of data plane relaxes the enrolled namespaces first, before
	// the new data plane's components are installed or the old ones change.
	// A failure here is reported with the rest; the control plane is still
	// reconciled.
	pending, preErr := r.migrationPending(ctx, mesh)
	if pending {
		_, preErr = r.reconcileEnrollment(ctx, mesh, st, true)
	}
	res, err := r.reconcileControlPlane(ctx, mesh, st)
	// Namespaces are enrolled only while the mesh is Ready at this
	// generation; otherwise enrollment is held as it is (never tightened on
	// a control plane that cannot be relied on), except that namespaces no
	// longer wanted (opted out) are released and the break-glass relaxes
	// mTLS: the safe direction is taken even when the control plane failed.
	wait, eerr := r.reconcileEnrollment(ctx, mesh, st, err != nil || !meshReady(mesh, st))
	setEnrollmentFailedCondition(st, errors.Join(preErr, eerr))
	err = errors.Join(preErr, err, eerr)
	st.mergeSailPaused()
	// A refused status write is reported with the step errors, never
	// hidden behind them: it is why status would still show the last pass.
	err = errors.Join(err, r.writeStatus(ctx, mesh, st.next, st.warnReason, st.warnMessage))
	return r.outcome(ctx, earliest(res.RequeueAfter, wait, licenseWait), err)
}

// licenseCheck is what one read of the license Secret established: a
// license that unlocks the mesh, a refusal (the Secret was read, or found
// not to exist, and does not unlock it), or nothing at all (unreadable).
type licenseCheck struct {
	license *license.License
	refusal error
	// missingUntil: the refusal is a Secret that does not exist, seen
	// missing for less than licenseMissingGrace; what is enrolled is kept
	// until then. Zero otherwise.
	missingUntil time.Time
	unreadable   error
}

// checkLicense reads and verifies the license Secret. Only a Secret that
// was read (or answered NotFound) can refuse the mesh; any other failure
// of the read is unreadable, which holds everything as it is.
func (r *ServiceMeshReconciler) checkLicense(ctx context.Context, now time.Time) licenseCheck {
	ref := license.SecretRef{Namespace: r.Config.OperatorNamespace, Name: r.Config.LicenseSecret}
	secret := &corev1.Secret{}
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, secret)
	switch {
	case apierrors.IsNotFound(err):
		return licenseCheck{refusal: ref.NotFound(), missingUntil: r.licenseMissingSince(now).Add(licenseMissingGrace)}
	case err != nil:
		return licenseCheck{unreadable: fmt.Errorf("cannot read license Secret %s: %w", ref, err)}
	}
	r.licenseFound()
	lic, err := ref.Verify(secret.Data, r.Config.Keys, now)
	return licenseCheck{license: lic, refusal: err}
}

// licenseMissingSince is when this process first found the license Secret
// missing since it last saw one. A restart starts the grace again, which
// only ever keeps namespaces longer.
func (r *ServiceMeshReconciler) licenseMissingSince(now time.Time) time.Time {
	r.licenseMu.Lock()
	defer r.licenseMu.Unlock()
	if r.licenseGoneAt.IsZero() {
		r.licenseGoneAt = now
	}
	return r.licenseGoneAt
}

func (r *ServiceMeshReconciler) licenseFound() {
	r.licenseMu.Lock()
	defer r.licenseMu.Unlock()
	r.licenseGoneAt = time.Time{}
}

// holdUnreadable: the license could not be read, so nothing is known about
// it. Nothing is installed, enrolled, released or relaxed; status says why,
// and the read is tried again soon.
func (r *ServiceMeshReconciler) holdUnreadable(ctx context.Context, mesh *v1alpha1.ServiceMesh, st *status, readErr error) (ctrl.Result, error) {
	msg := fmt.Sprintf("%v. Nothing is changed in the cluster until the license can be read (enrolled namespaces keep their configuration); read again every %s. Check the operator's access to the Secret and the API server's health.",
		readErr, licenseUnreadableRecheck)
	setLicenseUnreadableConditions(st, msg)
	if err := r.writeStatus(ctx, mesh, st.next, string(v1alpha1.ReasonLicenseUnreadable), msg); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "writing status while the license is unreadable")
	}
	ctrl.LoggerFrom(ctx).Error(readErr, "license unreadable; holding the mesh as it is", "retryIn", licenseUnreadableRecheck)
	return ctrl.Result{RequeueAfter: licenseUnreadableRecheck}, nil
}

// setLicenseUnreadableConditions: PreviewLocked and Ready are Unknown; the
// other conditions describe the state that is held and stay as they were.
func setLicenseUnreadableConditions(st *status, msg string) {
	st.set(v1alpha1.ConditionPreviewLocked, metav1.ConditionUnknown, v1alpha1.ReasonLicenseUnreadable, msg)
	st.set(v1alpha1.ConditionReady, metav1.ConditionUnknown, v1alpha1.ReasonLicenseUnreadable, msg)
	st.next.Phase = PhaseError
	st.summarize(v1alpha1.ReasonLicenseUnreadable, msg)
}

// lock: the license was read and does not unlock the mesh. Nothing new is
// done; what is enrolled is released, except while a Secret that just
// disappeared is within its grace (a renewal by delete + create).
func (r *ServiceMeshReconciler) lock(ctx context.Context, mesh *v1alpha1.ServiceMesh, st *status, chk licenseCheck) (ctrl.Result, error) {
	now := st.now
	// The enrollment finalizer is on the mesh while anything may be
	// enrolled; without it the grace would keep nothing.
	keep := now.Before(chk.missingUntil) && controllerutil.ContainsFinalizer(mesh, EnrollFinalizer)
	setLicenseRefusedConditions(st, chk, keep)
	wait := min(license.NextCheck(license.SignedLicense(nil, chk.refusal), now), lockedRecheck)
	var err error
	if keep {
		wait = min(wait, chk.missingUntil.Sub(now))
	} else {
		err = r.teardownEnrollment(ctx, mesh, st)
	}
	err = errors.Join(err, r.writeStatus(ctx, mesh, st.next, "LicenseRefused", chk.refusal.Error()))
	return r.outcome(ctx, wait, err)
}

// setLicenseRefusedConditions: PreviewLocked=True with the refusal's
// reason, Ready=False; keep says enrolled namespaces are kept (the grace of
// a missing Secret), and until when.
func setLicenseRefusedConditions(st *status, chk licenseCheck, keep bool) {
	msg := chk.refusal.Error()
	if keep {
		msg += fmt.Sprintf(". Enrolled namespaces are kept as they are until %s in case the license is being replaced (deleted and created again); then they are released.",
			chk.missingUntil.UTC().Format(time.RFC3339))
	}
	st.set(v1alpha1.ConditionPreviewLocked, metav1.ConditionTrue, license.ReasonOf(chk.refusal), msg)
	st.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPreviewLocked, "The mesh is locked by its license; nothing new is done in the cluster. See the PreviewLocked condition.")
	st.forgetControlPlane()
	st.next.Phase = PhasePreviewLocked
}

// outcome ends a pass. A failed step is already in status (each step sets
// its condition); the pass is retried after a bounded backoff, and never
// later than the earliest timer it owes (a maintenance window's end, the
// license's expiry, a cutover poll). Returning the error instead would make
// controller-runtime drop the timer and back off toward 1,000 s.
func (r *ServiceMeshReconciler) outcome(ctx context.Context, owed time.Duration, err error) (ctrl.Result, error) {
	retry := r.failures.next(err)
	if err == nil {
		return ctrl.Result{RequeueAfter: owed}, nil
	}
	after := earliest(owed, retry)
	metrics.FailedPasses.Inc()
	ctrl.LoggerFrom(ctx).Error(err, "Reconcile failed; status says which step", "retryIn", after)
	return ctrl.Result{RequeueAfter: after}, nil
}

// earliest is the shortest of the positive durations; 0 when none is.
func earliest(ds ...time.Duration) time.Duration {
	var out time.Duration
	for _, d := range ds {
		if d > 0 && (out == 0 || d < out) {
			out = d
		}
	}
	return out
}

// failureBackoff spaces the retries of consecutive failed passes: 1 s,
// doubling, at most maxFailureBackoff; a pass that succeeds resets it.
type failureBackoff struct {
	mu sync.Mutex
	n  int
}

const maxFailureBackoff = 30 * time.Second

func (b *failureBackoff) next(err error) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.n = 0
		return 0
	}
	d := time.Second << min(b.n, 5)
	b.n++
	return min(d, maxFailureBackoff)
}

// writeStatus patches status when it changed, with a Warning event when a
// warning is new (not on every re-check).
func (r *ServiceMeshReconciler) writeStatus(ctx context.Context, mesh *v1alpha1.ServiceMesh, next *v1alpha1.ServiceMeshStatus, warnReason, warnMsg string) error {
	if equality.Semantic.DeepEqual(&mesh.Status, next) {
		return nil
	}
	if warnReason != "" && !sameWarning(mesh.Status, *next) {
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, warnReason, "Reconcile", "%s", warnMsg)
	}
	updated := mesh.DeepCopy()
	updated.Status = *next
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(mesh)); err != nil {
		return err
	}
	r.gate.Wrote(client.ObjectKeyFromObject(mesh), updated)
	return nil
}

// sameWarning: the phase and the Ready reason did not change, so the
// warning was already reported.
func sameWarning(prev, next v1alpha1.ServiceMeshStatus) bool {
	if prev.Phase != next.Phase {
		return false
	}
	p, n := meta.FindStatusCondition(prev.Conditions, string(v1alpha1.ConditionReady)), meta.FindStatusCondition(next.Conditions, string(v1alpha1.ConditionReady))
	return p != nil && n != nil && p.Reason == n.Reason
}

func (r *ServiceMeshReconciler) applier() *apply.Applier {
	return &apply.Applier{Client: r.Client, FieldManager: FieldManager, HashAnnotation: labels.MeshGroup + "/applied-hash"}
}

// records is the Sail holders-record store.
func (r *ServiceMeshReconciler) records() sailinstall.Records {
	return sailinstall.Records{Client: r.Client, Reader: r.Reader}
}
