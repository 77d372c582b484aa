//go:build e2e

package explore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cnifake"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/sailfake"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

// smokeSeeds run in `make test`: short sequences, a few minutes in all.
// Longer and more runs: `make explore` (EXPLORE_COUNT, EXPLORE_ACTIONS,
// EXPLORE_SEED).
var smokeSeeds = []uint64{300}

const smokeActions = 5

// startRunner brings up a bed with both operators built from tree (the
// repository root, or a copy with a planted defect), sailfake and the
// played istio-cni.
func startRunner(t *testing.T, tree string) *Runner {
	t.Helper()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	ctx := context.Background()
	// EXPLORE_WORKDIR keeps the bed's files (the operators' logs among them)
	// after the test, for reading a failure.
	// With several beds, each gets a directory of its own under it.
	work := os.Getenv("EXPLORE_WORKDIR")
	if work == "" {
		work = t.TempDir()
	} else {
		work = filepath.Join(work, strings.ReplaceAll(t.Name(), "/", "_"))
		require.NoError(t, os.MkdirAll(work, 0o755))
	}
	// Beds play side by side: each line says whose it is.
	log := &linePrefixer{w: os.Stderr, prefix: t.Name() + ": "}
	bed, err := harness.StartBed(ctx, harness.BedOptions{
		Root: root, Source: tree, WorkDir: work, Nodes: 2, Operators: true, NetworkPolicyEnforced: true, FaultProxies: true,
		StandinStartupDelay: time.Second, Log: log,
	})
	require.NoError(t, err)
	t.Cleanup(bed.Stop)
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, fleetv1.AddToScheme(scheme))
	require.NoError(t, meshv1.AddToScheme(scheme))
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	k8s, err := client.New(bed.Cluster.REST, client.Options{Scheme: scheme})
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(bed.Cluster.REST)
	require.NoError(t, err)
	stopSail, err := sailfake.Serve(ctx, bed.Cluster.REST, k8s, root)
	require.NoError(t, err)
	t.Cleanup(stopSail)
	cniCtx, stopCNI := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); cnifake.Play(cniCtx, k8s) }()
	t.Cleanup(func() { stopCNI(); <-done })
	r := &Runner{Bed: bed, K8s: k8s, Dyn: dyn, Root: root, Log: log, Pause: 3 * time.Second, Settle: 2 * time.Minute,
		env: environment{accept: true, removed: map[string]bool{}}}
	license := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: harness.MeshNamespace, Name: licenseSecret}, license))
	r.env.license = license.Data["license"]
	gwCtx, stopGateway := context.WithCancel(ctx)
	gwDone := make(chan struct{})
	go func() { defer close(gwDone); r.playGateway(gwCtx) }()
	t.Cleanup(func() { stopGateway(); <-gwDone })
	return r
}

func runSequence(t *testing.T, r *Runner, seq []Action) Result {
	t.Helper()
	res, err := r.Run(context.Background(), seq)
	require.NoError(t, err)
	t.Logf("%d actions, %d observed states, %s", len(seq), res.States, res.Took.Round(time.Second))
	// Every action of a sequence changes something the recorder watches
	// (the populated world alone is one state): fewer states than that
	// means the recorder saw nothing and the judge judged nothing.
	require.Greater(t, res.States, len(seq), "the recorder observed fewer states than the sequence has actions")
	return res
}

// TestExplore plays the smoke seeds, every checked-in regression sequence,
// and, under `make explore`, EXPLORE_COUNT random sequences. A failing
// random sequence is shrunk and written to EXPLORE_OUT (default a temporary
// directory, named in the log) for checking in under testdata/regressions.
// The sequences are dealt round-robin to EXPLORE_BEDS beds (default 2) that
// play side by side: a bed spends most of a sequence waiting (pauses,
// settling), so two of them take about half the time on two cores.
func TestExplore(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	// EXPLORE_TREE builds the operators from another tree, e.g. an earlier
	// commit's (git archive), to shrink a sequence against the code it
	// failed on.
	tree := root
	if v := os.Getenv("EXPLORE_TREE"); v != "" {
		tree = v
	}

	// EXPLORE_REPLAY plays one sequence file EXPLORE_COUNT times (default
	// 1) on one bed: an intermittent finding is chased by repetition, not
	// by seeds.
	if f := os.Getenv("EXPLORE_REPLAY"); f != "" {
		seq, err := ReadSequence(f)
		require.NoError(t, err)
		r := startRunner(t, tree)
		for i := range max(1, envInt(t, "EXPLORE_COUNT", 1)) {
			t.Run(fmt.Sprintf("replay-%d", i+1), func(t *testing.T) {
				res := runSequence(t, r, seq.Actions)
				if len(res.Violations) > 0 {
					t.Errorf("%s\nviolates:\n%s%s", Describe(seq.Actions), strings.Join(res.Violations, "\n"), traceOf(res))
				}
			})
		}
		return
	}

	var plays []play
	// Regressions (sequences that found a defect) and scenarios (written
	// by hand to reach every action) run alike. EXPLORE_FILES=0 skips
	// them, for a long random run right after a make test that ran them;
	// another tree skips them too (the regressions are this tree's).
	if tree == root && os.Getenv("EXPLORE_FILES") != "0" {
		files, err := filepath.Glob(filepath.Join("testdata", "regressions", "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "no regression sequence under testdata/regressions")
		scenarios, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, scenarios, "no scenario under testdata/scenarios")
		for _, f := range append(files, scenarios...) {
			plays = append(plays, play{name: filepath.Base(filepath.Dir(f)) + "/" + strings.TrimSuffix(filepath.Base(f), ".json"), run: func(t *testing.T, r *Runner) {
				seq, err := ReadSequence(f)
				require.NoError(t, err)
				res := runSequence(t, r, seq.Actions)
				if len(res.Violations) > 0 {
					t.Errorf("sequence (found: %s)\n%s\nviolates:\n%s%s", seq.Found, Describe(seq.Actions), strings.Join(res.Violations, "\n"), traceOf(res))
				}
			}})
		}
	}

	seeds := smokeSeeds
	actions := smokeActions
	if n := envInt(t, "EXPLORE_COUNT", 0); n > 0 {
		first := uint64(envInt(t, "EXPLORE_SEED", int(time.Now().Unix()%100000)))
		seeds = nil
		for i := range n {
			seeds = append(seeds, first+uint64(i))
		}
		actions = envInt(t, "EXPLORE_ACTIONS", 8)
	}
	out := os.Getenv("EXPLORE_OUT")
	if out == "" {
		out = t.TempDir()
	}
	for _, seed := range seeds {
		plays = append(plays, play{name: fmt.Sprintf("seed-%d", seed), run: func(t *testing.T, r *Runner) {
			seq := Generate(seed, actions)
			res := runSequence(t, r, seq)
			if len(res.Violations) == 0 {
				return
			}
			found := res.Violations[0]
			t.Errorf("seed %d (EXPLORE_SEED=%d EXPLORE_COUNT=1 EXPLORE_ACTIONS=%d):\n%s\nviolates:\n%s%s", seed, seed, actions, Describe(seq), strings.Join(res.Violations, "\n"), traceOf(res))
			// Shrinking reruns the sequence once per removal: only under
			// make explore (EXPLORE_COUNT), never in make test.
			if os.Getenv("EXPLORE_COUNT") == "" || os.Getenv("EXPLORE_SHRINK") == "0" {
				return
			}
			min := Shrink(seq, func(try []Action) bool {
				res, err := r.Run(context.Background(), try)
				return err == nil && len(res.Violations) > 0
			})
			path := filepath.Join(out, fmt.Sprintf("seed-%d.json", seed))
			require.NoError(t, Sequence{Seed: seed, Actions: min, Found: found}.Write(path))
			t.Errorf("minimal sequence (%d actions), written to %s:\n%s", len(min), path, Describe(min))
		}})
	}

	beds := min(max(1, envInt(t, "EXPLORE_BEDS", 2)), len(plays))
	for b := range beds {
		t.Run(fmt.Sprintf("bed-%d", b+1), func(t *testing.T) {
			t.Parallel()
			r := startRunner(t, tree)
			for i := b; i < len(plays); i += beds {
				t.Run(plays[i].name, func(t *testing.T) { plays[i].run(t, r) })
			}
		})
	}
}

// linePrefixer writes prefix at the start of every line written through it.
type linePrefixer struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	// mid: the last write did not end a line.
	mid bool
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []byte
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if !l.mid {
			out = append(out, l.prefix...)
		}
		out = append(out, line...)
		l.mid = line[len(line)-1] != '\n'
	}
	if _, err := l.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// play is one sequence TestExplore deals to a bed.
type play struct {
	name string
	run  func(t *testing.T, r *Runner)
}

// TestPlantedDefect checks the explorer itself: operators built from a copy
// of the tree with a defect planted must fail the invariants. Its first
// row (one bed, one sequence, about three minutes) runs in `make test`;
// the others build and run a bed each (about five minutes) and run under
// `make explore-selftest` (EXPLORE_SELFTEST=1).
func TestPlantedDefect(t *testing.T) {
	// One fleet operator with four defects, one for each judge rule of
	// issue 43 that an older judge let pass, and one sequence that meets
	// them all: a NetworkPolicy leak while Istio's API is absent (the
	// Istio grace excused every forbidden row then), a deleted fleet
	// NetworkPolicy never put back (forbidden rows were judged only while
	// the policy existed), a roll that replaces the next member as soon as
	// the last one is gone, without waiting for its replacement to exist
	// or be Ready (a deleted Pod and its Pending replacement were not
	// counted down; kwok makes a Pod Ready at once, so a roll that only
	// skips the readiness wait is caught only when the operator is
	// quicker than kwok), and Ready never True (any documented reason
	// passed at rest).
	t.Run("judge", func(t *testing.T) {
		tree := plantedTreeFiles(t,
			plantIn{"fleet-operator/internal/controller/fleet_controller.go",
				"\tfor _, obj := range []client.Object{network.AppService(fleet), network.PeerService(fleet), np} {",
				`	if served, err := r.istioServed(); err == nil && !served {
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{}) // planted defect: open to all while Istio's API is absent
	}
	objs := []client.Object{network.AppService(fleet), network.PeerService(fleet)}
	if obs.sts == nil || r.Client.Get(ctx, client.ObjectKeyFromObject(np), &networkingv1.NetworkPolicy{}) == nil {
		objs = append(objs, np) // planted defect: a deleted NetworkPolicy is never put back
	}
	for _, obj := range objs {`},
			plantIn{"fleet-operator/internal/controller/fleet_controller.go",
				"\tr.deleted[key] = uid\n\tr.mu.Unlock()\n",
				`	r.deleted[key] = uid
	r.mu.Unlock()
	// planted defect: the roll does not wait for the replacement to be
	// Ready (nor to exist): once the member is gone, the next goes.
	for i := 0; i < 500; i++ {
		p := &corev1.Pod{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(pod), p); apierrors.IsNotFound(err) || (err == nil && p.UID != uid) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, next := range obs.pods {
		if next.Name != pod.Name && next.Labels[revisionLabel] != in.TargetRevision {
			_ = r.Client.Delete(ctx, &next)
			break
		}
	}
`},
			plantIn{"fleet-operator/internal/controller/status.go",
				"\tcase allAvailable(fleet, obs) && !obs.decision.Rolling() && !obs.stsSettling:",
				"\tcase false: // planted defect: Ready never turns True"},
		)
		r := startRunner(t, tree)
		seq := []Action{
			{Kind: CRDs, Arg: "istio-off"},
			{Kind: FleetCreate, Fleet: "a"},
			{Kind: CRDs, Arg: "istio-on"},
			{Kind: HandEdit, Fleet: "a"},
			{Kind: FleetImage, Fleet: "a"},
		}
		res := runSequence(t, r, seq)
		t.Logf("%s\nfound:\n%s%s", Describe(seq), strings.Join(res.Violations, "\n"), traceOf(res))
		for _, c := range []struct {
			rule  string
			found func(string) bool
		}{
			{"a leak while Istio's API is absent", func(v string) bool {
				return (strings.HasPrefix(v, "step 2, ") || strings.HasPrefix(v, "step 3, ")) && strings.Contains(v, "forbidden connection OPEN") &&
					!strings.Contains(v, ":15008")
			}},
			{"a fleet without its NetworkPolicy", func(v string) bool { return strings.HasPrefix(v, "at rest, fleet a has no NetworkPolicy ") }},
			{"members down by ordinal", func(v string) bool { return strings.Contains(v, "members of fleet a unavailable at once") }},
			{"stuck at rest", func(v string) bool {
				return strings.Contains(v, `fleet a is Ready=False with reason "MembersNotReady", which no action of the sequence explains`)
			}},
		} {
			require.True(t, slices.ContainsFunc(res.Violations, c.found), "the planted defect went unnoticed: %s", c.rule)
		}
	})
	if os.Getenv("EXPLORE_SELFTEST") == "" {
		t.Log("EXPLORE_SELFTEST unset: the other planted defects run with make explore-selftest")
		return
	}
	// API faults (faults.go): a fleet operator that takes a failed
	// request for a reason to tear down its NetworkPolicy, and does not
	// write the failure to status, must be reported by both rules: the
	// deletion while the fault holds, and a failing step status never
	// showed.
	t.Run("destructive-on-error", func(t *testing.T) {
		tree := plantedTreeFiles(t,
			plantIn{"fleet-operator/internal/controller/fleet_controller.go",
				"\tif obs.failed != nil {\n\t\tr.readMemberFacts(ctx, fleet, obs)\n\t}\n",
				`	if obs.failed != nil {
		// planted defect: a failed request tears the fleet's policy down, and status never says
		_ = r.Client.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: fleet.Name}})
		return r.outcome(ctx, req.NamespacedName, obs, err), nil
	}
`})
		r := startRunner(t, tree)
		seq := []Action{
			{Kind: FleetCreate, Fleet: "a"},
			{Kind: Fault, Arg: "fleet-statefulsets-timeout"},
			{Kind: FleetImage, Fleet: "a"},
		}
		res := runSequence(t, r, seq)
		t.Logf("%s\nfound:\n%s%s", Describe(seq), strings.Join(res.Violations, "\n"), traceOf(res))
		for _, c := range []struct {
			rule  string
			found func(string) bool
		}{
			{"nothing destructive while a request fails", func(v string) bool {
				return strings.Contains(v, "(env.fault fleet-statefulsets-timeout): fleet a's NetworkPolicy x1-app/a was deleted")
			}},
			{"a failed step appears in status", func(v string) bool {
				// Never, or only once the roll after the fault left a
				// member not Ready ("said so only 31s later", first run).
				return strings.HasPrefix(v, "env.fault fleet-statefulsets-timeout failed") &&
					(strings.Contains(v, "but no fleet of x1-app ever said so") || strings.Contains(v, "beyond 12s"))
			}},
		} {
			require.True(t, slices.ContainsFunc(res.Violations, c.found), "the planted defect went unnoticed: %s", c.rule)
		}
	})
	// Policy engines, tenants and admins (issue 43 section 2): one tree
	// with a defect for each of the judge's rules about them, and two
	// sequences on one bed that meet them. The fleet operator strips
	// another manager's configuration-snippet from its Ingress (nothing an
	// admin or a tenant set is deleted or overwritten: found by hand
	// before this row), deletes its NetworkPolicy when the API server
	// refuses its namespace labels (nothing destructive while a policy
	// refuses; its RBAC cannot delete a StatefulSet, which the first
	// version of this plant tried), says nothing of refused namespace
	// labels (at rest the refusing policy is named) and sends a refused
	// namespace write three times a pass (refused writes counted per
	// writer and object, seeds 7001/7038). The mesh operator trusts an
	// istiod in any namespace, a tenant's too (no tenant action changes
	// another namespace's access). The seed 7039 excuse (optOutRelaxing)
	// is checked by TestJudgeIstioOptOutWindow only: a mesh operator that
	// never released an Istio-opted-out namespace was planted here and
	// went unreported (docs/development.md).
	t.Run("adversaries", func(t *testing.T) {
		tree := plantedTreeFiles(t,
			plantIn{"fleet-operator/internal/controller/routing.go",
				"\tif err := r.Client.Get(ctx, client.ObjectKeyFromObject(route), live); err != nil {\n\t\treturn routingOutcome{}, err\n\t}\n",
				`	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(route), live); err != nil {
		return routingOutcome{}, err
	}
	if _, ok := live.GetAnnotations()["nginx.ingress.kubernetes.io/configuration-snippet"]; ok { // planted defect: another manager's snippet is stripped
		_ = r.Client.Patch(ctx, live.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(` + "`" + `{"metadata":{"annotations":{"nginx.ingress.kubernetes.io/configuration-snippet":null}}}` + "`" + `)))
	}
`},
			plantIn{"fleet-operator/internal/controller/fleet_controller.go",
				"\tif obs.failed != nil {\n\t\tr.readMemberFacts(ctx, fleet, obs)\n\t}\n",
				`	if obs.declared.refused != nil {
		// planted defect: a refused namespace declaration tears the
		// fleet's policy down (once: a loop would keep the bed from rest)
		plantedOnce.Do(func() {
			_ = r.Client.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.Namespace, Name: fleet.Name}})
		})
	}
	if obs.failed != nil {
		r.readMemberFacts(ctx, fleet, obs)
	}
`},
			plantIn{"fleet-operator/internal/controller/fleet_controller.go",
				"\n// cachedKinds are the group-kinds of the watched objects.\n",
				"\nvar plantedOnce sync.Once\n\n// cachedKinds are the group-kinds of the watched objects.\n"},
			plantIn{"fleet-operator/internal/controller/status.go",
				"\tcase d.refused != nil:\n",
				"\tcase d.refused != nil && false: // planted defect: a refused declaration is not reported\n"},
			plantIn{"fleet-operator/internal/controller/namespace.go",
				"\t_, err = contract.ApplyLabels(ctx, r.Client, r.freshReader(), contract.WorkloadOperator, declarationManager(fleet), view.ns.DeepCopy(), want)\n",
				`	for range 3 { // planted defect: a refused write sent again at once, three times a pass
		if _, err = contract.ApplyLabels(ctx, r.Client, r.freshReader(), contract.WorkloadOperator, declarationManager(fleet), view.ns.DeepCopy(), want); !refused(err) {
			break
		}
	}
`},
			plantIn{"mesh-operator/internal/detect/detect.go",
				"\t\tif _, ok := ns[d.Namespace]; ok {\n",
				"\t\tif _, ok := ns[d.Namespace]; ok || true { // planted defect: an istiod anywhere is trusted, a tenant's too\n"},
		)
		r := startRunner(t, tree)
		for _, c := range []struct {
			seq   []Action
			rules map[string]func(string) bool
		}{
			{[]Action{
				{Kind: PolicyNSLabels, Arg: "on"},
				{Kind: FleetCreate, Fleet: "a"},
				{Kind: FleetRouting, Fleet: "a", Arg: "on"},
				{Kind: TenantSnippet, Fleet: "a", Arg: "on"},
			}, map[string]func(string) bool{
				"nothing an admin or a tenant set is deleted": func(v string) bool {
					return strings.Contains(v, "configuration-snippet") && strings.Contains(v, "ingresses x1-app/a-routing was deleted")
				},
				"nothing destructive while a policy refuses": func(v string) bool {
					return strings.Contains(v, "while "+nslabelsHold+": fleet a's NetworkPolicy x1-app/a was deleted")
				},
				"at rest the refusing policy is named": func(v string) bool {
					return strings.HasPrefix(v, "at rest, ") && strings.Contains(v, "for fleet a, but its status does not say so (want NamespaceDeclared=False/NamespaceLabelsRefused")
				},
				"refused writes per writer and object": func(v string) bool {
					return strings.Contains(v, `the fleet-operator (field manager "fleet-operator/fleet/x1-app/a") had patch namespaces /x1-app refused`)
				},
			}},
			{[]Action{
				{Kind: TenantIstiod, Arg: "on"},
				{Kind: MeshCreate, Arg: "sidecar"},
				{Kind: FleetCreate, Fleet: "a"},
				{Kind: MeshEnroll, Arg: "app"},
			}, map[string]func(string) bool{
				"no tenant action changes another namespace's access": func(v string) bool {
					return strings.Contains(v, "the tenant's namespace ") && strings.Contains(v, " is taken as the control plane")
				},
			}},
		} {
			res := runSequence(t, r, c.seq)
			t.Logf("%s\nfound:\n%s%s", Describe(c.seq), strings.Join(res.Violations, "\n"), traceOf(res))
			for rule, found := range c.rules {
				assert.True(t, slices.ContainsFunc(res.Violations, found), "the planted defect went unnoticed: %s", rule)
			}
		}
	})
	// The fleet operator leaves the routing NetworkPolicy behind when
	// routing is removed; shrinking must keep only the actions that matter.
	t.Run("routing-policy-left-behind", func(t *testing.T) {
		tree := plantedTree(t, "fleet-operator/internal/controller/routing.go",
			"waiting, err := r.removeOwned(ctx, fleet, networkPolicyGVK, names.Routing(fleet.Name))",
			`waiting, err := "", error(nil) // planted defect: the routing policy is left behind`)
		r := startRunner(t, tree)
		noisy := []Action{
			{Kind: FleetCreate, Fleet: "a"},
			{Kind: FleetRouting, Fleet: "a", Arg: "on"},
			{Kind: FleetScale, Fleet: "a", Arg: "1"},
			{Kind: FleetRouting, Fleet: "a", Arg: "off"},
		}
		res := runSequence(t, r, noisy)
		require.NotEmpty(t, res.Violations, "the planted defect went unnoticed")
		t.Logf("found:\n%s", strings.Join(res.Violations, "\n"))
		min := Shrink(noisy, func(try []Action) bool {
			res, err := r.Run(context.Background(), try)
			return err == nil && len(res.Violations) > 0
		})
		t.Logf("minimal sequence:\n%s", Describe(min))
		require.Equal(t, []Action{noisy[0], noisy[1], noisy[3]}, min, "shrinking keeps create, routing on, routing off")
	})
	// The mesh operator as it was before issue 40: a license Secret it
	// cannot read counts as a missing one, and a missing one has no grace,
	// so every enrolled namespace is torn down. The scenario that denies the
	// read must report a release while the license could not be read; a
	// Secret deleted and restored around a reconcile, one while it was
	// deleted.
	t.Run("license-unknown-releases", func(t *testing.T) {
		tree := plantedTree(t, "mesh-operator/internal/controller/servicemesh_controller.go",
			`return licenseCheck{unreadable: fmt.Errorf("cannot read license Secret %s: %w", ref, err)}`,
			`return licenseCheck{refusal: ref.NotFound()} // planted defect: a failed read is a missing license`,
			`return licenseCheck{refusal: ref.NotFound(), missingUntil: r.licenseMissingSince(now).Add(licenseMissingGrace)}`,
			`return licenseCheck{refusal: ref.NotFound()} // planted defect: a missing license has no grace`)
		r := startRunner(t, tree)
		scenario, err := ReadSequence(filepath.Join("testdata", "scenarios", "license-unreadable-and-renewed.json"))
		require.NoError(t, err)
		deleted := append(slices.Clone(scenario.Actions[:5]),
			Action{Kind: License, Arg: "delete"}, Action{Kind: MeshIsolation, Arg: "namespace"}, Action{Kind: License, Arg: "restore"})
		for _, c := range []struct {
			seq []Action
			why string
		}{{scenario.Actions, licenseUnreadable}, {deleted, licenseDeleted}} {
			res := runSequence(t, r, c.seq)
			t.Logf("%s\nfound:\n%s%s", Describe(c.seq), strings.Join(res.Violations, "\n"), traceOf(res))
			require.True(t, slices.ContainsFunc(res.Violations, func(v string) bool { return strings.Contains(v, "while "+c.why+": ") }),
				"the planted defect went unnoticed %s", c.why)
		}
	})
}

// plantedTree is a copy of the repository (without bin/ and .git) in which,
// in the file at rel, each old line of oldPlanted is replaced by the
// planted one after it.
func plantedTree(t *testing.T, rel string, oldPlanted ...string) string {
	t.Helper()
	var plants []plantIn
	for i := 0; i+1 < len(oldPlanted); i += 2 {
		plants = append(plants, plantIn{rel, oldPlanted[i], oldPlanted[i+1]})
	}
	return plantedTreeFiles(t, plants...)
}

// plantIn replaces, in the file at rel, the text old by planted.
type plantIn struct{ rel, old, planted string }

// plantedTreeFiles is a copy of the repository (without bin/ and .git) with
// each plant made.
func plantedTreeFiles(t *testing.T, plants ...plantIn) string {
	t.Helper()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	tree := filepath.Join(t.TempDir(), "planted")
	require.NoError(t, os.MkdirAll(tree, 0o755))
	copyTree := exec.Command("sh", "-c", fmt.Sprintf("tar -C %q --exclude=./bin --exclude=./.git --exclude='.testbed*' -cf - . | tar -C %q -xf -", root, tree))
	out, err := copyTree.CombinedOutput()
	require.NoError(t, err, string(out))
	for _, p := range plants {
		plant(t, filepath.Join(tree, p.rel), p.old, p.planted)
	}
	return tree
}

func plant(t *testing.T, path, old, planted string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), old, "the code the defect is planted in has moved; update the planted line")
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), old, planted, 1)), 0o644))
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

// traceOf prints the states that led to the first violation.
func traceOf(res Result) string {
	if len(res.Trace) == 0 {
		return ""
	}
	return "\nthe states up to the first violation (P proxy, C captured, T terminating, ~ not running yet):\n  " + strings.Join(res.Trace, "\n  ")
}
