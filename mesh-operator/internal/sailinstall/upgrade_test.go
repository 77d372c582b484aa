package sailinstall

import "testing"

func TestDecideUpgrade(t *testing.T) {
	deployed := func(version string, values map[string]any) *Release {
		return &Release{ChartVersion: version, Deployed: true, Values: values}
	}
	mirror := map[string]any{"image": "mirror.example/sail:1.31.0", "replicas": float64(2)}
	for _, tc := range []struct {
		name      string
		installed *Release
		version   string
		values    map[string]any
		sole      bool
		want      bool
	}{
		{"no release", nil, "1.31.0", nil, true, false},
		{"a failed release is reinstalled, not upgraded", &Release{ChartVersion: "1.30.0", Status: "failed"}, "1.31.0", nil, true, false},
		{"newer pinned version", deployed("1.30.0", nil), "1.31.0", nil, true, true},
		{"patch release", deployed("1.30.0", nil), "1.30.1", nil, true, true},
		{"older pinned version: no downgrade", deployed("1.31.0", nil), "1.30.0", nil, true, false},
		{"prerelease of an installed version is older", deployed("1.31.0", nil), "1.31.0-rc.1", nil, true, false},
		{"unparsable version", deployed("1.30.0", nil), "latest", nil, true, false},
		{"same version, same values", deployed("1.31.0", mirror), "1.31.0", map[string]any{"replicas": 2, "image": "mirror.example/sail:1.31.0"}, true, false},
		{"same version, values changed", deployed("1.31.0", nil), "1.31.0", mirror, true, true},
		{"same version, values removed", deployed("1.31.0", mirror), "1.31.0", nil, true, true},
		{"nil and empty values are the same", deployed("1.31.0", map[string]any{}), "1.31.0", nil, true, false},
		{"another holder: never", deployed("1.30.0", nil), "1.31.0", mirror, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DecideUpgrade(tc.installed, tc.version, tc.values, tc.sole)
			if got.Upgrade != tc.want || got.Why == "" {
				t.Errorf("DecideUpgrade = %+v, want upgrade %t with a reason", got, tc.want)
			}
		})
	}
}
