package standin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/shared/labels"
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

// serving is whether a stand-in listens on ip's peer port.
func serving(ip string) bool {
	resp, err := http.Get("http://" + ip + ":8081/state")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

func TestUpdateTouchesOnlyWhatChanged(t *testing.T) {
	p := &Pool{}
	defer p.StopAll()
	ctx := context.Background()
	require.Empty(t, p.Update(ctx, nil, []PodInfo{{UID: "u1", Name: "f-0", IP: "127.55.0.10"}, {UID: "u2", Name: "f-1", IP: "127.55.0.11"}}))
	getState(t, "127.55.0.10")
	require.Len(t, p.FirstStateReads(), 1)

	// u2 goes, u3 comes; u1 is not mentioned and keeps its stand-in (the
	// same one: its first read is still recorded).
	require.Empty(t, p.Update(ctx, []string{"u2"}, []PodInfo{{UID: "u3", Name: "f-2", IP: "127.55.0.12"}}))
	assert.True(t, serving("127.55.0.10"), "a Pod the update does not name keeps its stand-in")
	assert.Contains(t, p.FirstStateReads(), "127.55.0.10", "not restarted")
	assert.False(t, serving("127.55.0.11"), "a gone Pod's stand-in stops")
	assert.True(t, serving("127.55.0.12"))

	// A Pod that moved to another IP is served there only.
	require.Empty(t, p.Update(ctx, nil, []PodInfo{{UID: "u3", Name: "f-2", IP: "127.55.0.13"}}))
	assert.False(t, serving("127.55.0.12"))
	assert.True(t, serving("127.55.0.13"))
}

// TestUpdateRetriesATakenPort: kwok can give a deleted Pod's IP to its
// replacement before the watch reports the deletion; the replacement's
// stand-in cannot listen yet and starts once the old one is stopped.
func TestUpdateRetriesATakenPort(t *testing.T) {
	p := &Pool{}
	defer p.StopAll()
	ctx := context.Background()
	require.Empty(t, p.Update(ctx, nil, []PodInfo{{UID: "old", Name: "f-0", IP: "127.55.0.14", Image: "celld:1.0"}}))
	errs := p.Update(ctx, nil, []PodInfo{{UID: "new", Name: "f-0", IP: "127.55.0.14", Image: "celld:2.0"}})
	require.Len(t, errs, 1, "the port is still the old stand-in's")
	assert.Contains(t, errs[0].Error(), "address already in use")

	require.Empty(t, p.Update(ctx, []string{"old"}, nil), "the retry of the new Pod succeeds once the old one is gone")
	time.Sleep(10 * time.Millisecond)
	_, rep := getState(t, "127.55.0.14")
	assert.Equal(t, "2.0", rep.Version, "the replacement's stand-in answers")

	// A Pod that is gone before its retry succeeded is not started later.
	errs = p.Update(ctx, nil, []PodInfo{{UID: "third", Name: "f-1", IP: "127.55.0.14"}})
	require.Len(t, errs, 1)
	require.Empty(t, p.Update(ctx, []string{"third"}, nil))
	require.Empty(t, p.Update(ctx, []string{"new"}, nil))
	assert.False(t, serving("127.55.0.14"), "neither the stopped Pod nor the forgotten retry serves")
}

func TestRunningPod(t *testing.T) {
	now := metav1.Now()
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "f-0", UID: "u", Annotations: map[string]string{labels.StandinUnhealthy: "true"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Image: "proxy:1"}, {Name: "celld", Image: "celld:3.1"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.55.0.20"},
		}
		if mut != nil {
			mut(p)
		}
		return p
	}
	info, ok := runningPod(pod(nil))
	require.True(t, ok)
	assert.Equal(t, PodInfo{UID: "u", Name: "f-0", IP: "127.55.0.20", Image: "celld:3.1", Unhealthy: true}, info)
	for name, p := range map[string]*corev1.Pod{
		"absent":      nil,
		"pending":     pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
		"no IP":       pod(func(p *corev1.Pod) { p.Status.PodIP = "" }),
		"terminating": pod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
	} {
		_, ok := runningPod(p)
		assert.False(t, ok, name)
	}
}
