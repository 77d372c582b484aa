package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
)

// Trusting the stored Sail release.
//
// Helm upgrades, rolls back and uninstalls against the release it finds
// stored: an upgrade deletes what the stored manifest lists and the new
// one does not, with the installer role. So the operator keeps the release
// records as Secrets in its own namespace (only its admins may write
// there), records which revision and manifest it made last
// (sailinstall.Installed, a ConfigMap next to them), and acts on a stored
// release only when it is that revision, or when its manifest is exactly
// what the operator renders from its verified chart and its values (an
// action whose record it did not live to write). A release an earlier
// version stored as ConfigMaps in the Sail namespace (writable by that
// namespace's editors) is adopted under the same rule, and only when it is
// deployed and of the configured chart version. Anything else is refused
// with SailReleaseUntrusted and left as it is.

// untrustedSailRelease is the refusal: the condition's reason and a
// message that says what disagrees and what to do.
func untrustedSailRelease(ns, why string) error {
	return withReason(v1alpha1.ReasonSailReleaseUntrusted, fmt.Errorf(
		"the Sail Operator release %s/%s is left as it is (no upgrade, rollback or uninstall, which would delete what its record lists): %s. "+
			"Check who wrote that record; delete a forged one, or repair the release by hand (docs/troubleshooting.md, SailReleaseUntrusted)", ns, SailReleaseName, why))
}

// checkSailRelease returns nil when rel may be upgraded, rolled back or
// uninstalled, and the SailReleaseUntrusted refusal otherwise. A release
// recognised by its rendering is recorded, so the next pass needs no render.
func (r *ServiceMeshReconciler) checkSailRelease(ctx context.Context, rel *sailinstall.Release, ch *sailinstall.Chart) error {
	rec, err := r.records().GetInstalled(ctx, r.Config.OperatorNamespace)
	if err != nil {
		return err
	}
	if sailinstall.Recorded(rel, rec) {
		return nil
	}
	rendered, err := r.Helm.RenderDigest(ctx, ch, r.Config.SailValues)
	if err != nil {
		return withReason(v1alpha1.ReasonSailReleaseUntrusted, fmt.Errorf("the stored Sail release is not the one the operator recorded, and rendering the chart to compare failed: %w", err))
	}
	if ok, why := sailinstall.JudgeStored(rel, rec, rendered); !ok {
		return untrustedSailRelease(r.Config.SailNamespace, why)
	}
	return r.recordSailRelease(ctx, ch)
}

// adoptLegacySailRelease looks for a release an earlier operator version
// stored as ConfigMaps in the Sail namespace. None: false. One that passes
// sailinstall.JudgeLegacy is moved into the operator's storage and
// recorded: true. Any other is refused (SailReleaseUntrusted).
func (r *ServiceMeshReconciler) adoptLegacySailRelease(ctx context.Context, mesh *v1alpha1.ServiceMesh) (bool, error) {
	legacy, err := r.Helm.GetLegacy()
	if err != nil || legacy == nil {
		return false, err
	}
	ch, err := r.loadChart(ctx)
	if err != nil {
		return false, withChartReason(fmt.Errorf("the chart is needed to check the Sail release an earlier operator version stored (%s): %w", legacy.Record, err))
	}
	rendered, err := r.Helm.RenderDigest(ctx, ch, r.Config.SailValues)
	if err != nil {
		return false, withReason(v1alpha1.ReasonSailReleaseUntrusted, fmt.Errorf("rendering the chart to check the stored Sail release %s failed: %w", legacy.Record, err))
	}
	if ok, why := sailinstall.JudgeLegacy(legacy, ch.Metadata.Version, rendered); !ok {
		return false, untrustedSailRelease(r.Config.SailNamespace, "an earlier operator version stored it as ConfigMaps in "+r.Config.SailNamespace+
			", which that namespace's editors may write, and "+why)
	}
	if err := r.Helm.AdoptLegacy(legacy.Revision); err != nil {
		return false, withReason(v1alpha1.ReasonSailInstallFailed, err)
	}
	if err := r.recordSailRelease(ctx, ch); err != nil {
		return false, err
	}
	r.Recorder.Eventf(mesh, nil, corev1.EventTypeNormal, string(v1alpha1.EventSailReleaseAdopted), "Adopt",
		"Moved the Sail Operator release %s/%s (revision %d, chart %s), stored by an earlier operator version as ConfigMaps in %s, into Secrets in %s: its manifest is what this operator renders.",
		r.Config.SailNamespace, SailReleaseName, legacy.Revision, legacy.ChartVersion, r.Config.SailNamespace, r.Config.OperatorNamespace)
	return true, nil
}

// recordSailRelease writes the operator's record of the stored release
// after it acted on it. ch is the chart it used (nil after a rollback,
// whose chart is the earlier revision's: its digest is then not known).
func (r *ServiceMeshReconciler) recordSailRelease(ctx context.Context, ch *sailinstall.Chart) error {
	rel, err := r.Helm.Get()
	if err != nil {
		return err
	}
	if rel == nil {
		return fmt.Errorf("the Sail release %s/%s is not stored after the operator acted on it", r.Config.SailNamespace, SailReleaseName)
	}
	in := sailinstall.Installed{Revision: rel.Revision, ChartVersion: rel.ChartVersion, ManifestDigest: rel.ManifestDigest}
	if ch != nil && ch.Metadata.Version == rel.ChartVersion {
		r.chartMu.Lock()
		in.ChartDigest = r.chartDigest
		r.chartMu.Unlock()
	}
	if err := r.records().PutInstalled(ctx, r.Config.OperatorNamespace, in); err != nil {
		return fmt.Errorf("recording the Sail release the operator made: %w", err)
	}
	return nil
}

// recordCurrentSailRelease makes sure a current release the operator
// made is recorded, when the record was not written after the action (the
// write failed, or the operator stopped in between): a later upgrade to
// other values could no longer recognise it by rendering. Only a release
// that is exactly what the operator renders is recorded; anything else is
// left for checkSailRelease to refuse when an action comes. Best effort:
// nothing depends on it in this pass.
func (r *ServiceMeshReconciler) recordCurrentSailRelease(ctx context.Context, rel *sailinstall.Release) {
	log := ctrl.LoggerFrom(ctx)
	rec, err := r.records().GetInstalled(ctx, r.Config.OperatorNamespace)
	if err != nil || sailinstall.Recorded(rel, rec) {
		return
	}
	ch, err := r.loadChart(ctx)
	if err != nil {
		log.V(1).Info("the Sail release is not recorded yet; the chart to check it is unavailable", "error", err.Error())
		return
	}
	rendered, err := r.Helm.RenderDigest(ctx, ch, r.Config.SailValues)
	if err != nil || rendered != rel.ManifestDigest {
		return
	}
	if err := r.recordSailRelease(ctx, ch); err != nil {
		log.Error(err, "recording the Sail release")
	}
}

// sailReleaseForUninstall decides, before the last holder's uninstall,
// whether the stored release may be uninstalled (adopting an earlier
// version's first). A refusal comes back as the SailTeardown reason and
// message, with a Warning event: the teardown then leaves the whole
// installation as it is.
func (r *ServiceMeshReconciler) sailReleaseForUninstall(ctx context.Context, mesh *v1alpha1.ServiceMesh, ch *sailinstall.Chart) (v1alpha1.ConditionReason, string, error) {
	rel, err := r.Helm.Get()
	if err != nil {
		return "", "", err
	}
	if rel == nil {
		if _, err = r.adoptLegacySailRelease(ctx, mesh); err == nil {
			rel, err = r.Helm.Get()
		}
	}
	if err == nil && rel != nil {
		err = r.checkSailRelease(ctx, rel, ch)
	}
	var re *reasonedError
	if errors.As(err, &re) && re.reason == v1alpha1.ReasonSailReleaseUntrusted {
		msg := "Kept the Sail Operator, its CRDs and the holders record: " + re.Error()
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonSailReleaseUntrusted), "Delete", "%s", msg)
		return v1alpha1.ReasonSailReleaseUntrusted, msg, nil
	}
	return "", "", err
}
