package sailinstall

import "testing"

func TestDecideRelease(t *testing.T) {
	deployed := func(version string, values map[string]any) *Release {
		return &Release{Status: "deployed", ChartVersion: version, Deployed: true, Values: values, Revision: 1}
	}
	// left is a release whose revision 3 was left in status, after revision
	// 2 (chart deployedVersion) had run; deployedVersion "" means none had.
	left := func(status, version, deployedVersion string) *Release {
		r := &Release{Status: status, ChartVersion: version, Revision: 3}
		if deployedVersion != "" {
			r.DeployedRevision, r.DeployedChartVersion = 2, deployedVersion
		}
		return r
	}
	withCRDs := left("pending-install", "1.30.0", "")
	withCRDs.TemplateCRDs = []string{"istios.sailoperator.io"}
	mirror := map[string]any{"image": "mirror.example/sail:1.31.0", "replicas": float64(2)}
	for _, tc := range []struct {
		name       string
		installed  *Release
		version    string
		values     map[string]any
		sole       bool
		want       ReleaseAction
		rollbackTo int
	}{
		{"no release: install", nil, "1.31.0", nil, true, ReleaseInstall, 0},
		{"newer pinned version", deployed("1.30.0", nil), "1.31.0", nil, true, ReleaseUpgrade, 0},
		{"patch release", deployed("1.30.0", nil), "1.30.1", nil, true, ReleaseUpgrade, 0},
		{"older pinned version: no downgrade", deployed("1.31.0", nil), "1.30.0", nil, true, ReleaseKeep, 0},
		{"prerelease of an installed version is older", deployed("1.31.0", nil), "1.31.0-rc.1", nil, true, ReleaseKeep, 0},
		{"unparsable version", deployed("1.30.0", nil), "latest", nil, true, ReleaseKeep, 0},
		{"same version, same values", deployed("1.31.0", mirror), "1.31.0", map[string]any{"replicas": 2, "image": "mirror.example/sail:1.31.0"}, true, ReleaseKeep, 0},
		{"same version, values changed", deployed("1.31.0", nil), "1.31.0", mirror, true, ReleaseUpgrade, 0},
		{"same version, values removed", deployed("1.31.0", mirror), "1.31.0", nil, true, ReleaseUpgrade, 0},
		{"nil and empty values are the same", deployed("1.31.0", map[string]any{}), "1.31.0", nil, true, ReleaseKeep, 0},
		{"another holder: a deployed release never moves", deployed("1.30.0", nil), "1.31.0", mirror, false, ReleaseKeep, 0},

		{"a failed first install is upgraded in place", left("failed", "1.30.0", ""), "1.30.0", nil, true, ReleaseUpgrade, 0},
		{"a failed upgrade is retried", left("failed", "1.31.0", "1.30.0"), "1.31.0", nil, true, ReleaseUpgrade, 0},
		{"a failed upgrade, an older chart wanted now: back to what ran", left("failed", "1.32.0", "1.31.0"), "1.30.0", nil, true, ReleaseRollback, 2},
		{"a failed upgrade, the chart that ran wanted: upgraded to it", left("failed", "1.32.0", "1.31.0"), "1.31.0", nil, true, ReleaseUpgrade, 0},
		{"a failed release is repaired whoever holds it", left("failed", "1.30.0", ""), "1.30.0", nil, false, ReleaseUpgrade, 0},
		{"an interrupted upgrade goes back to the deployed revision", left("pending-upgrade", "1.31.0", "1.30.0"), "1.31.0", nil, true, ReleaseRollback, 2},
		{"an interrupted rollback goes back to the deployed revision", left("pending-rollback", "1.30.0", "1.31.0"), "1.31.0", nil, true, ReleaseRollback, 2},
		{"an interrupted upgrade of a never deployed release: reinstall", left("pending-upgrade", "1.31.0", ""), "1.31.0", nil, true, ReleaseReinstall, 0},
		{"an interrupted install: reinstall", left("pending-install", "1.30.0", ""), "1.30.0", nil, true, ReleaseReinstall, 0},
		{"an interrupted install with CRDs in its templates: held", withCRDs, "1.30.0", nil, true, ReleaseHold, 0},
		{"uninstalling: held", left("uninstalling", "1.30.0", "1.30.0"), "1.30.0", nil, true, ReleaseHold, 0},
		{"unknown: held", left("unknown", "1.30.0", ""), "1.30.0", nil, true, ReleaseHold, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideRelease(tc.installed, tc.version, tc.values, tc.sole)
			if got.Action != tc.want || got.RollbackTo != tc.rollbackTo || got.Why == "" {
				t.Errorf("DecideRelease = %+v, want %s (rollback to %d) with a reason", got, tc.want, tc.rollbackTo)
			}
		})
	}
}

func TestCurrent(t *testing.T) {
	rel := &Release{Status: "deployed", Deployed: true, ChartVersion: "1.30.0", Values: map[string]any{"image": "m/sail:1"}}
	for _, tc := range []struct {
		name    string
		rel     *Release
		version string
		values  map[string]any
		want    bool
	}{
		{"same chart and values", rel, "1.30.0", map[string]any{"image": "m/sail:1"}, true},
		{"no release", nil, "1.30.0", nil, false},
		{"unpinned: only the chart tells", rel, "", map[string]any{"image": "m/sail:1"}, false},
		{"other version", rel, "1.31.0", map[string]any{"image": "m/sail:1"}, false},
		{"other values", rel, "1.30.0", nil, false},
		{"not deployed", &Release{Status: "failed", ChartVersion: "1.30.0"}, "1.30.0", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Current(tc.rel, tc.version, tc.values); got != tc.want {
				t.Errorf("Current = %t, want %t", got, tc.want)
			}
		})
	}
}
