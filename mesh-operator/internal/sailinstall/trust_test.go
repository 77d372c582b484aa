package sailinstall

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestJudgeStored(t *testing.T) {
	rel := &Release{Revision: 3, ManifestDigest: "m3", Record: "Secret mesh-system/sh.helm.release.v1.sail-operator.v3"}
	for _, tc := range []struct {
		name     string
		rel      *Release
		rec      *Installed
		rendered string
		ok       bool
	}{
		{name: "no release: nothing to act on", rel: nil, ok: true},
		{name: "the recorded revision and manifest", rel: rel, rec: &Installed{Revision: 3, ManifestDigest: "m3"}, ok: true},
		{name: "recorded, but another revision", rel: rel, rec: &Installed{Revision: 2, ManifestDigest: "m3"}},
		{name: "recorded revision, another manifest", rel: rel, rec: &Installed{Revision: 3, ManifestDigest: "m2"}},
		{name: "no record, what the operator renders (its record was not written)", rel: rel, rendered: "m3", ok: true},
		{name: "no record, not what the operator renders", rel: rel, rendered: "other"},
		{name: "no record, rendering failed", rel: rel},
		{name: "an empty recorded digest vouches for nothing", rel: &Release{Revision: 1, Record: rel.Record}, rec: &Installed{Revision: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := JudgeStored(tc.rel, tc.rec, tc.rendered)
			assert.Equal(t, tc.ok, ok)
			if !ok {
				assert.Contains(t, why, rel.Record, "the refusal names the record")
			}
		})
	}
}

func TestJudgeLegacy(t *testing.T) {
	good := Release{Status: statusDeployed, ChartVersion: "1.30.0", Revision: 2, ManifestDigest: "m", Record: "ConfigMap sail-operator/sh.helm.release.v1.sail-operator.v2"}
	for _, tc := range []struct {
		name     string
		mutate   func(*Release)
		rendered string
		ok       bool
		says     string
	}{
		{name: "deployed, the configured version, what the operator renders", rendered: "m", ok: true},
		{name: "not deployed", mutate: func(r *Release) { r.Status = statusFailed }, rendered: "m", says: "failed, not deployed"},
		{name: "another chart version", mutate: func(r *Release) { r.ChartVersion = "1.29.0" }, rendered: "m", says: "not the configured 1.30.0"},
		{name: "another manifest (a forged record)", rendered: "n", says: "manifest sha256 m"},
		{name: "rendering failed", says: "manifest sha256 m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			if tc.mutate != nil {
				tc.mutate(&r)
			}
			ok, why := JudgeLegacy(&r, "1.30.0", tc.rendered)
			assert.Equal(t, tc.ok, ok)
			assert.Contains(t, why, tc.says)
			if !ok {
				assert.Contains(t, why, good.Record)
			}
		})
	}
}
