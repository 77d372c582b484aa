package sailinstall

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// ReleaseAction is what the operator does with the Sail release it holds.
type ReleaseAction string

const (
	// ReleaseKeep: the release is deployed and current (or must not move).
	ReleaseKeep ReleaseAction = "Keep"
	// ReleaseInstall: there is no release; install it.
	ReleaseInstall ReleaseAction = "Install"
	// ReleaseUpgrade: move the release in place to the wanted chart and
	// values (also how a failed release is repaired: Helm upgrades a
	// failed release, keeping what it created).
	ReleaseUpgrade ReleaseAction = "Upgrade"
	// ReleaseRollback: an upgrade or rollback was interrupted (pending);
	// go back to the last revision that was deployed, then decide again.
	ReleaseRollback ReleaseAction = "Rollback"
	// ReleaseReinstall: an install that never deployed was interrupted
	// (pending-install); Helm neither upgrades nor rolls back a pending
	// release, so uninstall it and install again. Helm's uninstall deletes
	// only the objects of the release's templates, never the CRDs it
	// created from crds/ and so never a Sail resource.
	ReleaseReinstall ReleaseAction = "Reinstall"
	// ReleaseHold: the release is in a state the operator does not repair;
	// it is reported and left as it is.
	ReleaseHold ReleaseAction = "Hold"
)

// ReleaseDecision says what to do with the release, and why (for the
// event, the condition and the logs).
type ReleaseDecision struct {
	Action ReleaseAction
	// RollbackTo is the revision a rollback returns to.
	RollbackTo int
	Why        string
}

// Helm's release states (helm.sh/helm/v4/pkg/release/common).
const (
	statusDeployed        = "deployed"
	statusFailed          = "failed"
	statusPendingInstall  = "pending-install"
	statusPendingUpgrade  = "pending-upgrade"
	statusPendingRollback = "pending-rollback"
)

// DecideRelease judges the recorded release against the chart the
// operator is configured with (its pinned version, or the repository's
// newest) and the user's sail.values, on every pass.
//
// A deployed release moves only forward (a newer chart version, or the
// same version with other values: downgrades of the Sail Operator are not
// supported) and only when the operator alone holds it: another holder
// installed or shares it for its own reasons, and gets no surprise.
//
// A release that is not deployed is repaired, as the install it stands
// for has to finish: a failed one is upgraded in place (or, when the
// wanted chart is older than what last ran, rolled back to that), an
// interrupted upgrade or rollback is rolled back to the last deployed
// revision, and only a release that never deployed is reinstalled, unless
// its templates hold CRDs, which an uninstall would delete with every
// resource of their kinds.
func DecideRelease(installed *Release, version string, values map[string]any, soleHolder bool) ReleaseDecision {
	if installed == nil {
		return ReleaseDecision{Action: ReleaseInstall, Why: "no release"}
	}
	switch installed.Status {
	case statusDeployed:
		return decideDeployed(installed, version, values, soleHolder)
	case statusFailed:
		if installed.DeployedRevision > 0 && older(version, installed.DeployedChartVersion) {
			return ReleaseDecision{Action: ReleaseRollback, RollbackTo: installed.DeployedRevision,
				Why: fmt.Sprintf("release revision %d failed and chart %s is older than %s, which revision %d ran: back to it", installed.Revision, version, installed.DeployedChartVersion, installed.DeployedRevision)}
		}
		return ReleaseDecision{Action: ReleaseUpgrade, Why: fmt.Sprintf("release revision %d (chart %s) failed: upgraded in place to chart %s", installed.Revision, installed.ChartVersion, version)}
	case statusPendingUpgrade, statusPendingRollback:
		if installed.DeployedRevision > 0 {
			return ReleaseDecision{Action: ReleaseRollback, RollbackTo: installed.DeployedRevision,
				Why: fmt.Sprintf("release revision %d was left %s: back to revision %d, the last deployed", installed.Revision, installed.Status, installed.DeployedRevision)}
		}
		return reinstall(installed)
	case statusPendingInstall:
		return reinstall(installed)
	}
	return ReleaseDecision{Action: ReleaseHold, Why: fmt.Sprintf("release revision %d is %s, which the operator does not repair", installed.Revision, installed.Status)}
}

func reinstall(installed *Release) ReleaseDecision {
	if len(installed.TemplateCRDs) > 0 {
		return ReleaseDecision{Action: ReleaseHold, Why: fmt.Sprintf("release revision %d was left %s and never deployed, but its templates hold CRDs (%s) "+
			"that uninstalling it would delete with their resources: repair it by hand (helm rollback or upgrade)", installed.Revision, installed.Status, strings.Join(installed.TemplateCRDs, ", "))}
	}
	return ReleaseDecision{Action: ReleaseReinstall, Why: fmt.Sprintf("release revision %d was left %s and never deployed: installed again", installed.Revision, installed.Status)}
}

func decideDeployed(installed *Release, version string, values map[string]any, soleHolder bool) ReleaseDecision {
	if !soleHolder {
		return ReleaseDecision{Action: ReleaseKeep, Why: "other holders share the installation: it stays as it is"}
	}
	if installed.ChartVersion != version {
		have, herr := semver.NewVersion(installed.ChartVersion)
		want, werr := semver.NewVersion(version)
		if herr != nil || werr != nil {
			return ReleaseDecision{Action: ReleaseKeep, Why: fmt.Sprintf("chart versions %q and %q are not comparable", installed.ChartVersion, version)}
		}
		if want.LessThan(have) {
			return ReleaseDecision{Action: ReleaseKeep, Why: fmt.Sprintf("installed chart %s is newer than %s: no downgrade", installed.ChartVersion, version)}
		}
		return ReleaseDecision{Action: ReleaseUpgrade, Why: fmt.Sprintf("chart %s -> %s", installed.ChartVersion, version)}
	}
	if !sameValues(installed.Values, values) {
		return ReleaseDecision{Action: ReleaseUpgrade, Why: "sail.values changed"}
	}
	return ReleaseDecision{Action: ReleaseKeep, Why: "up to date"}
}

// older: version is a lower chart version than than (both parse).
func older(version, than string) bool {
	v, verr := semver.NewVersion(version)
	t, terr := semver.NewVersion(than)
	return verr == nil && terr == nil && v.LessThan(t)
}

// Current reports, without the chart, whether a deployed release already
// is version with values: the pass then needs no chart fetch (the
// repository may be out of reach long after the install).
func Current(installed *Release, version string, values map[string]any) bool {
	return installed != nil && installed.Status == statusDeployed && version != "" &&
		installed.ChartVersion == version && sameValues(installed.Values, values)
}

// sameValues compares as JSON, the form both sides came from (the flag and
// Helm's release record), so number types and nil-versus-empty do not count.
func sameValues(a, b map[string]any) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}
