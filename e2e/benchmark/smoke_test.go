//go:build e2e

package benchmark

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// TestBenchSmoke runs the benchmark small (N=10 fleets, 10 mesh namespaces
// in the same bed, a 12 s steady window) as part of make test-e2e, so the
// harness cannot rot between benchmark runs. It writes no result files and
// leaves out make bench's probes (reaction, cold restart, parallel floors),
// so it takes as long as before.
func TestBenchSmoke(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	var log bytes.Buffer
	start := time.Now()
	r, err := Execute(root, Options{N: []int{10}, Mesh: []int{10}, Steady: StateInterval + 2*time.Second, MeshInFleetBed: true, Log: &log}, nil)
	t.Logf("smoke took %s\n%s\n%s", time.Since(start).Round(time.Second), log.String(), Markdown(r))
	require.NoError(t, err)
	require.NoError(t, Failed(r), "every fleet converged, rolled and the floor served; every namespace STRICT")

	require.Len(t, r.Results, 1)
	res := r.Results[0]
	assert.Greater(t, res.ConvergenceSeconds, 0.0)
	assert.Greater(t, res.FloorSeconds, 0.0)
	assert.Equal(t, objectsPerFleet*res.N, res.FloorObjects, "the floor copied every fleet's objects")
	assert.Zero(t, res.Steady.Writes, "steady state: zero writes (%v)", res.Steady.Requests)
	assert.Greater(t, res.Steady.Requests["GET"]+res.Create.Requests["GET"], 0.0, "the operator's metrics were read")
	// One event per fleet, MembersCreated: until issue #20's eleventh round
	// every new fleet's StatefulSet was written a second time, with a
	// MembersUpdated event.
	assert.Equal(t, res.N, int(res.Create.Requests["POST"]), "1 POST per fleet to create it (requests %v)", res.Create.Requests)
	assert.Equal(t, float64(res.N), res.Create.ByResource["patch statefulsets"], "one StatefulSet apply per fleet (%v)", res.Create.ByResource)
	assert.Equal(t, 3.0, res.TemplateRoll.Requests["DELETE"], "one DELETE per member of the rolled fleet")
	// The audit log breaks the same requests down by resource.
	assert.Equal(t, 3.0, res.TemplateRoll.ByResource["delete pods"], "the rolled fleet's members, by resource (%v)", res.TemplateRoll.ByResource)
	assert.Zero(t, auditWrites(res.Steady.ByResource), "no write in steady state by the audit log either (%v)", res.Steady.ByResource)
	assert.Len(t, res.Roll.MemberSeconds, rollMembers)
	assert.Greater(t, res.Roll.RollSeconds, res.Roll.SumMemberSeconds)
	assert.Greater(t, res.PeakRSSMiB, 0.0)

	require.Len(t, r.Mesh, 1)
	m := r.Mesh[0]
	assert.Greater(t, m.ControlPlaneReadySeconds, 0.0)
	assert.GreaterOrEqual(t, m.AllStrictSeconds, m.ControlPlaneReadySeconds, "STRICT only once the control plane is Ready")
	assert.GreaterOrEqual(t, m.PerNamespace["APPLY namespaces"], 2.0, "data-plane labels, then state labels: (%v)", m.WritesByResource)
	assert.Greater(t, m.Enroll.Writes, 0.0)
	// Once every namespace is STRICT nothing is written again (the status
	// patch of a reconcile queued behind the enrollment pass is gone).
	assert.Zero(t, m.Settle.Writes, "writes once every namespace is STRICT (%v)", m.Settle.Requests)
	for k := range m.SettleWritesByResource {
		for _, r := range perNamespaceResources {
			assert.NotContains(t, k, " "+r, "a namespace-scoped write after all STRICT: %v", m.SettleWritesByResource)
		}
	}
	// Where the CPU went over the pass: the bed's own API server and etcd
	// were found and measured, and so was the operator. (The smoke runs no
	// floor; the full bench measures it the same way.)
	w := m.PassCPU
	assert.Greater(t, w.Seconds, 0.0, "%+v", w)
	assert.Greater(t, w.APIServerSeconds, 0.0, "the API server served the writes (%+v)", w)
	assert.Greater(t, w.ClientSeconds, 0.0, "the operator sent them (%+v)", w)
	assert.Greater(t, w.BusyCores, 0.0, "%+v", w)
	assert.LessOrEqual(t, w.BusyCores, float64(runtime.NumCPU())+0.1, "busy cores are at most the host's (%+v)", w)
	assert.LessOrEqual(t, w.APIServerSeconds+w.EtcdSeconds+w.ClientSeconds, w.BusyCores*w.Seconds+0.2, "part of the machine's busy time (%+v)", w)
	assert.Contains(t, Markdown(r), "| 10 | creating the ServiceMesh → all STRICT |", "the report shows where the CPU went")
	assert.NotContains(t, Markdown(r), "| 10 | floor |", "no floor was run")
	assert.NotEmpty(t, r.Targets)
	assert.NotEmpty(t, r.Host.UptimeStart)
}
