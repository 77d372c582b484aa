package explore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
	"github.com/ericdev/fleetmesh/e2e/injector"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// Runner plays sequences on a running bed (both operators, sailfake).
type Runner struct {
	Bed  *harness.Bed
	K8s  client.Client
	Dyn  dynamic.Interface
	Root string
	Log  io.Writer
	// Pause is how long the world runs after each action before the next.
	Pause time.Duration
	// Settle bounds the wait for quiescence after the last action.
	Settle time.Duration

	inj *injector.Injector
	n   int
	env environment
	adv adversaries
}

// Result is what one sequence showed.
type Result struct {
	Violations []string
	// Trace: the states replayed up to the first violation, the last
	// traceLength of them (snapshot.describe), so that an intermittent
	// finding shows how it came about.
	Trace  []string
	States int
	Took   time.Duration
}

const traceLength = 40

// operatorWrites are the resources whose writes count at rest (everything
// either operator writes; Pods are left out: kwok and the played istio-cni
// write them).
var operatorWrites = []string{
	"celldfleets", "servicemeshes", "statefulsets", "services", "networkpolicies", "poddisruptionbudgets",
	"serviceaccounts", "persistentvolumeclaims", "namespaces", "peerauthentications", "authorizationpolicies",
	"ingresses", "httproutes", "istios", "istiocnis", "ztunnels", "configmaps",
}

// Run plays seq in fresh namespaces and judges everything it observed.
func (r *Runner) Run(ctx context.Context, seq []Action) (Result, error) {
	start := time.Now()
	r.n++
	w := world{
		app: fmt.Sprintf("x%d-app", r.n), edge: fmt.Sprintf("x%d-edge", r.n), other: fmt.Sprintf("x%d-other", r.n),
		operator: caller{name: "fleet-operator", namespace: harness.FleetNamespace, serviceAccount: "fleet-operator", meshed: true,
			labels: map[string]string{labels.Name: "fleet-operator", labels.Instance: "fleet-operator"}},
	}
	if err := r.reset(ctx); err != nil {
		return Result{}, fmt.Errorf("reset before the sequence: %w", err)
	}
	r.env.takeHolds() // the reset's own
	r.env.takeOptOuts()
	r.env.takeFaults()
	r.env.takeHandEdits()
	if err := r.populate(ctx, w); err != nil {
		return Result{}, err
	}
	rec, err := startRecorder(ctx, r.Dyn)
	if err != nil {
		return Result{}, err
	}
	adminLabel := ""
	for i, a := range seq {
		rec.setStep(i + 1)
		fmt.Fprintf(r.Log, "explore: %s: %d. %s\n", w.app, i+1, a)
		if a.Kind == NamespaceLabel {
			adminLabel = a.Arg
		}
		if err := r.do(ctx, w, a); err != nil {
			rec.stop()
			return Result{}, fmt.Errorf("action %d (%s): %w", i+1, a, err)
		}
		time.Sleep(r.Pause)
	}
	rec.setStep(len(seq) + 1)
	var problems []string
	settled := r.settle(ctx, rec)
	if !settled {
		why := ""
		for _, p := range []*harness.Process{r.Bed.Fleet, r.Bed.Mesh} {
			if !p.Leading() {
				why += fmt.Sprintf(" (%s never acquired its leader lease)", p.Name)
			}
		}
		problems = append(problems, fmt.Sprintf("no quiescence within %s after the last action%s", r.Settle, why))
	}
	problems = append(problems, r.stuck(ctx, w, seq)...)
	if settled {
		problems = append(problems, r.quiet(ctx, rec)...)
	}
	problems = append(problems, r.leftovers(ctx, w, seq, adminLabel)...)
	rec.stop()
	// The sequence's namespaces go (fleets with them): later sequences must
	// not meet its fleets, which would join their meshes.
	for _, ns := range []string{w.app, w.edge, w.other} {
		_ = r.K8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	j := newJudgement(w)
	j.holds = r.env.takeHolds()
	j.optOuts = r.env.takeOptOuts()
	r.endFaults() // normally over by now: settle waits for them
	played := r.env.takeFaults()
	logFaults(r.Log, played)
	for _, f := range played {
		j.faults = append(j.faults, faultWatch{faultRecord: f})
	}
	j.handEdits, j.documented = r.env.takeHandEdits(), documentedReasons(r.Root)
	j.adv = &advJudge{advRecord: r.adv.take()}
	var recent, trace []string
	states := rec.replay(func(s *snapshot) {
		clean := len(j.violations) == 0
		j.check(s, s.step)
		recent = append(recent, s.describe(w.app))
		if len(recent) > traceLength {
			recent = recent[1:]
		}
		if clean && len(j.violations) > 0 {
			trace = slices.Clone(recent)
		}
	})
	if j.last != nil {
		j.atRest = true
		j.check(j.last, len(seq)+1)
	}
	problems = append(append(append(append(append(append(j.violations, j.faultStatusVerdicts()...), j.missing()...), j.strictAtRest(j.last)...), j.honestAtRest(j.last)...), j.membersAtRest(j.last)...), problems...)
	problems = append(problems, j.policiesAtRest(j.last)...)
	return Result{Violations: problems, Trace: trace, States: states, Took: time.Since(start)}, nil
}

// reset removes what an earlier sequence left cluster-wide: the
// ServiceMesh, the injector, a dead operator, a changed environment.
func (r *Runner) reset(ctx context.Context) error {
	if r.inj != nil {
		r.inj.Stop(ctx)
		r.inj = nil
	}
	if err := r.restoreEnvironment(ctx); err != nil {
		return err
	}
	if err := r.removePolicies(ctx); err != nil {
		return err
	}
	for _, p := range []*harness.Process{r.Bed.Fleet, r.Bed.Mesh} {
		if !p.Running() {
			if err := p.Start(); err != nil {
				return err
			}
		}
	}
	if err := waitUntil(ctx, 3*time.Minute, func() (bool, string) {
		list := &corev1.NamespaceList{}
		if err := r.K8s.List(ctx, list); err != nil {
			return false, err.Error()
		}
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, "x") && strings.Contains(ns.Name, "-") && ns.DeletionTimestamp != nil {
				return false, "namespace " + ns.Name + " still terminating"
			}
		}
		return true, ""
	}); err != nil {
		return err
	}
	sm := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}
	if err := r.K8s.Delete(ctx, sm); client.IgnoreNotFound(err) != nil {
		return err
	}
	return waitUntil(ctx, 3*time.Minute, func() (bool, string) {
		err := r.K8s.Get(ctx, client.ObjectKeyFromObject(sm), sm)
		return apierrors.IsNotFound(err), fmt.Sprintf("ServiceMesh still there: %+v", sm.Status.Conditions)
	})
}

// populate creates the sequence's namespaces and the callers of the access
// table as real Pods.
func (r *Runner) populate(ctx context.Context, w world) error {
	lookalike := map[string]string{"app": edgeApp, labels.ClientOf: "a", labels.Name: "fleet-operator"}
	pods := []*corev1.Pod{
		pod(w.app, clientPod("a"), map[string]string{"app": "web", labels.ClientOf: "a"}),
		pod(w.app, clientPod("b"), map[string]string{"app": "web", labels.ClientOf: "b"}),
		pod(w.app, bystanderPod, map[string]string{"app": "batch"}),
		pod(w.edge, edgePod, map[string]string{"app": edgeApp}),
		pod(w.other, foreignPod, lookalike),
	}
	for _, ns := range []string{w.app, w.edge, w.other} {
		if err := r.K8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	for _, p := range pods {
		if err := r.K8s.Create(ctx, p); err != nil {
			return err
		}
	}
	if err := r.createGateway(ctx, w); err != nil {
		return err
	}
	if err := r.grantTenant(ctx, w); err != nil {
		return err
	}
	return waitUntil(ctx, time.Minute, func() (bool, string) {
		for _, p := range pods {
			got := &corev1.Pod{}
			if err := r.K8s.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil || got.Status.PodIP == "" {
				return false, "waiting for Pod " + p.Name
			}
		}
		return true, ""
	})
}

func pod(ns, name string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/" + name + ":1"}}},
	}
}

// do carries out one action. An action on something that does not exist
// (a fleet not created yet, no ServiceMesh) does nothing, so every
// sequence can be played and shrunk.
func (r *Runner) do(ctx context.Context, w world, a Action) error {
	fleetKey := client.ObjectKey{Namespace: w.app, Name: a.Fleet}
	f := &fleetv1.CelldFleet{}
	fleetExists := false
	if a.Fleet != "" {
		err := r.K8s.Get(ctx, fleetKey, f)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		fleetExists = err == nil && f.DeletionTimestamp == nil
	}
	patchFleet := func(patch string) error {
		if !fleetExists {
			return nil
		}
		return r.K8s.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	sm := &meshv1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"}}
	patchMesh := func(patch string) error {
		err := r.K8s.Patch(ctx, sm, client.RawPatch(types.MergePatchType, []byte(patch)))
		return client.IgnoreNotFound(err)
	}
	onOff := func(on, off string) string {
		if a.Arg == "on" {
			return on
		}
		return off
	}
	switch a.Kind {
	case FleetCreate:
		if fleetExists {
			return nil
		}
		nf := &fleetv1.CelldFleet{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.app, Name: a.Fleet},
			Spec:       fleetv1.CelldFleetSpec{Replicas: ptrTo[int32](2), Image: "registry.example/celld:1.0.0"},
		}
		if a.Arg == "persistent" {
			nf.Spec.Storage = &fleetv1.Storage{Size: resource.MustParse("1Gi")}
		}
		err := r.K8s.Create(ctx, nf)
		if apierrors.IsAlreadyExists(err) {
			return nil // still being deleted
		}
		return err
	case FleetScale:
		return patchFleet(`{"spec":{"replicas":` + a.Arg + `}}`)
	case FleetImage:
		next := "registry.example/celld:1.0." + fmt.Sprint(time.Now().UnixNano()%1000)
		return patchFleet(`{"spec":{"image":"` + next + `"}}`)
	case FleetPause:
		return patchFleet(`{"spec":{"maintenance":{"paused":` + onOff("true", "false") + `}}}`)
	case FleetIstio:
		istio := map[string]string{"on": `{"applicationAccess":"AllowAll"}`, "policies": `{"applicationAccess":"Policies"}`, "off": "null"}[a.Arg]
		return patchFleet(`{"spec":{"mesh":{"istio":` + istio + `}}}`)
	case FleetMode:
		return patchFleet(`{"spec":{"mesh":{"mode":"` + a.Arg + `"}}}`)
	case FleetRouting:
		// A switch between Ingress and Gateway names the one and clears the
		// other (merge patch).
		through := `"ingress":{"className":"nginx"},"gateway":null`
		if a.Arg == "gateway" {
			through = fmt.Sprintf(`"gateway":{"name":"%s","namespace":"%s"},"ingress":null`, gatewayName, w.edge)
		}
		routing := fmt.Sprintf(`{"hostnames":["%s.example.com"],%s,"source":{"namespace":"%s","podLabels":{"app":"%s"}}}`, a.Fleet, through, w.edge, edgeApp)
		if a.Arg == "off" {
			routing = "null"
		}
		return patchFleet(`{"spec":{"routing":` + routing + `}}`)
	case FleetControlNS:
		return patchFleet(`{"spec":{"mesh":{"istio":{"controlPlaneNamespace":"` + a.Arg + `"}}}}`)
	case FleetDelete:
		if !fleetExists {
			return nil
		}
		return client.IgnoreNotFound(r.K8s.Delete(ctx, f))
	case MeshCreate:
		sm.Spec = meshv1.ServiceMeshSpec{Mode: meshv1.ModeManaged, Provider: meshv1.ProviderAuto, DataPlane: meshv1.DataPlane(a.Arg),
			Isolation: meshv1.IsolationNamespace, MTLS: meshv1.MTLS{Mode: meshv1.MTLSStrict}}
		err := r.K8s.Create(ctx, sm)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	case MeshDelete:
		return client.IgnoreNotFound(r.K8s.Delete(ctx, sm))
	case MeshMTLS:
		return patchMesh(`{"spec":{"mtls":{"mode":"` + a.Arg + `"}}}`)
	case MeshDataPlane:
		return patchMesh(`{"spec":{"dataPlane":"` + a.Arg + `"}}`)
	case MeshEnroll:
		names := map[string]string{"app": `["` + w.app + `"]`, "edge": `["` + w.edge + `"]`, "none": "null"}[a.Arg]
		return patchMesh(`{"spec":{"enrollNamespaces":` + names + `}}`)
	case ClientLabel:
		value := "null"
		if a.Arg == "label" {
			value = `"` + a.Fleet + `"`
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.app, Name: clientPod(a.Fleet)}}
		return client.IgnoreNotFound(r.K8s.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+labels.ClientOf+`":`+value+`}}}`))))
	case MeshIsolation:
		return patchMesh(`{"spec":{"isolation":"` + a.Arg + `"}}`)
	case MeshMaintenance:
		until := map[string]time.Duration{"short": shortLived, "long": time.Hour}[a.Arg]
		value := "null"
		if a.Arg == "short" {
			r.env.expiresIn(until)
		}
		if until > 0 {
			value = `"` + time.Now().Add(until).UTC().Format(time.RFC3339) + `"`
		}
		return patchMesh(`{"spec":{"mtls":{"maintenanceUntil":` + value + `}}}`)
	case Gateway:
		r.env.mu.Lock()
		r.env.accept = a.Arg == "accept"
		r.env.mu.Unlock()
		return nil
	case License:
		return r.setLicense(ctx, a.Arg)
	case LicenseRead:
		return r.setLicenseRead(ctx, a.Arg == "allow")
	case CRDs:
		group, state, _ := strings.Cut(a.Arg, "-")
		r.env.mu.Lock()
		gone := r.env.removed[group]
		r.env.mu.Unlock()
		switch {
		case state == "off" && !gone:
			return r.removeCRDs(ctx, group)
		case state == "on" && gone:
			return r.restoreCRDs(ctx, w, group)
		}
		return nil
	case NamespaceLabel:
		value := `"` + a.Arg + `"`
		if a.Arg == "none" {
			value = "null"
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.app}}
		return r.K8s.Patch(ctx, ns, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+labels.Mesh+`":`+value+`}}}`)))
	case OperatorRestart:
		p := r.Bed.Fleet
		if a.Arg == "mesh" {
			p = r.Bed.Mesh
		}
		if err := p.Kill(); err != nil {
			return err
		}
		return p.Start()
	case Injector:
		if a.Arg == "on" && r.inj == nil {
			inj, err := injector.Start(ctx, r.Bed.Cluster.REST)
			r.inj = inj
			return err
		}
		if a.Arg == "off" && r.inj != nil {
			r.inj.Stop(ctx)
			r.inj = nil
		}
		return nil
	case TenantRelease:
		return r.tenantRelease(ctx, w, a.Arg == "forge")
	case TenantIstiod:
		return r.tenantIstiodOn(ctx, w, a.Arg == "on")
	case TenantPeerAuth:
		return r.tenantPeerAuthMode(ctx, w, map[string]string{"permissive": "PERMISSIVE", "disable": "DISABLE"}[a.Arg])
	case AdminOptOut:
		return r.adminOptOut(ctx, w, a.Arg)
	case Fault:
		return r.setFault(a.Arg)
	case APIServer:
		return r.restartAPIServer(ctx)
	case PolicyNSLabels, PolicySTS, PolicyPSS, TenantNetpol, TenantSnippet, AdminServiceAccount:
		return r.playAdversary(ctx, w, a, fleetExists)
	case HandEdit:
		r.env.noteHandEdit()
		np := &unstructured.Unstructured{}
		np.SetAPIVersion("networking.k8s.io/v1")
		np.SetKind("NetworkPolicy")
		np.SetNamespace(w.app)
		np.SetName(a.Fleet)
		return client.IgnoreNotFound(r.K8s.Delete(ctx, np))
	}
	return fmt.Errorf("unknown action %q", a.Kind)
}

// settle waits until the watched world has been still for a few seconds.
func (r *Runner) settle(ctx context.Context, rec *recorder) bool {
	deadline := time.Now().Add(r.Settle)
	last, stillSince := -1, time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		rec.mu.Lock()
		n := len(rec.events)
		rec.mu.Unlock()
		// An operator restarted by the sequence reconciles nothing until
		// it holds its lease: silence before that is not rest.
		// Nor is it before what the sequence set to expire has expired.
		if !r.Bed.Fleet.Leading() || !r.Bed.Mesh.Leading() || time.Now().Before(r.env.lastExpiry().Add(time.Second)) {
			last = -1
		} else if n != last {
			last, stillSince = n, time.Now()
		} else if time.Since(stillSince) >= 8*time.Second {
			return true
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// stuck: at rest, every fleet is Ready or says why with a reason that
// docs/troubleshooting.md explains and the sequence accounts for
// (stuckAtRest); the ServiceMesh likewise.
func (r *Runner) stuck(ctx context.Context, w world, seq []Action) []string {
	doc, err := os.ReadFile(filepath.Join(r.Root, "docs", "troubleshooting.md"))
	if err != nil {
		return []string{err.Error()}
	}
	documented := func(reason string) bool { return strings.Contains(string(doc), "`"+reason+"`") }
	list := &fleetv1.CelldFleetList{}
	if err := r.K8s.List(ctx, list, client.InNamespace(w.app)); err != nil {
		return []string{err.Error()}
	}
	var mesh *meshv1.ServiceMesh
	sm := &meshv1.ServiceMesh{}
	if err := r.K8s.Get(ctx, client.ObjectKey{Name: "cluster"}, sm); err == nil {
		mesh = sm
	} else if !apierrors.IsNotFound(err) {
		return []string{err.Error()}
	}
	return stuckAtRest(list.Items, mesh, seq, documented)
}

// quiet: at rest, neither operator writes (12 s, the API server's counts);
// what changed meanwhile among the watched objects is named, so a label or
// policy written back and forth shows who flaps.
func (r *Runner) quiet(ctx context.Context, rec *recorder) []string {
	before, err := cluster.APIServerWrites(ctx, r.Bed.Cluster.REST, operatorWrites)
	if err != nil {
		return []string{err.Error()}
	}
	refusedBefore, err := cluster.APIServerRefusedWrites(ctx, r.Bed.Cluster.REST, operatorWrites)
	if err != nil {
		return []string{err.Error()}
	}
	rec.mu.Lock()
	seen := len(rec.events)
	rec.mu.Unlock()
	start := time.Now()
	time.Sleep(12 * time.Second)
	writes := map[string][]harness.WriteRecord{}
	for name, p := range r.Bed.Proxies {
		writes[name] = p.Writes(start)
	}
	after, err := cluster.APIServerWrites(ctx, r.Bed.Cluster.REST, operatorWrites)
	if err != nil {
		return []string{err.Error()}
	}
	refusedAfter, err := cluster.APIServerRefusedWrites(ctx, r.Bed.Cluster.REST, operatorWrites)
	if err != nil {
		return []string{err.Error()}
	}
	if n := refusedTally(writes); n != "" {
		fmt.Fprintf(r.Log, "explore: at rest, refused writes in 12 s: %s\n", n)
	}
	out := append(writesAtRest(before, after, refusedBefore, refusedAfter), refusedRetries(writes)...)
	if len(out) == 0 {
		return nil
	}
	sort.Strings(out)
	var objs []string
	rec.mu.Lock()
	for i, e := range rec.events[seen:] {
		objs = append(objs, fmt.Sprintf("%s %s/%s %s", e.gvr.Resource, e.obj.GetNamespace(), e.obj.GetName(),
			changeOf(rec.previous(seen+i), e)))
	}
	rec.mu.Unlock()
	return []string{"at rest, writes within 12 s: " + strings.Join(out, ", ") + "; watched objects changed, in order: " + strings.Join(objs, "; ")}
}

// changeOf names what an event changed in an object's labels, annotations,
// spec and data (status and metadata bookkeeping left out), so a value
// written back and forth shows its two values.
func changeOf(prev *unstructured.Unstructured, e event) string {
	if e.typ == watch.Deleted {
		return "deleted"
	}
	if prev == nil {
		return "created"
	}
	before, after := map[string]string{}, map[string]string{}
	for _, f := range [][]string{{"metadata", "labels"}, {"metadata", "annotations"}, {"spec"}, {"data"}} {
		flatten(strings.Join(f, "."), fieldOf(prev, f), before)
		flatten(strings.Join(f, "."), fieldOf(e.obj, f), after)
	}
	var diffs []string
	for k, v := range after {
		if before[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %q→%q", k, before[k], v))
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %q→(gone)", k, v))
		}
	}
	if len(diffs) == 0 {
		return "(status or bookkeeping only)"
	}
	sort.Strings(diffs)
	return "{" + strings.Join(diffs, ", ") + "}"
}

func fieldOf(u *unstructured.Unstructured, path []string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	return v
}

func flatten(prefix string, v any, out map[string]string) {
	switch t := v.(type) {
	case nil:
	case map[string]any:
		for k, x := range t {
			flatten(prefix+"."+k, x, out)
		}
	case []any:
		for i, x := range t {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), x, out)
		}
	default:
		out[prefix] = fmt.Sprint(t)
	}
}

// leftovers: nothing a deleted fleet or the deleted ServiceMesh owned is
// left, and the admin's label is as the admin left it.
func (r *Runner) leftovers(ctx context.Context, w world, seq []Action, adminLabel string) []string {
	var out []string
	for _, name := range fleetNames {
		f := &fleetv1.CelldFleet{}
		if err := r.K8s.Get(ctx, client.ObjectKey{Namespace: w.app, Name: name}, f); !apierrors.IsNotFound(err) {
			continue
		}
		for _, kind := range []string{"v1/Service", "networking.k8s.io/v1/NetworkPolicy", "apps/v1/StatefulSet", "policy/v1/PodDisruptionBudget",
			"security.istio.io/v1/AuthorizationPolicy", "security.istio.io/v1/PeerAuthentication", "networking.k8s.io/v1/Ingress"} {
			list := &unstructured.UnstructuredList{}
			gv, k := kind[:strings.LastIndex(kind, "/")], kind[strings.LastIndex(kind, "/")+1:]
			list.SetAPIVersion(gv)
			list.SetKind(k + "List")
			if err := r.K8s.List(ctx, list, client.InNamespace(w.app), client.MatchingLabels{labels.Instance: name}); err != nil {
				continue // the API may not be served
			}
			for _, o := range list.Items {
				if o.GetDeletionTimestamp() == nil {
					out = append(out, fmt.Sprintf("at rest, fleet %s is gone but its %s %s is left", name, k, o.GetName()))
				}
			}
		}
	}
	ns := &corev1.Namespace{}
	if err := r.K8s.Get(ctx, client.ObjectKey{Name: w.app}, ns); err != nil {
		return append(out, err.Error())
	}
	if got := ns.Labels[labels.Mesh]; adminLabel != "" && adminLabel != "none" && got != adminLabel {
		out = append(out, fmt.Sprintf("at rest, the admin's %s=%s on %s reads %q", labels.Mesh, adminLabel, w.app, got))
	}
	if err := r.K8s.Get(ctx, client.ObjectKey{Name: "cluster"}, &meshv1.ServiceMesh{}); apierrors.IsNotFound(err) {
		for _, name := range []string{w.app, w.edge, w.other} {
			if err := r.K8s.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
				continue
			}
			for _, k := range []string{labels.MeshState, labels.MeshMTLS, labels.MeshDataPlane, labels.IstioDataPlaneMode} {
				if v, ok := ns.Labels[k]; ok {
					out = append(out, fmt.Sprintf("at rest, no ServiceMesh but namespace %s still has %s=%s", name, k, v))
				}
			}
		}
	}
	return out
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ok, msg := cond()
		if ok {
			return nil
		}
		last = msg
		time.Sleep(250 * time.Millisecond)
	}
	return errors.New("timed out: " + last)
}

func ptrTo[T any](v T) *T { return &v }
