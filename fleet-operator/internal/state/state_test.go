package state

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func serve(t *testing.T, h http.HandlerFunc) (string, int) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	p, _ := strconv.Atoi(port)
	return host, p
}

func TestReadParsesContract(t *testing.T) {
	ip, port := serve(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/state", r.URL.Path)
		_, _ = w.Write([]byte(`{"healthy":true,"phase":"Serving","version":"1.2.3","capacity":{"cellsUsed":7,"cellsTotal":64},"extra":"ignored"}`))
	})
	rep, err := NewReader(time.Second).Read(context.Background(), ip, port)
	require.NoError(t, err)
	assert.Equal(t, &Report{Healthy: true, Phase: "Serving", Version: "1.2.3", Capacity: &Capacity{CellsUsed: 7, CellsTotal: 64}}, rep)
}

func TestReadNotServing(t *testing.T) {
	ip, port := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"healthy":true,"phase":"Recovering"}`))
	})
	rep, err := NewReader(time.Second).Read(context.Background(), ip, port)
	require.NoError(t, err)
	assert.False(t, rep.Healthy, "a 503 is never healthy, whatever the body says")
	assert.Equal(t, "Recovering", rep.Phase)
}

func TestReadFailures(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"not JSON":     func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("<html>")) },
		"server error": func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500); _, _ = w.Write([]byte(`{}`)) },
		"too slow":     func(w http.ResponseWriter, r *http.Request) { time.Sleep(500 * time.Millisecond) },
	} {
		t.Run(name, func(t *testing.T) {
			ip, port := serve(t, h)
			start := time.Now()
			_, err := NewReader(200*time.Millisecond).Read(context.Background(), ip, port)
			assert.Error(t, err)
			assert.Less(t, time.Since(start), 450*time.Millisecond, "the timeout bounds a read")
		})
	}
	_, err := NewReader(time.Second).Read(context.Background(), "", 8081)
	assert.ErrorContains(t, err, "no IP")
}

func TestReadAll(t *testing.T) {
	ip, port := serve(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"healthy":true}`)) })
	got := NewReader(time.Second).ReadAll(context.Background(), []Target{{Key: "a", IP: ip}, {Key: "b", IP: ""}}, port)
	require.Len(t, got, 2)
	assert.NoError(t, got["a"].Err)
	assert.True(t, got["a"].Report.Healthy)
	assert.Error(t, got["b"].Err)
}

// TestConnectionKeptOnlyBetweenQuickReads: reads a poll apart (a member
// starting, a roll) share one connection; a member read only at rest, once
// per state interval, holds none in between. At 3,000 members an idle
// connection each cost the operator about 65 MiB (two goroutines and 8 KiB
// of buffers per connection; issue #20's memory target).
func TestConnectionKeptOnlyBetweenQuickReads(t *testing.T) {
	var opened, closed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"healthy":true}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	p, _ := strconv.Atoi(port)

	r := NewReader(time.Second)
	for i := 0; i < 3; i++ {
		_, err := r.Read(context.Background(), host, p)
		require.NoError(t, err)
		time.Sleep(250 * time.Millisecond)
	}
	assert.Equal(t, int32(1), opened.Load(), "reads 250 ms apart share one connection")
	assert.Eventually(t, func() bool { return closed.Load() == 1 }, 2*idleConnTimeout+time.Second, 50*time.Millisecond,
		"the idle connection is closed well before the next read at rest")
}

// TestStarting: only an unhealthy report in phase Starting (any case) says
// the runtime is still coming up.
func TestStarting(t *testing.T) {
	for _, tc := range []struct {
		rep  *Report
		want bool
	}{
		{&Report{Healthy: false, Phase: "Starting"}, true},
		{&Report{Healthy: false, Phase: "starting"}, true},
		{&Report{Healthy: true, Phase: "Starting"}, false},
		{&Report{Healthy: false, Phase: "Recovering"}, false},
		{&Report{Healthy: false}, false},
		{nil, false},
	} {
		assert.Equal(t, tc.want, tc.rep.Starting(), "%+v", tc.rep)
	}
}
