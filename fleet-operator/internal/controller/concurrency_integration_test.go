//go:build integration

package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/state"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestFleetsReconciledConcurrently runs the operator under a manager, as in
// a cluster, with one-member fleets whose /state answers only after 300 ms
// (a slow or loaded member). One fleet's reconcile waiting on its members
// must not hold every other fleet's: at a thousand fleets the periodic
// /state reads alone would keep the work queue busy, and a spec change (an
// image roll) or a restart's first pass would wait behind all of them. So
// the reads of different fleets overlap.
// oneMemberFleets creates fleets f0..f<n-1> in ns with one running member
// each, whose /state is served by h on 127.<subnet>.<pid>.<i+1> (above the
// test beds' node ranges, 127.1–127.250; the third octet from the process
// so that two test processes on one machine do not share them).
func oneMemberFleets(t *testing.T, c client.Client, ns string, n int, subnet byte, h http.Handler) {
	t.Helper()
	for i := 0; i < n; i++ {
		ip := fmt.Sprintf("127.%d.%d.%d", subnet, os.Getpid()%250, i+1)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(names.PeerPort)))
		require.NoError(t, err)
		srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		f := fleet(ns, "f"+strconv.Itoa(i))
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, c.Create(context.Background(), f))
		runningMember(t, c, ns, f.Name, 0, false, "rev1", ip)
	}
}

func TestFleetsReconciledConcurrently(t *testing.T) {
	ctx := context.Background()
	scheme := newScheme(t)
	env := testenv.Start(t, scheme, "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "many")
	cfg := newHarness(t, env, true).r.Config
	cfg.StateTimeout = 2 * time.Second

	var inFlight, maxInFlight, reads atomic.Int32
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(300 * time.Millisecond)
		inFlight.Add(-1)
		reads.Add(1)
		_ = json.NewEncoder(w).Encode(state.Report{Healthy: true, Phase: "Running", Version: "1.0.0"})
	})
	const fleets = 6
	oneMemberFleets(t, env.Client, "many", fleets, 251, slow)

	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	RestrictCache(cfg, &opts.Cache)
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	mgr, err := ctrl.NewManager(env.Config, opts)
	require.NoError(t, err)
	require.NoError(t, SetupWithManager(mgr, cfg))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	read := func(name string) bool {
		f := &v1alpha1.CelldFleet{}
		if env.Client.Get(ctx, types.NamespacedName{Namespace: "many", Name: name}, f) != nil || len(f.Status.Members) != 1 {
			return false
		}
		return f.Status.Members[0].State != nil && f.Status.Members[0].State.Healthy
	}
	if !assert.Eventually(t, func() bool {
		for i := 0; i < fleets; i++ {
			if !read("f" + strconv.Itoa(i)) {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every fleet's member read and reported") {
		f := &v1alpha1.CelldFleet{}
		require.NoError(t, env.Client.Get(ctx, types.NamespacedName{Namespace: "many", Name: "f0"}, f))
		t.Fatalf("%d reads; f0's status: %+v", reads.Load(), f.Status)
	}
	assert.GreaterOrEqual(t, maxInFlight.Load(), int32(2),
		"the /state reads of different one-member fleets overlapped (%d reads in all): fleets are reconciled concurrently", reads.Load())
}
