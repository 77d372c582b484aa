package sailinstall

import (
	"encoding/json"
	"fmt"

	"github.com/Masterminds/semver/v3"
)

// UpgradeDecision says whether the operator should upgrade the Sail
// release it installed, and why (for the event and the logs).
type UpgradeDecision struct {
	Upgrade bool
	Why     string
}

// DecideUpgrade judges the installed release against the chart the operator
// is configured with (its pinned version, or the repository's newest) and
// the user's sail.values. It upgrades only a deployed release that the
// operator alone holds (another holder installed or shares it for its own
// reasons, and gets no surprise), and only forward: a newer chart version,
// or the same version with other values. An operator older than the
// installed chart leaves it (downgrades of the Sail Operator are not
// supported).
func DecideUpgrade(installed *Release, version string, values map[string]any, soleHolder bool) UpgradeDecision {
	switch {
	case installed == nil || !installed.Deployed:
		return UpgradeDecision{Why: "no deployed release"}
	case !soleHolder:
		return UpgradeDecision{Why: "other holders share the installation: it stays as it is"}
	}
	if installed.ChartVersion != version {
		have, herr := semver.NewVersion(installed.ChartVersion)
		want, werr := semver.NewVersion(version)
		if herr != nil || werr != nil {
			return UpgradeDecision{Why: fmt.Sprintf("chart versions %q and %q are not comparable", installed.ChartVersion, version)}
		}
		if want.LessThan(have) {
			return UpgradeDecision{Why: fmt.Sprintf("installed chart %s is newer than %s: no downgrade", installed.ChartVersion, version)}
		}
		return UpgradeDecision{Upgrade: true, Why: fmt.Sprintf("chart %s -> %s", installed.ChartVersion, version)}
	}
	if !sameValues(installed.Values, values) {
		return UpgradeDecision{Upgrade: true, Why: "sail.values changed"}
	}
	return UpgradeDecision{Why: "up to date"}
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
