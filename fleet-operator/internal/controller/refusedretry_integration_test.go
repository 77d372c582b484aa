//go:build integration

package controller

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestRefusedNamespaceLabelsRetriedAtThePoll (issue 43, random seeds 7001
// and 7038): a namespace label write a ValidatingAdmissionPolicy refuses is
// asked again at the fleet's poll (--state-interval), not at every look.
// A fleet looks much more often than its poll while a member starts (every
// 250 ms), during a roll (every second) or while a member is unhealthy
// (every 5 s), and every event wakes it; each of those passes sent the
// refused write again (the explorer counted 14 refused namespace writes in
// 12 s at rest under load). The refusal is reported all along; the write is
// sent again once the poll has passed, or at once when the namespace or the
// labels the fleet asks for change.
func TestRefusedNamespaceLabelsRetriedAtThePoll(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "pollers")
	msg, _ := denyOperatorWrites(t, env, "pollers", "no-namespace-labels-poll", "", "namespaces", namespaceLabelsChange, func(c client.Client) error {
		return c.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pollers"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`)), client.DryRunAll)
	})
	f := fleet("pollers", "a")
	f.Spec.Replicas = ptr.To[int32](1)
	require.NoError(t, env.Client.Create(ctx, f))

	h := newHarness(t, env, true)
	// The operator's identity, and every write of the namespace counted
	// where it leaves for the API server.
	var nsWrites atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fleetOperatorUser, Groups: []string{"system:masters"}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet && req.URL.Path == "/api/v1/namespaces/pollers" {
				nsWrites.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Client.Scheme()})
	require.NoError(t, err)
	h.r.Client = h.writes.client(c)
	h.r.Applier = &apply.Applier{Client: h.r.Client, FieldManager: names.Operator, HashAnnotation: HashAnnotation}
	h.r.Config.StateInterval = 10 * time.Second
	now := time.Now()
	h.r.Now = func() time.Time { return now }

	refusedSaid := func() {
		t.Helper()
		c := condition(t, h, f, v1alpha1.ConditionNamespaceDeclared)
		require.NotNil(t, c, "NamespaceDeclared is reported")
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, string(v1alpha1.ReasonNamespaceLabelsRefused), c.Reason)
		assert.Contains(t, c.Message, msg, "the policy's answer is quoted")
	}

	// Six looks within a second, as a starting member's polls are.
	for range 6 {
		h.reconcileOnce(f)
		now = now.Add(200 * time.Millisecond)
	}
	refusedSaid()
	assert.Equal(t, int64(1), nsWrites.Load(), "a refused namespace write is sent once per poll, not at every look")

	// The poll has passed: asked again.
	now = now.Add(h.r.Config.StateInterval)
	h.reconcileOnce(f)
	refusedSaid()
	assert.Equal(t, int64(2), nsWrites.Load(), "asked again once the poll has passed")

	// The namespace changed (an admin's label): asked at once, the
	// answer may differ.
	require.NoError(t, env.Client.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pollers"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"shop"}}}`))))
	require.Eventually(t, func() bool {
		h.reconcileOnce(f)
		return nsWrites.Load() == 3
	}, 5*time.Second, 100*time.Millisecond, "asked again at once after the namespace changed (writes: %d)", nsWrites.Load())
	refusedSaid()
}
