//go:build e2e

package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// TestBenchSmoke runs the benchmark small (N=10 fleets, 10 mesh namespaces
// in the same bed, a 12 s steady window) as part of make test-e2e, so the
// harness cannot rot between benchmark runs. It writes no result files.
func TestBenchSmoke(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	var log bytes.Buffer
	start := time.Now()
	r, err := execute(root, options{n: []int{10}, mesh: []int{10}, steady: stateInterval + 2*time.Second, meshInFleetBed: true, log: &log}, nil)
	t.Logf("smoke took %s\n%s\n%s", time.Since(start).Round(time.Second), log.String(), markdown(r))
	require.NoError(t, err)
	require.NoError(t, failed(r), "every fleet converged, rolled and the floor served; every namespace STRICT")

	require.Len(t, r.Results, 1)
	res := r.Results[0]
	assert.Greater(t, res.ConvergenceSeconds, 0.0)
	assert.Greater(t, res.FloorSeconds, 0.0)
	assert.Equal(t, 5*res.N, res.FloorObjects, "the floor copied every fleet's objects")
	assert.Zero(t, res.Steady.Writes, "steady state: zero writes (%v)", res.Steady.Requests)
	assert.Greater(t, res.Steady.Requests["GET"]+res.Create.Requests["GET"], 0.0, "the operator's metrics were read")
	assert.Equal(t, 2*res.N, int(res.Create.Requests["POST"]), "2 POSTs per fleet to create it (requests %v)", res.Create.Requests)
	assert.Equal(t, 3.0, res.TemplateRoll.Requests["DELETE"], "one DELETE per member of the rolled fleet")
	assert.Len(t, res.Roll.MemberSeconds, rollMembers)
	assert.Greater(t, res.Roll.RollSeconds, res.Roll.SumMemberSeconds)
	assert.Greater(t, res.PeakRSSMiB, 0.0)

	require.Len(t, r.Mesh, 1)
	m := r.Mesh[0]
	assert.Greater(t, m.ControlPlaneReadySeconds, 0.0)
	assert.GreaterOrEqual(t, m.AllStrictSeconds, m.ControlPlaneReadySeconds, "STRICT only once the control plane is Ready")
	assert.GreaterOrEqual(t, m.PerNamespace["APPLY namespaces"], 2.0, "data-plane labels, then state labels: (%v)", m.WritesByResource)
	assert.Greater(t, m.Enroll.Writes, 0.0)
	// Once every namespace is STRICT nothing per namespace is written again.
	// (A single ServiceMesh status patch from a reconcile queued behind the
	// enrollment pass has been seen at M=300; it is reported, not failed.)
	assert.LessOrEqual(t, m.Settle.Writes, 1.0, "writes once every namespace is STRICT (%v)", m.Settle.Requests)
	for k := range m.SettleWritesByResource {
		for _, r := range perNamespaceResources {
			assert.NotContains(t, k, " "+r, "a namespace-scoped write after all STRICT: %v", m.SettleWritesByResource)
		}
	}
	assert.NotEmpty(t, r.Targets)
	assert.NotEmpty(t, r.Host.UptimeStart)
}
