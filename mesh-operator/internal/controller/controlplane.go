package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/detect"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
)

// list and watch: the Sail kinds are watched (sailWatch).
// +kubebuilder:rbac:groups=sailoperator.io,resources=istios;istiocnis;ztunnels,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;create;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=list
// Cilium's configuration (observe) and the holders record (sailStatus), by
// name: with sail.install=false the operator reads no other ConfigMap.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get,resourceNames=cilium-config;sail-operator-holders

// readiness is what the reconcile learned about the control plane.
type readiness struct {
	ready          bool
	reason         v1alpha1.ConditionReason
	msg            string
	controlPlane   *v1alpha1.ControlPlaneStatus
	blockedReason  v1alpha1.ConditionReason // set when acting found something only the user can fix
	blockedMessage string
	// paused are the owned Sail CRs left alone for reconcile-paused, as Kind/name.
	paused []string
	// watched: not ready only on Sail resources, which are watched, so a
	// change wakes the reconcile and no timed re-check is needed.
	watched bool
}

func (r *ServiceMeshReconciler) reconcileControlPlane(ctx context.Context, mesh *v1alpha1.ServiceMesh, st *status) (ctrl.Result, error) {
	prevPhase := mesh.Status.Phase
	o, err := r.observe(ctx, mesh)
	if err != nil {
		st.next.Phase = PhaseError
		st.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDetectionFailed, err.Error())
		st.summarize(v1alpha1.ReasonDetectionFailed, err.Error())
		return ctrl.Result{}, err
	}
	plan := detect.Decide(mesh.Spec, o.facts, detect.Options{SailInstallEnabled: r.Config.SailInstall, SailRelease: SailReleaseName})
	log := ctrl.LoggerFrom(ctx)
	log.V(1).Info("detected plan", "action", plan.Action, "provider", plan.Provider, "management", plan.Management,
		"deferred", plan.Deferred, "blocked", plan.BlockedReason, "precondition", plan.PreconditionReason, "maintainSail", plan.MaintainSail)
	env := o.facts.Environment()
	if _, ignored := detect.TrustedIstiods(mesh.Spec, o.facts); len(ignored) > 0 {
		for _, d := range ignored {
			env.IgnoredIstiods = append(env.IgnoredIstiods, d.ID())
		}
		slices.Sort(env.IgnoredIstiods)
	}
	st.next.Detected = &env
	st.next.Provider = plan.Provider

	var rd readiness
	var actErr error
	switch plan.Action {
	case detect.ActionInstallSail:
		rd, actErr = r.installSail(ctx, mesh)
	case detect.ActionApply:
		// The release the operator installed is brought to the wanted
		// chart and values, or repaired, on every pass; the control plane
		// is applied all the same (a Sail Operator that still runs keeps
		// serving it), and a failure is reported once applying succeeded.
		var sailErr error
		if plan.MaintainSail {
			sailErr = r.reconcileSailRelease(ctx, mesh, true)
		}
		rd, actErr = r.applyControlPlane(ctx, mesh, o, st)
		if actErr == nil {
			actErr = sailErr
		}
	case detect.ActionObserve:
		rd, actErr = r.observeControlPlane(ctx, mesh, plan, o)
	case detect.ActionHold:
		rd = r.held(mesh, plan, o)
	}
	sailSt, err := r.sailStatus(ctx, o.facts.SailAPI() || plan.Action == detect.ActionInstallSail)
	if err != nil && actErr == nil {
		actErr = err
	}
	st.next.SailOperator = sailSt
	st.next.ControlPlane = rd.controlPlane
	st.sailPaused = rd.paused

	setControlPlaneConditions(st, plan, rd, actErr)
	log.V(1).Info("control plane", "action", plan.Action, "ready", rd.ready, "reason", rd.reason, "phase", st.next.Phase, "error", actErr)
	if st.next.Phase == PhaseReady && prevPhase != PhaseReady {
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventControlPlaneReady), "Reconcile", "%s", rd.msg)
	}
	if rd.controlPlane != nil && rd.controlPlane.Management == v1alpha1.ManagementAdopted &&
		(mesh.Status.ControlPlane == nil || mesh.Status.ControlPlane.Management != v1alpha1.ManagementAdopted) {
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventAdopted), "Reconcile",
			"Adopted the existing %s control plane in %s; its lifecycle stays with its owner.", plan.Provider, rd.controlPlane.Namespace)
	}

	if st.next.Phase == PhaseError || (st.next.Phase == PhaseProgressing && !rd.watched) {
		return ctrl.Result{RequeueAfter: convergingRecheck}, actErr
	}
	return ctrl.Result{RequeueAfter: settledRecheck}, actErr
}

// setControlPlaneConditions decides, from the plan and what acting on it
// found (rd, and the error it returned), the phase, PreconditionNotMet,
// ControlPlaneReady, Ready, the kstatus pair and the Warning event to
// raise. It reads nothing but its arguments, so TestSetControlPlaneConditions
// covers every branch without an API server.
func setControlPlaneConditions(st *status, plan detect.Plan, rd readiness, actErr error) {
	setPreconditionCondition(st, plan)
	errReason := v1alpha1.ReasonReconcileError
	var reasoned *reasonedError
	if errors.As(actErr, &reasoned) {
		errReason = reasoned.reason
	}
	switch {
	case rd.ready:
		st.set(v1alpha1.ConditionControlPlaneReady, metav1.ConditionTrue, rd.reason, rd.msg)
	case rd.reason == "" && actErr != nil:
		// The step failed before readiness was judged (a read failed):
		// what the control plane is was not seen in this pass.
		st.set(v1alpha1.ConditionControlPlaneReady, metav1.ConditionUnknown, errReason, actErr.Error())
	default:
		st.set(v1alpha1.ConditionControlPlaneReady, metav1.ConditionFalse, rd.reason, rd.msg)
	}
	blockedReason, blockedMsg := plan.BlockedReason, plan.BlockedMessage
	if blockedReason == "" {
		blockedReason, blockedMsg = rd.blockedReason, rd.blockedMessage
	}
	var summaryReason v1alpha1.ConditionReason
	var summaryMsg string
	switch {
	case plan.Deferred:
		st.next.Phase = PhaseDeferred
		summaryReason, summaryMsg = blockedReason, blockedMsg
		st.warnReason, st.warnMessage = string(v1alpha1.EventDeferred), blockedMsg
	case blockedReason != "":
		st.next.Phase = PhaseBlocked
		summaryReason, summaryMsg = blockedReason, blockedMsg
		st.warn(blockedReason, blockedMsg)
	case actErr != nil:
		st.next.Phase = PhaseError
		summaryReason, summaryMsg = errReason, actErr.Error()
		st.warn(summaryReason, summaryMsg)
	case plan.PreconditionReason != "":
		st.next.Phase = PhaseBlocked
		summaryReason, summaryMsg = v1alpha1.ReasonPreconditionNotMet, plan.PreconditionMessage
		st.warn(v1alpha1.ReasonPreconditionNotMet, plan.PreconditionMessage)
	case !rd.ready:
		st.next.Phase = PhaseProgressing
		summaryReason, summaryMsg = rd.reason, rd.msg
	default:
		st.next.Phase = PhaseReady
		summaryReason = v1alpha1.ReasonControlPlaneReady
		summaryMsg = "The control plane is Ready; namespaces may be enrolled and STRICT mTLS applied."
	}
	if st.next.Phase == PhaseReady {
		st.set(v1alpha1.ConditionReady, metav1.ConditionTrue, summaryReason, summaryMsg)
	} else {
		st.set(v1alpha1.ConditionReady, metav1.ConditionFalse, summaryReason, summaryMsg)
	}
	st.summarize(summaryReason, summaryMsg)
}

// setPreconditionCondition: PreconditionNotMet, a warning the plan raises.
func setPreconditionCondition(st *status, plan detect.Plan) {
	if plan.PreconditionReason != "" {
		st.set(v1alpha1.ConditionPreconditionNotMet, metav1.ConditionTrue, plan.PreconditionReason, plan.PreconditionMessage)
		return
	}
	st.set(v1alpha1.ConditionPreconditionNotMet, metav1.ConditionFalse, v1alpha1.ReasonPreconditionsMet, "The cluster can run the requested data plane.")
}

// reasonedError carries a condition reason for a failed step.
type reasonedError struct {
	reason v1alpha1.ConditionReason
	err    error
}

func (e *reasonedError) Error() string { return e.err.Error() }
func (e *reasonedError) Unwrap() error { return e.err }

func withReason(reason v1alpha1.ConditionReason, err error) error {
	if err == nil {
		return nil
	}
	return &reasonedError{reason: reason, err: err}
}

// installSail installs the Sail Operator chart and registers the operator as
// a holder of the installation. The record is written before the release,
// so an install interrupted at any point is still found and finished (or
// removed) later.
func (r *ServiceMeshReconciler) installSail(ctx context.Context, mesh *v1alpha1.ServiceMesh) (readiness, error) {
	rd := readiness{reason: v1alpha1.ReasonSailOperatorInstalling, controlPlane: r.managedControlPlane(mesh, nil)}
	// The chart first: an unreachable repository must leave no trace.
	ch, err := r.loadChart(ctx)
	if err != nil {
		rd.msg = err.Error()
		return rd, withChartReason(err)
	}
	if err := r.ensureFinalizer(ctx, mesh); err != nil {
		return rd, err
	}
	ns := r.Config.SailNamespace
	if err := r.ensureNamespace(ctx, ns, nil); err != nil {
		return rd, err
	}
	rec, err := r.records().Get(ctx, ns)
	if err != nil {
		return rd, err
	}
	note := fmt.Sprintf("ServiceMesh %s (uid %s)", mesh.Name, mesh.UID)
	if rec == nil {
		crds, err := r.absentCRDs(ctx, ch)
		if err != nil {
			return rd, err
		}
		err = r.records().Create(ctx, ns, SailReleaseName, crds, sailinstall.HolderKey, note)
		if apierrors.IsAlreadyExists(err) {
			err = r.records().Join(ctx, ns, sailinstall.HolderKey, note)
		}
		if err != nil {
			return rd, fmt.Errorf("writing the Sail holders record: %w", err)
		}
	} else if !rec.Holds(sailinstall.HolderKey) {
		if err := r.records().Join(ctx, ns, sailinstall.HolderKey, note); err != nil {
			return rd, err
		}
	}
	// The operator alone holds an installation it created or that nobody
	// else joined; only such a one is upgraded.
	sole := true
	if rec != nil {
		for _, h := range rec.Holders {
			sole = sole && h == sailinstall.HolderKey
		}
	}
	if err := r.reconcileSailRelease(ctx, mesh, sole); err != nil {
		rd.msg = err.Error()
		return rd, err
	}
	rd.msg = fmt.Sprintf("The Sail Operator (chart %s %s) is installed in %s; the control plane is created next.", ch.Metadata.Name, ch.Metadata.Version, ns)
	return rd, nil
}

// reconcileSailRelease compares the Sail release with the wanted chart and
// values and acts on sailinstall.DecideRelease: installs, upgrades in place,
// or repairs a release left failed or pending. The caller has made sure
// the operator holds the installation through the holders record; sole
// says whether it alone does (only then may a deployed release move).
//
// Nothing here deletes on a failed read: a release that cannot be read is
// an error and is left as it is. With a pinned chart version a current
// release needs no chart fetch, so a repository gone after the install
// does not stop a mesh that needs nothing from it.
func (r *ServiceMeshReconciler) reconcileSailRelease(ctx context.Context, mesh *v1alpha1.ServiceMesh, sole bool) error {
	ns := r.Config.SailNamespace
	log := ctrl.LoggerFrom(ctx)
	// A rollback is followed by a decision on what it left (an upgrade to
	// the wanted chart); two steps at most, a third to see it settled.
	for range 3 {
		rel, err := r.Helm.Get()
		if err != nil {
			return err
		}
		if rel == nil {
			// An earlier operator version kept the release as ConfigMaps
			// in the Sail namespace: adopted once checked, or refused.
			adopted, err := r.adoptLegacySailRelease(ctx, mesh)
			if err != nil {
				return err
			}
			if adopted {
				continue
			}
		}
		if sailinstall.Current(rel, r.Config.SailChart.Version, r.Config.SailValues) {
			r.recordCurrentSailRelease(ctx, rel)
			return nil
		}
		ch, err := r.loadChart(ctx)
		if err != nil {
			return withChartReason(err)
		}
		d := sailinstall.DecideRelease(rel, ch.Metadata.Version, r.Config.SailValues, sole)
		log.V(1).Info("Sail release", "action", d.Action, "why", d.Why)
		if d.Action != sailinstall.ReleaseKeep && d.Action != sailinstall.ReleaseInstall {
			// Each of the others deletes what the stored release lists.
			if err := r.checkSailRelease(ctx, rel, ch); err != nil {
				return err
			}
		}
		switch d.Action {
		case sailinstall.ReleaseKeep:
			return nil
		case sailinstall.ReleaseInstall:
			if err := r.Helm.Install(ctx, ch, r.Config.SailValues); err != nil {
				return withReason(v1alpha1.ReasonSailInstallFailed, err)
			}
			if err := r.recordSailRelease(ctx, ch); err != nil {
				return err
			}
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventSailOperatorInstalled), "Install",
				"Installed the Sail Operator chart %s %s into namespace %s.", ch.Metadata.Name, ch.Metadata.Version, ns)
			return nil
		case sailinstall.ReleaseUpgrade:
			// The release moves in place: a reinstall would delete the
			// Sail Operator and, with the last holder's CRDs, every Sail
			// resource.
			if err := r.upgradeSail(ctx, ch); err != nil {
				return withReason(v1alpha1.ReasonSailInstallFailed, err)
			}
			if err := r.recordSailRelease(ctx, ch); err != nil {
				return err
			}
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventSailOperatorUpgraded), "Upgrade",
				"Upgraded the Sail Operator release in namespace %s (%s).", ns, d.Why)
			return nil
		case sailinstall.ReleaseRollback:
			if err := r.Helm.Rollback(d.RollbackTo); err != nil {
				return withReason(v1alpha1.ReasonSailInstallFailed, err)
			}
			if err := r.recordSailRelease(ctx, nil); err != nil {
				return err
			}
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventSailOperatorRepaired), "Rollback",
				"Rolled back the Sail Operator release in namespace %s (%s).", ns, d.Why)
		case sailinstall.ReleaseReinstall:
			// Only a release that never deployed, without CRDs in its
			// templates: the uninstall deletes what its templates made,
			// never the CRDs Helm created from crds/.
			if err := r.Helm.Uninstall(); err != nil {
				return withReason(v1alpha1.ReasonSailInstallFailed, err)
			}
			if err := r.Helm.Install(ctx, ch, r.Config.SailValues); err != nil {
				return withReason(v1alpha1.ReasonSailInstallFailed, err)
			}
			if err := r.recordSailRelease(ctx, ch); err != nil {
				return err
			}
			r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventSailOperatorRepaired), "Install",
				"Installed the Sail Operator chart %s %s into namespace %s again (%s).", ch.Metadata.Name, ch.Metadata.Version, ns, d.Why)
			return nil
		default:
			return withReason(v1alpha1.ReasonSailInstallFailed, fmt.Errorf("the Sail Operator release %s/%s is left as it is: %s", ns, SailReleaseName, d.Why))
		}
	}
	return nil
}

// upgradeSail applies the chart's CRDs, which Helm's upgrade leaves as
// they are (a newer Sail Operator needs its newer CRDs), recording those
// that did not exist so the last holder removes them as it would the
// install's; then it upgrades the release.
func (r *ServiceMeshReconciler) upgradeSail(ctx context.Context, ch *sailinstall.Chart) error {
	ns := r.Config.SailNamespace
	absent, err := r.absentCRDs(ctx, ch)
	if err != nil {
		return err
	}
	if len(absent) > 0 {
		// Re-read: the record written before the install may have changed.
		rec, err := r.records().Get(ctx, ns)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("the Sail holders record %s/%s is gone", ns, sailinstall.RecordName)
		}
		if err := r.records().AddCRDs(ctx, rec, absent); err != nil {
			return fmt.Errorf("recording the new Sail CRDs: %w", err)
		}
	}
	crds, err := sailinstall.CRDs(ch)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		ac := client.ApplyConfigurationFromUnstructured(crd)
		if err := r.Client.Apply(ctx, ac, client.FieldOwner(sailCRDFieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying CRD %s of the Sail chart %s: %w", crd.GetName(), ch.Metadata.Version, err)
		}
	}
	return r.Helm.Upgrade(ctx, ch, r.Config.SailValues)
}

// sailCRDFieldManager owns the Sail chart's CRDs once an upgrade applied
// them (Helm created them at the install).
const sailCRDFieldManager = "mesh-operator-sail-crds"

// withChartReason: a chart that could not be fetched is SailChartUnavailable;
// one fetched but not the pinned archive is SailChartUntrusted.
func withChartReason(err error) error {
	if errors.Is(err, sailinstall.ErrChartNotPinned) {
		return withReason(v1alpha1.ReasonSailChartUntrusted, err)
	}
	return withReason(v1alpha1.ReasonSailChartUnavailable, err)
}

// loadChart fetches the Sail chart once per process and source (a flag).
func (r *ServiceMeshReconciler) loadChart(ctx context.Context) (*sailinstall.Chart, error) {
	r.chartMu.Lock()
	defer r.chartMu.Unlock()
	if r.chart != nil && r.chartFrom == r.Config.SailChart {
		return r.chart, nil
	}
	ch, digest, err := r.Config.SailChart.FetchWithDigest(ctx, r.HTTP)
	if err != nil {
		return nil, fmt.Errorf("fetching the Sail Operator chart %s: %w", r.Config.SailChart, err)
	}
	r.chart, r.chartDigest, r.chartFrom = ch, digest, r.Config.SailChart
	return ch, nil
}

// absentCRDs are the chart's CRDs that do not exist yet: the ones the
// install will create, and so the only ones the last holder may remove.
func (r *ServiceMeshReconciler) absentCRDs(ctx context.Context, ch *sailinstall.Chart) ([]string, error) {
	names, err := sailinstall.CRDNames(ch)
	if err != nil {
		return nil, err
	}
	var absent []string
	for _, n := range names {
		err := r.Reader.Get(ctx, types.NamespacedName{Name: n}, crdMeta(n))
		switch {
		case apierrors.IsNotFound(err):
			absent = append(absent, n)
		case err != nil:
			return nil, fmt.Errorf("checking CRD %s: %w", n, err)
		}
	}
	return absent, nil
}

func crdMeta(name string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}
	m.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	return m
}

// applyControlPlane applies the owned Sail CRs and reads their readiness.
// During a migration away from ambient the ambient control plane (istiod's
// ambient profile, IstioCNI, ZTunnel; it serves sidecars too) is kept until
// nothing is captured by ztunnel any more: removing it earlier would cut
// every Pod still redirected to it.
func (r *ServiceMeshReconciler) applyControlPlane(ctx context.Context, mesh *v1alpha1.ServiceMesh, o *observed, st *status) (readiness, error) {
	dp := mesh.Spec.DataPlane
	if dp != v1alpha1.DataPlaneAmbient {
		held, err := r.ambientInUse(ctx, mesh)
		if err != nil {
			return readiness{controlPlane: r.managedControlPlane(mesh, o.istios[sail.IstioName])}, err
		}
		if held != "" {
			dp = v1alpha1.DataPlaneAmbient
			st.oldDataPlane = fmt.Sprintf("The ambient data plane (ZTunnel/%s, IstioCNI/%s, istiod's ambient profile) is kept until nothing is captured by ztunnel any more: %s.",
				sail.ZTunnelName, sail.IstioCNIName, held)
		}
	}
	d := sail.Build(sail.Params{Owner: mesh, Version: mesh.Spec.Version, DataPlane: dp, OpenShift: o.facts.OpenShift()})
	rd := readiness{controlPlane: r.managedControlPlane(mesh, o.istios[sail.IstioName])}
	for _, obj := range d.Objects() {
		rd.controlPlane.Resources = append(rd.controlPlane.Resources, obj.GetObjectKind().GroupVersionKind().Kind+"/"+obj.GetName())
	}
	if err := r.ensureFinalizer(ctx, mesh); err != nil {
		return rd, err
	}
	// A Sail installed through the holders record (by us earlier, or by
	// another tool) must not be removed while we use it. Holding it obliges
	// the last holder to uninstall, which takes the installer's rights: with
	// --sail-install=false the operator neither has them nor joins.
	if r.Config.SailInstall {
		if err := r.joinRecord(ctx, mesh); err != nil {
			return rd, err
		}
	}
	for _, ns := range d.Namespaces {
		if err := r.ensureNamespace(ctx, ns, mesh); err != nil {
			return rd, err
		}
	}
	// Sail CRs of ours that carry the reconcile-paused annotation are
	// neither changed nor removed (their readiness is still judged).
	paused := map[string]bool{}
	for _, kind := range []string{sail.KindIstio, sail.KindIstioCNI, sail.KindZTunnel} {
		live, err := r.getSail(ctx, kind, "default")
		if err != nil {
			return rd, err
		}
		if live != nil && metav1.IsControlledBy(live, mesh) && enroll.Paused(live) {
			paused[kind] = true
			rd.paused = append(rd.paused, kind+"/"+live.GetName())
		}
	}
	// A component the data plane no longer needs (ambient to sidecar) goes.
	if d.ZTunnel == nil && !paused[sail.KindZTunnel] {
		if _, err := r.deleteOwnedSail(ctx, mesh, sail.KindZTunnel); err != nil {
			return rd, err
		}
	}
	if d.CNI == nil && !paused[sail.KindIstioCNI] {
		if _, err := r.deleteOwnedSail(ctx, mesh, sail.KindIstioCNI); err != nil {
			return rd, err
		}
	}
	applier := r.applier()
	for _, obj := range d.Objects() {
		if paused[obj.GetObjectKind().GroupVersionKind().Kind] {
			continue
		}
		if _, err := applier.Apply(ctx, obj, mesh); err != nil {
			var conflict *apply.ConflictError
			if errors.As(err, &conflict) {
				rd.reason, rd.msg = v1alpha1.ReasonForeignSailResource, err.Error()
				rd.blockedReason, rd.blockedMessage = v1alpha1.ReasonForeignSailResource, err.Error()+
					". The operator does not take over a Sail resource it did not create: delete it, or use mode adopt."
				return rd, nil
			}
			return rd, err
		}
	}
	watched, werr := r.sailWatch.ensure()
	if werr != nil {
		// Not fatal: the timed re-check stands in for the watch.
		ctrl.LoggerFrom(ctx).Error(werr, "cannot watch the Sail resources; re-reading them on a timer")
	}
	var notReady []sail.Readiness
	for _, obj := range d.Objects() {
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		live, err := r.getSail(ctx, kind, obj.GetName())
		if err != nil {
			return rd, err
		}
		if kind == sail.KindIstio && live != nil {
			rd.controlPlane = r.managedControlPlane(mesh, live.(*sail.Istio))
			rd.controlPlane.Resources = resourcesOf(d)
		}
		if re := sail.ReadinessOf(kind, obj.GetName(), live); !re.Ready {
			notReady = append(notReady, re)
		}
	}
	if len(notReady) > 0 {
		rd.reason, rd.msg = notReady[0].Reason, joinMessages(notReady)
		rd.watched = watched
		return rd, nil
	}
	rd.ready, rd.reason = true, v1alpha1.ReasonSailResourcesReady
	rd.msg = fmt.Sprintf("%s are Ready.", strings.Join(rd.controlPlane.Resources, ", "))
	return rd, nil
}

// joinRecord adds the operator to a holders record that exists without it.
func (r *ServiceMeshReconciler) joinRecord(ctx context.Context, mesh *v1alpha1.ServiceMesh) error {
	rec, err := r.records().Get(ctx, r.Config.SailNamespace)
	if err != nil || rec == nil || rec.Holds(sailinstall.HolderKey) {
		return err
	}
	return r.records().Join(ctx, r.Config.SailNamespace, sailinstall.HolderKey, fmt.Sprintf("ServiceMesh %s (uid %s)", mesh.Name, mesh.UID))
}

// ambientInUse says what still needs the operator's ambient data plane
// once spec.dataPlane has left ambient ("" when nothing does, or when the
// operator owns no ZTunnel): a namespace still labelled for ambient capture
// (by anyone), or a running Pod istio-cni still redirects to ztunnel. The
// cluster-wide Pod list is read only while such a ZTunnel exists.
func (r *ServiceMeshReconciler) ambientInUse(ctx context.Context, mesh *v1alpha1.ServiceMesh) (string, error) {
	zt, err := r.getSail(ctx, sail.KindZTunnel, sail.ZTunnelName)
	if err != nil || zt == nil || !metav1.IsControlledBy(zt, mesh) || zt.GetDeletionTimestamp() != nil {
		return "", err
	}
	nsList := &corev1.NamespaceList{}
	if err := r.Client.List(ctx, nsList, client.MatchingLabels{labels.IstioDataPlaneMode: "ambient"}); err != nil {
		return "", fmt.Errorf("listing ambient namespaces: %w", err)
	}
	for _, ns := range nsList.Items {
		if ns.DeletionTimestamp == nil {
			return fmt.Sprintf("namespace %s is still labelled %s=ambient", ns.Name, labels.IstioDataPlaneMode), nil
		}
	}
	pods := &corev1.PodList{}
	if err := r.Reader.List(ctx, pods); err != nil {
		return "", fmt.Errorf("listing Pods for ztunnel capture: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if podmesh.Running(p) && podmesh.Redirected(p) {
			return fmt.Sprintf("Pod %s/%s is still redirected to ztunnel", p.Namespace, p.Name), nil
		}
	}
	return "", nil
}

func resourcesOf(d sail.Desired) []string {
	var out []string
	for _, obj := range d.Objects() {
		out = append(out, obj.GetObjectKind().GroupVersionKind().Kind+"/"+obj.GetName())
	}
	return out
}

func joinMessages(rs []sail.Readiness) string {
	var msgs []string
	for _, re := range rs {
		msgs = append(msgs, re.Message)
	}
	return strings.Join(msgs, " ")
}

func (r *ServiceMeshReconciler) managedControlPlane(mesh *v1alpha1.ServiceMesh, live *sail.Istio) *v1alpha1.ControlPlaneStatus {
	cp := &v1alpha1.ControlPlaneStatus{
		Management: v1alpha1.ManagementManaged, Namespace: sail.IstioNamespace, Revision: sail.DefaultRevision,
		Version: sail.SailVersion(mesh.Spec.Version), DataPlane: mesh.Spec.DataPlane,
	}
	if live != nil && live.Status.ActiveRevisionName != "" {
		cp.Revision = live.Status.ActiveRevisionName
	}
	return cp
}

// getSail reads a Sail CR uncached; nil when it does not exist.
func (r *ServiceMeshReconciler) getSail(ctx context.Context, kind, name string) (sail.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(sail.GVK(kind))
	err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	return sail.FromUnstructured(u)
}

// observeControlPlane judges a control plane the operator does not own
// (adopted, or external) without writing anything.
func (r *ServiceMeshReconciler) observeControlPlane(ctx context.Context, mesh *v1alpha1.ServiceMesh, plan detect.Plan, o *observed) (readiness, error) {
	cp := &v1alpha1.ControlPlaneStatus{Management: plan.Management, DataPlane: mesh.Spec.DataPlane}
	rd := readiness{controlPlane: cp}
	switch {
	case plan.AdoptedIstio != nil:
		cp.Namespace, cp.Revision, cp.Version = plan.AdoptedIstio.Namespace, plan.AdoptedIstio.Revision, plan.AdoptedIstio.Version
		seen := adoptedSail{ambient: mesh.Spec.DataPlane == v1alpha1.DataPlaneAmbient}
		if live := o.istios[plan.AdoptedIstio.Name]; live != nil {
			seen.istio = live
		}
		// The ambient components are read once the Istio is Ready: until
		// then its readiness is what the status reports.
		if seen.ambient && sail.ReadinessOf(sail.KindIstio, plan.AdoptedIstio.Name, seen.istio).Ready {
			zt, err := r.getSail(ctx, sail.KindZTunnel, sail.ZTunnelName)
			if err != nil {
				return rd, err
			}
			seen.ztunnel = zt
			if err := r.readCNI(ctx, &seen, cp.Namespace); err != nil {
				return rd, err
			}
		}
		rd.ready, rd.reason, rd.msg, cp.Resources = adoptedSailReadiness(plan, seen)
	case len(plan.AdoptedIstiod) > 0:
		pick := pickIstiod(plan.AdoptedIstiod)
		cp.Namespace, cp.Version, cp.Revision = pick.Namespace, pick.Version, pick.Revision
		if cp.Revision == "" {
			cp.Revision = sail.DefaultRevision
		}
		for _, d := range plan.AdoptedIstiod {
			cp.Resources = append(cp.Resources, "Deployment/"+d.Namespace+"/"+d.Name)
		}
		if pick.Available {
			rd.ready, rd.reason = true, v1alpha1.ReasonIstiodAvailable
			rd.msg = fmt.Sprintf("istiod %s is Available.", pick.ID())
		} else {
			rd.reason, rd.msg = v1alpha1.ReasonIstiodUnavailable, fmt.Sprintf("istiod %s is not Available.", pick.ID())
		}
	case plan.Management == v1alpha1.ManagementExternal && o.facts.IstioAPI():
		rd.ready, rd.reason = true, v1alpha1.ReasonExternalControlPlane
		rd.msg = "mode external: the control plane is not visible from here and is trusted to be running; the Istio security API is served."
	case plan.Management == v1alpha1.ManagementExternal:
		rd.reason = v1alpha1.ReasonIstioAPIMissing
		rd.msg = "mode external: the Istio security API (security.istio.io) is not served in this cluster, so the operator's configuration cannot be emitted; install Istio's CRDs."
		rd.blockedReason, rd.blockedMessage = rd.reason, rd.msg
	}
	return rd, nil
}

// adoptedSail is what a pass read of an adopted Sail mesh: its Istio, and
// for ambient the components ambient needs beside it (nil: absent, or not
// read because the Istio is not Ready).
type adoptedSail struct {
	istio   sail.Object
	ambient bool
	ztunnel sail.Object
	cni     sail.Object
	// cniNodes are the istio-cni-node DaemonSets found in cniLookedIn
	// (read only while no IstioCNI is Ready).
	cniNodes    []cniNode
	cniLookedIn []string
}

// cniNode is an istio-cni-node DaemonSet as read.
type cniNode struct {
	namespace, name string
	desired, ready  int32
	// fresh: its controller has processed the current generation.
	fresh bool
}

// adoptedSailReadiness judges an adopted Sail mesh from what was read, and
// names the resources the judgement rests on. The Istio comes first; for
// ambient, ztunnel and istio-cni must be ready too: without istio-cni no
// Pod is redirected to ztunnel, so no namespace could ever cut over.
func adoptedSailReadiness(plan detect.Plan, seen adoptedSail) (bool, v1alpha1.ConditionReason, string, []string) {
	name := plan.AdoptedIstio.Name
	resources := []string{sail.KindIstio + "/" + name}
	re := sail.ReadinessOf(sail.KindIstio, name, seen.istio)
	if re.Ready && seen.ambient {
		resources = append(resources, sail.KindZTunnel+"/"+sail.ZTunnelName)
		re = sail.ReadinessOf(sail.KindZTunnel, sail.ZTunnelName, seen.ztunnel)
		if seen.ztunnel == nil {
			re.Message += " spec.dataPlane is ambient, but the adopted mesh has no ZTunnel: add one to it, or set spec.dataPlane: sidecar."
		}
		if re.Ready {
			var cni string
			re, cni = cniReadiness(seen)
			resources = append(resources, cni)
		}
	}
	ownNote := ""
	if plan.AdoptedIstio.Ours {
		ownNote = " mode adopt: this is the operator's own control plane (created in mode managed, still controlled by this ServiceMesh); " +
			"it is observed and no longer changed (spec.version and spec.dataPlane are not applied to it), and deleting the ServiceMesh still removes it. Set mode managed to manage it again."
	}
	if !re.Ready {
		return false, re.Reason, re.Message + ownNote, resources
	}
	msg := fmt.Sprintf("The %s control plane (Istio %s, revision %s) is Ready.", strings.ToLower(string(plan.Management)), name, plan.AdoptedIstio.Revision)
	if seen.ambient {
		msg = fmt.Sprintf("The %s control plane (Istio %s, revision %s) is Ready, with ZTunnel %s; istio-cni: %s",
			strings.ToLower(string(plan.Management)), name, plan.AdoptedIstio.Revision, sail.ZTunnelName, re.Message)
	}
	return true, re.Reason, msg + ownNote, resources
}

// cniReadiness: a Ready IstioCNI, or else a ready istio-cni-node DaemonSet
// (istio-cni installed without Sail, e.g. Istio's cni chart), is istio-cni.
// The second result names the resource the verdict rests on.
func cniReadiness(seen adoptedSail) (sail.Readiness, string) {
	sailCNI := sail.KindIstioCNI + "/" + sail.IstioCNIName
	re := sail.ReadinessOf(sail.KindIstioCNI, sail.IstioCNIName, seen.cni)
	if re.Ready {
		return re, sailCNI
	}
	for _, n := range seen.cniNodes {
		if n.isReady() {
			return sail.Readiness{Ready: true, Reason: v1alpha1.ReasonIstioCNIReady,
				Message: fmt.Sprintf("DaemonSet %s/%s has %d of %d Pods ready.", n.namespace, n.name, n.ready, n.desired)}, "DaemonSet/" + n.namespace + "/" + n.name
		}
	}
	const why = " spec.dataPlane is ambient: without istio-cni no Pod is redirected to ztunnel, so enrolled namespaces stay PERMISSIVE."
	if seen.cni == nil && len(seen.cniNodes) == 0 {
		return sail.Readiness{Reason: v1alpha1.ReasonIstioCNIMissing, Message: fmt.Sprintf(
			"The adopted mesh has no istio-cni: no IstioCNI %s and no DaemonSet %s in %s.%s Add an IstioCNI to it (or install Istio's cni chart), or set spec.dataPlane: sidecar.",
			sail.IstioCNIName, cniDaemonSet, strings.Join(seen.cniLookedIn, ", "), why)}, sailCNI
	}
	var msgs []string
	resource := sailCNI
	if seen.cni != nil {
		msgs = append(msgs, re.Message)
	} else {
		re.Reason = v1alpha1.ReasonIstioCNINotReady
		resource = "DaemonSet/" + seen.cniNodes[0].namespace + "/" + seen.cniNodes[0].name
	}
	for _, n := range seen.cniNodes {
		msg := fmt.Sprintf("DaemonSet %s/%s has %d of %d Pods ready.", n.namespace, n.name, n.ready, n.desired)
		if !n.fresh {
			msg = fmt.Sprintf("DaemonSet %s/%s: its controller has not processed its current generation yet.", n.namespace, n.name)
		}
		msgs = append(msgs, msg)
	}
	return sail.Readiness{Reason: re.Reason, Message: strings.Join(msgs, " ") + why}, resource
}

// cniDaemonSet is istio-cni's node agent, as both Sail and Istio's cni
// chart name it.
const cniDaemonSet = "istio-cni-node"

// isReady: every Pod the DaemonSet wants runs ready, for its current
// generation. A node without one would not redirect its Pods.
func (n cniNode) isReady() bool { return n.fresh && n.desired > 0 && n.ready >= n.desired }

func cniNodeOf(ds *appsv1.DaemonSet) cniNode {
	return cniNode{namespace: ds.Namespace, name: ds.Name, desired: ds.Status.DesiredNumberScheduled, ready: ds.Status.NumberReady,
		fresh: ds.Status.ObservedGeneration >= ds.Generation}
}

// cniNamespaces are where an istio-cni-node DaemonSet is looked for: the
// IstioCNI's own namespace, Sail's default, the adopted Istio's, and
// kube-system (where Istio's cni chart is often installed).
func cniNamespaces(cni sail.Object, istioNamespace string) []string {
	var out []string
	if c, ok := cni.(*sail.IstioCNI); ok && c.Spec.Namespace != "" {
		out = append(out, c.Spec.Namespace)
	}
	for _, ns := range []string{sail.CNINamespace, istioNamespace, ciliumNamespace} {
		if ns != "" && !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// readCNI reads what cniReadiness judges: the IstioCNI, and, unless it is
// Ready, the istio-cni-node DaemonSets. A read that fails is returned: an
// unreadable istio-cni is not an absent one.
func (r *ServiceMeshReconciler) readCNI(ctx context.Context, seen *adoptedSail, istioNamespace string) error {
	cni, err := r.getSail(ctx, sail.KindIstioCNI, sail.IstioCNIName)
	if err != nil && !meta.IsNoMatchError(err) {
		// No match: this Sail Operator serves no IstioCNI, so there is none.
		return err
	}
	seen.cni = cni
	if sail.ReadinessOf(sail.KindIstioCNI, sail.IstioCNIName, seen.cni).Ready {
		return nil
	}
	seen.cniLookedIn = cniNamespaces(cni, istioNamespace)
	for _, ns := range seen.cniLookedIn {
		ds := &appsv1.DaemonSet{}
		err := r.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: cniDaemonSet}, ds)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("reading DaemonSet %s/%s (istio-cni, which ambient needs): %w", ns, cniDaemonSet, err)
		default:
			seen.cniNodes = append(seen.cniNodes, cniNodeOf(ds))
		}
	}
	return nil
}

// pickIstiod prefers an available istiod of the default revision.
func pickIstiod(ds []detect.Istiod) detect.Istiod {
	best := ds[0]
	score := func(d detect.Istiod) int {
		s := 0
		if d.Available {
			s += 2
		}
		if d.Revision == "" || d.Revision == sail.DefaultRevision {
			s++
		}
		return s
	}
	for _, d := range ds[1:] {
		// Ties go to the first by name, not to the list's order.
		if score(d) > score(best) || (score(d) == score(best) && d.Name < best.Name) {
			best = d
		}
	}
	return best
}

// held reports a plan that changes nothing. A control plane we already own
// is left as it is, and still shown.
func (r *ServiceMeshReconciler) held(mesh *v1alpha1.ServiceMesh, plan detect.Plan, o *observed) readiness {
	rd := readiness{reason: plan.BlockedReason, msg: plan.BlockedMessage}
	if rd.reason == "" {
		rd.reason, rd.msg = v1alpha1.ReasonPreconditionNotMet, "The control plane is held back: "+plan.PreconditionMessage
	}
	if live := o.istios[sail.IstioName]; live != nil && metav1.IsControlledBy(live, mesh) {
		rd.controlPlane = r.managedControlPlane(mesh, live)
	}
	return rd
}

// sailStatus describes the Sail Operator installation.
func (r *ServiceMeshReconciler) sailStatus(ctx context.Context, present bool) (*v1alpha1.SailOperatorStatus, error) {
	if !present {
		return &v1alpha1.SailOperatorStatus{Source: v1alpha1.SailAbsent}, nil
	}
	rec, err := r.records().Get(ctx, r.Config.SailNamespace)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return &v1alpha1.SailOperatorStatus{Source: v1alpha1.SailPreinstalled}, nil
	}
	out := &v1alpha1.SailOperatorStatus{Source: v1alpha1.SailInstalled, Namespace: rec.Namespace, Holders: rec.Holders}
	if !r.Config.SailInstall {
		// Helm's release records are the installer's to read (a list of
		// ConfigMaps): without them the chart version stays unreported.
		return out, nil
	}
	rel, err := r.Helm.Get()
	if err != nil {
		return out, err
	}
	if rel != nil {
		out.ChartVersion = rel.ChartVersion
	}
	return out, nil
}

// ensureNamespace creates ns when it is missing. owner, when set, becomes
// its controller, which is what later allows deleting it; a namespace that
// already existed is used as it is and never deleted.
func (r *ServiceMeshReconciler) ensureNamespace(ctx context.Context, name string, owner *v1alpha1.ServiceMesh) error {
	ns := &corev1.Namespace{}
	err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, ns)
	if err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labels.ManagedBy: sail.ManagedBy}}}
	if owner != nil {
		ns.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, v1alpha1.GroupVersion.WithKind("ServiceMesh"))}
	}
	err = r.Client.Create(ctx, ns)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (r *ServiceMeshReconciler) ensureFinalizer(ctx context.Context, mesh *v1alpha1.ServiceMesh) error {
	return r.ensureNamedFinalizer(ctx, mesh, Finalizer)
}
