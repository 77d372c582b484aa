package standin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func getState(t *testing.T, ip string) (int, stateReport) {
	t.Helper()
	resp, err := http.Get("http://" + ip + ":8081/state")
	require.NoError(t, err)
	defer resp.Body.Close()
	var rep stateReport
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
	return resp.StatusCode, rep
}

func TestPoolServesStateContract(t *testing.T) {
	p := &Pool{StartupDelay: 200 * time.Millisecond}
	defer p.StopAll()
	errs := p.Sync(context.Background(), []PodInfo{{UID: "u1", Name: "f-0", IP: "127.55.0.7", Image: "registry.local/celld:1.2.0"}})
	require.Empty(t, errs)

	code, rep := getState(t, "127.55.0.7")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "Starting", rep.Phase)
	assert.False(t, rep.Healthy)

	time.Sleep(250 * time.Millisecond)
	code, rep = getState(t, "127.55.0.7")
	assert.Equal(t, http.StatusOK, code)
	assert.True(t, rep.Healthy)
	assert.Equal(t, "1.2.0", rep.Version)
	assert.EqualValues(t, 64, rep.Capacity.CellsTotal)

	require.Empty(t, p.Sync(context.Background(), []PodInfo{{UID: "u1", Name: "f-0", IP: "127.55.0.7", Image: "x:1", Unhealthy: true}}))
	_, rep = getState(t, "127.55.0.7")
	assert.False(t, rep.Healthy)
	assert.Equal(t, "Degraded", rep.Phase)

	p.StopAll()
	_, err := http.Get("http://127.55.0.7:8081/state")
	assert.Error(t, err, "a removed Pod's stand-in stops listening")
}

func TestFirstStateReads(t *testing.T) {
	p := &Pool{}
	defer p.StopAll()
	require.Empty(t, p.Sync(context.Background(), []PodInfo{{UID: "u1", Name: "f-0", IP: "127.55.0.8"}, {UID: "u2", Name: "f-1", IP: "127.55.0.9"}}))
	assert.Empty(t, p.FirstStateReads(), "nothing read yet")

	before := time.Now()
	getState(t, "127.55.0.8")
	first := p.FirstStateReads()
	require.Len(t, first, 1, "only the member that was read")
	assert.False(t, first["127.55.0.8"].Before(before))
	getState(t, "127.55.0.8")
	assert.Equal(t, first["127.55.0.8"], p.FirstStateReads()["127.55.0.8"], "a later read does not move the first one")

	p.ResetStateReads()
	assert.Empty(t, p.FirstStateReads(), "forgotten on reset")
	afterReset := time.Now()
	getState(t, "127.55.0.9")
	got := p.FirstStateReads()
	require.Len(t, got, 1)
	assert.False(t, got["127.55.0.9"].Before(afterReset))
}

func TestRefusesNonLoopback(t *testing.T) {
	p := &Pool{}
	errs := p.Sync(context.Background(), []PodInfo{{UID: "u", Name: "f-0", IP: "10.0.0.5"}})
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0].Error(), "non-loopback")
}

func TestVersionFromImage(t *testing.T) {
	for in, want := range map[string]string{
		"celld:1.0":                      "1.0",
		"registry:5000/team/celld:2.1.3": "2.1.3",
		"registry:5000/team/celld":       "latest",
		"celld:1.0@sha256:abc":           "1.0",
	} {
		assert.Equal(t, want, VersionFromImage(in), in)
	}
}
