//go:build integration

package controller

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestRestartListsBeforeItReconciles: after a restart, the first pass over
// the fleets must not wait on caches that start only when a reconcile asks
// for them. Issue #20's cold restart at 1,000 fleets (3.98× the informers'
// sync) showed every worker first blocked on reads of Istio's policies from
// the API server (their caches started at the first reconcile), then on the
// member claims' informer (cached but not watched, so it listed only when
// the first reconcile read a claim). Both are listed before the workers
// start, and the first pass reads neither kind from the API server.
func TestRestartListsBeforeItReconciles(t *testing.T) {
	ctx := context.Background()
	env := startEnvWithCRDClient(t)
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "restart")
	cfg := newHarness(t, env, true).r.Config
	cfg.StateInterval = time.Hour // the only reconciles are the first pass's

	// A member whose /state answers healthy.
	ip := fmt.Sprintf("127.252.%d.1", os.Getpid()%250)
	serveState(t, ip)

	// A meshed fleet with a disk, brought to rest by a first operator.
	f := fleet("restart", "r")
	f.Spec.Replicas = ptr.To[int32](1)
	f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
	require.NoError(t, env.Client.Create(ctx, f))
	first := startOperator(t, env, env.Config, cfg)
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: "restart", Name: "r-mesh"}, policy(mesh.AuthorizationPolicyKind)) == nil
	}, 30*time.Second, 100*time.Millisecond, "the operator applies the fleet's policies")
	require.Eventually(t, func() bool { return playStatefulSetErr(env.Client, "restart", "r", "rev1") == nil }, 10*time.Second, 100*time.Millisecond)
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "restart", Name: members.DataVolume + "-r-0",
			Labels: map[string]string{labels.Name: names.Runtime, labels.Instance: "r"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, claim))
	runningMember(t, env.Client, "restart", "r", 0, true, "rev1", ip)
	require.Eventually(t, func() bool {
		return env.Client.Get(ctx, client.ObjectKeyFromObject(f), f) == nil && f.Status.Mesh == "Meshed" &&
			len(f.Status.Members) == 1 && f.Status.Members[0].State != nil && f.Status.Members[0].State.Healthy
	}, 30*time.Second, 100*time.Millisecond, "the fleet is meshed and at rest")
	first()

	// The restart: a new operator, whose requests are watched as they go.
	base := reconciles(t)
	var mu sync.Mutex
	// An informer lists with a LIST, or with a WATCH that sends the initial
	// objects first (client-go's WatchList): its first request of either.
	startedBeforeList := map[string]float64{}
	n := requestCounter{seen: func(key string) {
		verb, resource, _ := strings.Cut(key, " ")
		switch resource {
		case "persistentvolumeclaims", "peerauthentications", "authorizationpolicies":
			if verb != "LIST" && verb != "WATCH" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if _, ok := startedBeforeList[resource]; !ok {
				startedBeforeList[resource] = reconciles(t) - base + activeWorkers(t)
			}
		}
	}}
	startOperator(t, env, n.wrap(env.Config), cfg)
	require.Eventually(t, func() bool { return reconciles(t)-base >= 1 }, 30*time.Second, 100*time.Millisecond, "the fleet is reconciled after the restart")
	time.Sleep(500 * time.Millisecond)
	counts := n.reset()
	t.Logf("the restarted operator's requests: %v", counts)

	mu.Lock()
	defer mu.Unlock()
	for _, resource := range []string{"persistentvolumeclaims", "peerauthentications", "authorizationpolicies"} {
		started, listed := startedBeforeList[resource]
		if assert.True(t, listed, "%s listed", resource) {
			assert.Zero(t, started, "%s listed before any reconcile started (reconciles started or done by then: %v)", resource, started)
		}
	}
	assert.Zero(t, counts["GET peerauthentications"], "the first pass reads the PeerAuthentication from the cache")
	assert.Zero(t, counts["GET authorizationpolicies"], "the first pass reads the AuthorizationPolicy from the cache")
	assert.Zero(t, counts["GET persistentvolumeclaims"], "the first pass reads the claim from the cache")

	// The fleet's gauges come from its status in the new manager's cache.
	assert.Eventually(t, func() bool {
		return registrySum(t, "celld_fleet_members", map[string]string{"namespace": "restart", "fleet": "r", "state": "ready"}) == 1
	}, 10*time.Second, 100*time.Millisecond, "celld_fleet_members{state=ready} of the restarted operator is 1")
}

// activeWorkers is controller-runtime's gauge of the fleet controller's
// reconciles in progress.
func activeWorkers(t *testing.T) float64 {
	t.Helper()
	return max(registrySum(t, "controller_runtime_active_workers", map[string]string{"controller": "celldfleet"}), 0)
}
