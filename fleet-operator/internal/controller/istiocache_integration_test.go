//go:build integration

package controller

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// requestCounter counts the requests a rest.Config's clients send, by verb
// and resource: "GET authorizationpolicies" is a read of one object,
// "LIST authorizationpolicies" and "WATCH authorizationpolicies" what an
// informer sends.
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
	// seen, if set, is called with each request's key as it is sent.
	seen func(key string)
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			c.count(req)
			return rt.RoundTrip(req)
		})
	})
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// count files a request under its resource: the path segment after
// "namespaces/<ns>/" (or after the group version for cluster-wide calls).
func (c *requestCounter) count(req *http.Request) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	resource, named := "", false
	for i := 0; i < len(parts); i++ {
		if parts[i] == "namespaces" && i+2 < len(parts) {
			resource, named = parts[i+2], i+3 < len(parts)
			break
		}
	}
	if resource == "" && len(parts) > 0 {
		resource = parts[len(parts)-1]
	}
	verb := req.Method
	if verb == http.MethodGet && !named {
		verb = "LIST"
		if req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1" {
			verb = "WATCH"
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[verb+" "+resource]++
	if c.seen != nil {
		c.seen(verb + " " + resource)
	}
}

func (c *requestCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *requestCounter) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.n
	c.n = map[string]int{}
	return old
}

// reconciles is controller-runtime's count of the fleet controller's
// reconciles so far (all results), from the process-wide registry.
func reconciles(t *testing.T) float64 {
	t.Helper()
	return max(registrySum(t, "controller_runtime_reconcile_total", map[string]string{"controller": "celldfleet"}), 0)
}

// registrySum sums the process-wide registry's counters and gauges named
// name whose labels include labels; NaN when there is none.
func registrySum(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	sum, found := 0.0, false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			if !containsLabels(have, labels) {
				continue
			}
			found = true
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if !found {
		return math.NaN()
	}
	return sum
}

func containsLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// startOperator runs the operator under a manager, as in a cluster, on cfg
// (the counting rest.Config), until the test ends or stop is called.
func startOperator(t *testing.T, env *testenv.Env, restCfg *rest.Config, cfg Config) (stop func()) {
	t.Helper()
	opts := ctrl.Options{
		Scheme:                 env.Client.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
	RestrictCache(cfg, &opts.Cache)
	var logs io.Writer = io.Discard
	if os.Getenv("FLEET_TEST_LOG") != "" { // the operator's log, to debug a failure
		logs = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logs), zap.Level(zapcore.Level(-5)), zap.UseDevMode(false), func(o *zap.Options) { o.TimeEncoder = zapcore.RFC3339NanoTimeEncoder }))
	mgr, err := ctrl.NewManager(restCfg, opts)
	require.NoError(t, err)
	require.NoError(t, SetupWithManager(mgr, cfg))
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

func deleteIstioCRDs(t *testing.T, c client.Client) {
	t.Helper()
	for _, name := range []string{"authorizationpolicies.security.istio.io", "peerauthentications.security.istio.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		require.NoError(t, client.IgnoreNotFound(c.Delete(context.Background(), crd)))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKeyFromObject(crd), crd))
		}, 30*time.Second, 200*time.Millisecond, "CRD %s deleted", name)
	}
}

// TestIstioPoliciesCached: every reconcile of a fleet where Istio's API is
// served reads the fleet's AuthorizationPolicy and PeerAuthentication. At a
// thousand fleets re-read every 10 s, two uncached GETs each are ~200
// requests a second at rest. They come from a cache restricted to the
// operator's own objects, so an unchanged meshed fleet costs none; a
// foreign policy with the fleet's name (not in that cache) is still found
// by the read that confirms a miss, reported, and never adopted; and a
// policy someone deletes comes back at once, not at the next periodic look.
func TestIstioPoliciesCached(t *testing.T) {
	ctx := context.Background()
	env := startEnvWithCRDClient(t)
	env.InstallCRDs(t, istioCRDFile(t))
	createNamespace(t, env.Client, "meshcache")
	cfg := newHarness(t, env, true).r.Config
	cfg.StateInterval = time.Hour // reconciles below come from events only

	f := fleet("meshcache", "m")
	f.Spec.Replicas = ptr.To[int32](1)
	f.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
	require.NoError(t, env.Client.Create(ctx, f))
	var n requestCounter
	startOperator(t, env, n.wrap(env.Config), cfg)

	get := func(o client.Object, name string) error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: "meshcache", Name: name}, o)
	}
	require.Eventually(t, func() bool {
		return get(&v1alpha1.CelldFleet{}, "m") == nil && get(policy(mesh.AuthorizationPolicyKind), "m-mesh") == nil
	},
		30*time.Second, 100*time.Millisecond, "the operator applies the fleet's objects")
	require.Eventually(t, func() bool { return playStatefulSetErr(env.Client, "meshcache", "m", "rev1") == nil }, 10*time.Second, 100*time.Millisecond)
	// A member whose /state answers healthy: the fleet is at rest, and its
	// next periodic look is an hour away.
	ip := fmt.Sprintf("127.253.%d.1", os.Getpid()%250)
	serveState(t, ip)
	runningMember(t, env.Client, "meshcache", "m", 0, true, "rev1", ip)
	require.Eventually(t, func() bool {
		return get(f, "m") == nil && f.Status.Mesh == "Meshed" && len(f.Status.Members) == 1 &&
			f.Status.Members[0].State != nil && f.Status.Members[0].State.Healthy
	}, 30*time.Second, 100*time.Millisecond, "the fleet is meshed and at rest")
	time.Sleep(time.Second) // the last events of getting there are handled

	// Reconciles of the unchanged fleet, each woken by an annotation on it.
	before := reconciles(t)
	n.reset()
	for i := range 10 {
		require.NoError(t, env.Client.Patch(ctx, f, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"test/poke":"`+string(rune('a'+i))+`"}}}`))))
		time.Sleep(200 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return reconciles(t)-before >= 10 }, 10*time.Second, 100*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	counts := n.reset()
	t.Logf("%v reconciles of an unchanged meshed fleet sent: %v", reconciles(t)-before, counts)
	assert.Zero(t, counts["GET authorizationpolicies"], "the fleet's AuthorizationPolicy is read from the cache")
	assert.Zero(t, counts["GET peerauthentications"], "the fleet's PeerAuthentication is read from the cache")
	for key, c := range counts {
		if !strings.HasPrefix(key, "GET ") && !strings.HasPrefix(key, "LIST ") && !strings.HasPrefix(key, "WATCH ") {
			assert.Zero(t, c, "no write at rest: %s", key)
		}
	}

	// Someone deletes the fleet's policy: it is back within seconds,
	// although the fleet's next periodic look is an hour away.
	ap := policy(mesh.AuthorizationPolicyKind)
	require.NoError(t, get(ap, "m-mesh"))
	require.NoError(t, env.Client.Delete(ctx, ap))
	require.Eventually(t, func() bool {
		back := policy(mesh.AuthorizationPolicyKind)
		return get(back, "m-mesh") == nil && back.GetUID() != ap.GetUID()
	}, 5*time.Second, 50*time.Millisecond, "a deleted policy is restored on its delete event")

	// A foreign AuthorizationPolicy with a new fleet's name: not in the
	// restricted cache, found by the confirming read, never adopted.
	foreign := policy(mesh.AuthorizationPolicyKind)
	foreign.SetNamespace("meshcache")
	foreign.SetName("theirs-mesh")
	foreign.SetLabels(map[string]string{"team": "theirs"})
	require.NoError(t, env.Client.Create(ctx, foreign))
	g := fleet("meshcache", "theirs")
	g.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
	require.NoError(t, env.Client.Create(ctx, g))
	require.Eventually(t, func() bool {
		if get(g, "theirs") != nil {
			return false
		}
		c := meta.FindStatusCondition(g.Status.Conditions, string(v1alpha1.ConditionInfrastructureBlocked))
		return c != nil && c.Reason == string(v1alpha1.ReasonOwnershipConflict) && strings.Contains(c.Message, "AuthorizationPolicy meshcache/theirs-mesh")
	}, 30*time.Second, 100*time.Millisecond, "the foreign policy is reported")
	require.NoError(t, get(foreign, "theirs-mesh"))
	assert.Empty(t, foreign.GetOwnerReferences(), "a foreign policy is never adopted")
	assert.Equal(t, map[string]string{"team": "theirs"}, foreign.GetLabels())
}

// playStatefulSetErr plays the StatefulSet controller once the
// StatefulSet exists.
func playStatefulSetErr(c client.Client, ns, name, revision string) error {
	sts := &appsv1.StatefulSet{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
		return err
	}
	sts.Status.ObservedGeneration = sts.Generation
	sts.Status.Replicas = *sts.Spec.Replicas
	sts.Status.CurrentRevision, sts.Status.UpdateRevision = revision, revision
	return c.Status().Update(context.Background(), sts)
}

// TestIstioCacheFollowsTheAPI: the cache of Istio's kinds exists only while
// they are served. Installed after the operator started: fleets get their
// policies and the reads come from the new cache. Removed under the running
// operator: no reconcile waits on a cache that can no longer sync or trusts
// the objects it held; a meshed fleet reports the missing API, a new fleet
// reports its state, and once the API is back the policies return.
func TestIstioCacheFollowsTheAPI(t *testing.T) {
	ctx := context.Background()
	env := startEnvWithCRDClient(t)
	istioCRDs := istioCRDFile(t)
	createNamespace(t, env.Client, "later")
	// Labelled for ambient capture (an enrollment in effect), so a fleet
	// in mode auto stands by with its policy there.
	ambientLabel(t, env.Client, "later", true)
	cfg := newHarness(t, env, true).r.Config
	cfg.StateInterval = 2 * time.Second
	var n requestCounter
	startOperator(t, env, n.wrap(env.Config), cfg)
	get := func(o client.Object, name string) error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: "later", Name: name}, o)
	}
	condition := func(name string, typ v1alpha1.ConditionType) *metav1.Condition {
		f := &v1alpha1.CelldFleet{}
		if get(f, name) != nil {
			return nil
		}
		return meta.FindStatusCondition(f.Status.Conditions, string(typ))
	}

	// Started without Istio: a meshed fleet is blocked on the missing API.
	m := fleet("later", "m")
	m.Spec.Mesh = &v1alpha1.Mesh{Istio: &v1alpha1.IstioMesh{}}
	require.NoError(t, env.Client.Create(ctx, m))
	require.Eventually(t, func() bool {
		c := condition("m", v1alpha1.ConditionInfrastructureBlocked)
		return c != nil && c.Reason == string(v1alpha1.ReasonIstioAPIUnavailable)
	}, 30*time.Second, 100*time.Millisecond, "blocked without Istio's API")

	// Istio is installed: the fleet gets its policy (the API is looked for
	// again within notServedFor), and then reads both kinds from the cache
	// (its PeerAuthentication, absent while no member is relaxed, included).
	env.InstallCRDs(t, istioCRDs)
	require.Eventually(t, func() bool {
		return get(policy(mesh.AuthorizationPolicyKind), "m-mesh") == nil
	}, 60*time.Second, 200*time.Millisecond, "the policy once Istio's API is served")
	require.Eventually(t, func() bool { return n.get("WATCH authorizationpolicies") > 0 && n.get("WATCH peerauthentications") > 0 },
		30*time.Second, 100*time.Millisecond, "the operator watches Istio's kinds once they are served")
	time.Sleep(time.Second)
	before := reconciles(t)
	n.reset()
	// Its members do not run (nothing runs Pods here), so it looks again
	// only every idleLooks state intervals: annotations wake it.
	for i := 0; i < 3; i++ {
		require.NoError(t, env.Client.Patch(ctx, m, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"test/poke":"%d"}}}`, i)))))
		time.Sleep(time.Second)
	}
	counts := n.reset()
	t.Logf("%v reconciles after Istio's install sent: %v", reconciles(t)-before, counts)
	require.GreaterOrEqual(t, reconciles(t)-before, 2.0)
	assert.Zero(t, counts["GET authorizationpolicies"]+counts["GET peerauthentications"], "policies read from the cache started after the install")

	// Istio is removed under the running operator.
	deleteIstioCRDs(t, env.Client)
	require.Eventually(t, func() bool {
		c := condition("m", v1alpha1.ConditionInfrastructureBlocked)
		return c != nil && c.Reason == string(v1alpha1.ReasonIstioAPIUnavailable)
	}, 30*time.Second, 100*time.Millisecond, "the meshed fleet reports the missing API again")
	plain := fleet("later", "plain")
	require.NoError(t, env.Client.Create(ctx, plain))
	require.Eventually(t, func() bool {
		c := condition("plain", v1alpha1.ConditionReady)
		b := condition("plain", v1alpha1.ConditionInfrastructureBlocked)
		return c != nil && b != nil && b.Status == metav1.ConditionFalse
	}, 30*time.Second, 100*time.Millisecond, "a fleet created after the removal reports its state, not blocked")
	// Nothing waits on a cache of the removed kinds: fleets keep being
	// reconciled at their interval (the blocked one every 2 s).
	before = reconciles(t)
	time.Sleep(5 * time.Second)
	assert.GreaterOrEqual(t, reconciles(t)-before, 2.0, "reconciles go on after the removal")

	// Istio is back: the policies return.
	env.InstallCRDs(t, istioCRDs)
	require.Eventually(t, func() bool {
		return get(policy(mesh.AuthorizationPolicyKind), "m-mesh") == nil && get(policy(mesh.AuthorizationPolicyKind), "plain-mesh") == nil
	}, 60*time.Second, 200*time.Millisecond, "the policies return with Istio's API")
	require.Eventually(t, func() bool {
		c := condition("m", v1alpha1.ConditionInfrastructureBlocked)
		return c != nil && c.Status == metav1.ConditionFalse
	}, 30*time.Second, 200*time.Millisecond, "the meshed fleet is no longer blocked")
}
