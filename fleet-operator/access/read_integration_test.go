//go:build integration

package access

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/shared/served"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestReadFromAPIServer reads a fleet-only cluster (the fleet CRD, no Istio
// CRDs, no mesh operator) from a real kube-apiserver, first with full
// rights, then as a user who may only get and list in the fleet's
// namespace; then Istio's CRDs appear.
func TestReadFromAPIServer(t *testing.T) {
	scheme := Scheme()
	for _, add := range []func(*runtime.Scheme) error{rbacv1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	env := testenv.Start(t, scheme, "fleet-operator/config/crd/bases")
	ctx := context.Background()
	c := env.Client
	rec := loadState(t, "fleet-only")

	for _, ns := range rec.Namespaces {
		ns := ns.DeepCopy()
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	f := rec.Fleet.DeepCopy()
	f.UID, f.ResourceVersion = "", ""
	f.Spec.Image = "registry.example/celld:1.0.0"
	f.Spec.Storage = &v1alpha1.Storage{Size: resource.MustParse("1Gi")}
	if err := c.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	// What the fleet operator would apply for it.
	np, err := network.NetworkPolicy(f, network.Params{OperatorNamespace: opNS, OperatorPodLabels: opLabels})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	for _, p := range rec.Pods {
		p := p.DeepCopy()
		status := p.Status
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = status
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	read := func(t *testing.T, cfg *rest.Config) (*Snapshot, *Report, string) {
		t.Helper()
		rc, err := client.New(cfg, client.Options{Scheme: Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := Read(ctx, rc, fresh(t, cfg), fleetNS, "vault", ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Compute(snap, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := r.Table(&b); err != nil {
			t.Fatal(err)
		}
		return snap, r, b.String()
	}
	verdicts := func(r *Report) map[string]string {
		out := map[string]string{}
		for _, e := range r.Ingress {
			out[fmt.Sprintf("%s <- %s :%d", e.Member, e.Caller.Name, e.Port)] = verdict(e.Allowed, e.Unknown)
		}
		for _, e := range r.Egress {
			out[fmt.Sprintf("%s -> %s %s/%d", e.Member, e.Target.Name, e.Protocol, e.Port)] = verdict(e.Allowed, e.Unknown)
		}
		return out
	}
	// The reader lists Pods only where the fleet's callers are expected
	// (its namespace, the operator's, the routing source's); the recorded
	// state also holds a Pod in routing's and another namespace.
	expected := *rec
	expected.Pods = slices.DeleteFunc(slices.Clone(rec.Pods), func(p corev1.Pod) bool { return p.Namespace != fleetNS && p.Namespace != opNS })
	want, err := Compute(&expected, Options{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("fleet-only, full rights: the recorded state's verdicts, and it says there is no Istio", func(t *testing.T) {
		snap, r, table := read(t, env.Config)
		if snap.IstioAPI || len(snap.Unreadable) > 0 {
			t.Fatalf("istioAPI=%t unreadable=%v", snap.IstioAPI, snap.Unreadable)
		}
		if d := diffVerdicts(verdicts(want), verdicts(r)); d != "" {
			t.Errorf("verdicts from the API server differ from the recorded state's:\n%s", d)
		}
		if !strings.Contains(table, "Istio: no Istio API on this cluster (fleet-only)") {
			t.Errorf("the table does not say the cluster is fleet-only:\n%s", table)
		}
	})

	// A user who may get the fleet and list Pods and NetworkPolicies in its
	// namespace, and nothing else.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "access-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"celldfleets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list"}},
		{APIGroups: []string{"security.istio.io"}, Resources: []string{"authorizationpolicies"}, Verbs: []string{"list"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: fleetNS, Name: "access-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "team-a-viewer"}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitAllowed(t, c, "team-a-viewer", authorizationv1.ResourceAttributes{
		Verb: "get", Group: v1alpha1.GroupVersion.Group, Resource: "celldfleets", Namespace: fleetNS})
	limited := rest.CopyConfig(env.Config)
	limited.Impersonate = rest.ImpersonationConfig{UserName: "team-a-viewer"}

	t.Run("--from a Pod of a namespace the report does not list: read and judged", func(t *testing.T) {
		rc, err := client.New(env.Config, client.Options{Scheme: Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		snap, err := Read(ctx, rc, fresh(t, env.Config), fleetNS, "vault", ReadOptions{From: "shop/shop-1"})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Compute(snap, Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err = r.Filter("shop/shop-1", "vault-0:8080")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Ingress) != 1 || r.Ingress[0].Allowed || r.Ingress[0].Caller.Class != ClassOtherPlain {
			t.Errorf("shop/shop-1 -> vault-0:8080: %+v", r.Ingress)
		}
		if _, err := Read(ctx, rc, fresh(t, env.Config), fleetNS, "vault", ReadOptions{From: "shop/nobody"}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("--from a Pod that does not exist: %v", err)
		}
	})

	t.Run("get/list in the fleet's namespace only: says what it could not read, and what that leaves unknown", func(t *testing.T) {
		snap, r, table := read(t, limited)
		wantUnreadable := []string{"NetworkPolicy in fleet-system: forbidden", "Namespace team-a: forbidden", "Namespace fleet-system: forbidden", "Pod in fleet-system: forbidden"}
		if !slices.Equal(snap.Unreadable, wantUnreadable) {
			t.Errorf("unreadable %q, want %q", snap.Unreadable, wantUnreadable)
		}
		for _, u := range wantUnreadable {
			if !strings.Contains(table, "Could not read: "+u) {
				t.Errorf("the table does not say %q:\n%s", u, table)
			}
		}
		got := verdicts(r)
		for key, w := range map[string]string{
			"vault-0 <- team-a/web-1 :8080":                  "allow",
			"vault-0 <- team-a/batch-2 :8080":                "deny",
			"vault-0 <- (the fleet operator) :8081":          "unknown", // its namespace's egress policies are unreadable
			"vault-0 <- (another Pod of fleet-system) :8081": "unknown",
		} {
			if got[key] != w {
				t.Errorf("%s: %s, want %s", key, got[key], w)
			}
		}
	})

	t.Run("Istio's CRDs appear: the Istio layer is read, and an unreadable kind makes its verdicts unknown", func(t *testing.T) {
		env.InstallCRDs(t, testenv.ModuleFile(t, "istio.io/api", "v1.32.0", "kubernetes/customresourcedefinitions.gen.yaml"))
		snap, r, _ := read(t, env.Config)
		if !snap.IstioAPI || len(snap.Unreadable) > 0 {
			t.Fatalf("istioAPI=%t unreadable=%v", snap.IstioAPI, snap.Unreadable)
		}
		if !strings.Contains(r.Istio.Note, "present") {
			t.Errorf("istio note %q", r.Istio.Note)
		}
		snap, _, _ = read(t, limited)
		if !slices.Contains(snap.Unreadable, "PeerAuthentication in team-a: forbidden") || slices.Contains(snap.Unreadable, "AuthorizationPolicy in team-a: forbidden") {
			t.Errorf("unreadable %q", snap.Unreadable)
		}
	})
}

func diffVerdicts(want, got map[string]string) string {
	var out []string
	for k, w := range want {
		if got[k] != w {
			out = append(out, fmt.Sprintf("%s: %q, want %q", k, got[k], w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: %q, not in the recorded state", k, g))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// fresh is what kubectl-celld asks whether an API is served: a discovery
// run as the reading user.
func fresh(t *testing.T, cfg *rest.Config) *served.Catalog {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &served.Catalog{Discovery: dc, MaxAge: served.Fresh}
}
