package explore

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Tenants and admins. A tenant is the user tenantUser, who may edit the
// world's other namespace and nothing else: the built-in edit ClusterRole
// bound there, and a Role for Istio's security policies (Istio's CRDs come
// with no role aggregated to edit; a cluster that lets namespace editors
// write PeerAuthentications grants it like this). Its actions go through an
// impersonating client, so the API server decides what it may do. An admin
// is cluster-admin writing with the field manager adminManager, with
// server-side apply and force, as `kubectl label --overwrite` takes a label.
const (
	tenantUser    = "explore-tenant"
	tenantManager = "explore-tenant"
	adminManager  = "explore-admin"
	// tenantRole grants the tenant Istio's security policies in its namespace.
	tenantRole = "explore-tenant-istio"
	// tenantIstiod is the tenant's Deployment dressed as istiod: app=istiod,
	// the default revision, a discovery container with an Istio image.
	tenantIstiod = "istiod"
	// istiodAppValue is the value of labels.IstiodApp that marks istiod.
	istiodAppValue = "istiod"
	istiodImage    = "docker.io/istio/pilot:1.26.2"
	// tenantPeerAuth is the tenant's namespace-wide PeerAuthentication.
	tenantPeerAuth = "tenant-mtls"
)

var gvrDeployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// grantTenant gives tenantUser its rights in the world's other namespace and
// waits until the API server answers accordingly (and refuses it the app
// namespace: a tenant that could write there would prove nothing).
func (r *Runner) grantTenant(ctx context.Context, w world) error {
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}}
	objs := []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: w.other, Name: tenantUser + "-edit"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"}, Subjects: subjects},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: w.other, Name: tenantRole}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{gvrPAs.Group}, Resources: []string{gvrPAs.Resource, gvrAPs.Resource},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: w.other, Name: tenantRole},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: tenantRole}, Subjects: subjects},
	}
	for _, o := range objs {
		if err := r.K8s.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("granting the tenant: %w", err)
		}
	}
	may := func(ns string, gvr schema.GroupVersionResource) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: tenantUser,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: gvr.Group, Resource: gvr.Resource}}}
		if err := r.K8s.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}
	return waitUntil(ctx, 30*time.Second, func() (bool, string) {
		for _, c := range []struct {
			ns   string
			gvr  schema.GroupVersionResource
			want bool
		}{{w.other, gvrDeployments, true}, {w.other, gvrPAs, true}, {w.app, gvrDeployments, false}, {w.app, gvrPAs, false}} {
			got, err := may(c.ns, c.gvr)
			if err != nil {
				return false, err.Error()
			}
			if got != c.want {
				return false, fmt.Sprintf("the API server says %s may create %s in %s: %t", tenantUser, c.gvr.Resource, c.ns, got)
			}
		}
		return true, ""
	})
}

// asTenant is a dynamic client that acts as tenantUser.
func (r *Runner) asTenant() (dynamic.Interface, error) {
	cfg := rest.CopyConfig(r.Bed.Cluster.REST)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: tenantUser}
	return dynamic.NewForConfig(cfg)
}

// tenantIstiodOn creates (on) or deletes (off) the tenant's fake istiod.
func (r *Runner) tenantIstiodOn(ctx context.Context, w world, on bool) error {
	tenant, err := r.asTenant()
	if err != nil {
		return err
	}
	deps := tenant.Resource(gvrDeployments).Namespace(w.other)
	if !on {
		return client.IgnoreNotFound(deps.Delete(ctx, tenantIstiod, metav1.DeleteOptions{}))
	}
	l := map[string]any{labels.IstiodApp: istiodAppValue, labels.IstioRevision: "default"}
	d := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"namespace": w.other, "name": tenantIstiod, "labels": l},
		"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": map[string]any{labels.IstiodApp: istiodAppValue}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": l},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "discovery", "image": istiodImage}}},
			},
		},
	}}
	_, err = deps.Create(ctx, d, metav1.CreateOptions{FieldManager: tenantManager})
	return client.IgnoreAlreadyExists(err)
}

// tenantPeerAuthMode applies the tenant's namespace-wide PeerAuthentication
// in mode (PERMISSIVE, DISABLE) or deletes it (""). Without Istio's CRDs
// the action does not apply and does nothing.
func (r *Runner) tenantPeerAuthMode(ctx context.Context, w world, mode string) error {
	r.env.mu.Lock()
	gone := r.env.removed["istio"]
	r.env.mu.Unlock()
	if gone {
		fmt.Fprintf(r.Log, "explore: %s: %s does not apply: Istio's CRDs are removed\n", w.app, TenantPeerAuth)
		return nil
	}
	tenant, err := r.asTenant()
	if err != nil {
		return err
	}
	pas := tenant.Resource(gvrPAs).Namespace(w.other)
	if mode == "" {
		err = pas.Delete(ctx, tenantPeerAuth, metav1.DeleteOptions{})
	} else {
		pa := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvrPAs.GroupVersion().String(), "kind": "PeerAuthentication",
			"metadata": map[string]any{"namespace": w.other, "name": tenantPeerAuth},
			"spec":     map[string]any{"mtls": map[string]any{"mode": mode}},
		}}
		_, err = pas.Apply(ctx, tenantPeerAuth, pa, metav1.ApplyOptions{FieldManager: tenantManager, Force: true})
	}
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	return err
}

// adminOptOut sets (injection: istio-injection=disabled, dataplane:
// istio.io/dataplane-mode=none) or clears (every label the admin set) an
// Istio opt-out on the fleets' namespace, and notes from which
// resourceVersion each label stands (checkTenants).
func (r *Runner) adminOptOut(ctx context.Context, w world, how string) error {
	r.env.mu.Lock()
	want := maps.Clone(r.env.adminLabels)
	r.env.mu.Unlock()
	if want == nil {
		want = map[string]string{}
	}
	switch how {
	case "injection":
		want[labels.IstioInjection] = istioOptOuts[labels.IstioInjection]
	case "dataplane":
		want[labels.IstioDataPlaneMode] = istioOptOuts[labels.IstioDataPlaneMode]
	case "clear":
		// Istio's opt-outs only: the admin's other labels (policy.pss) stay.
		for k := range istioOptOuts {
			delete(want, k)
		}
	default:
		return fmt.Errorf("%s: unknown argument %q", AdminOptOut, how)
	}
	return r.applyAdminLabels(ctx, w, want)
}

// applyAdminLabels makes want the admin's labels on the app namespace
// (server-side apply, field manager explore-admin, force) and notes from
// which resourceVersion each stands (setAdminLabels).
func (r *Runner) applyAdminLabels(ctx context.Context, w world, want map[string]string) error {
	md := map[string]any{"name": w.app}
	if len(want) > 0 {
		l := map[string]any{}
		for k, v := range want {
			l[k] = v
		}
		md["labels"] = l
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": md}}
	before, err := r.currentRV(ctx)
	if err != nil {
		return err
	}
	got, err := r.Dyn.Resource(gvrNamespaces).Apply(ctx, w.app, ns, metav1.ApplyOptions{FieldManager: adminManager, Force: true})
	if err != nil {
		return err
	}
	var rv int64
	if _, err := fmt.Sscan(got.GetResourceVersion(), &rv); err != nil {
		return fmt.Errorf("the admin's write returned resourceVersion %q: %w", got.GetResourceVersion(), err)
	}
	// An apply that changed nothing answers with the namespace's last
	// resourceVersion: the admin's labels stand as they are from now.
	r.env.setAdminLabels(w.app, want, max(rv, before+1))
	return nil
}

// setAdminLabels records that from rv on the admin's labels on namespace
// are want: a label that changed or went ends its span, a new one opens one.
func (e *environment) setAdminLabels(namespace string, want map[string]string, rv int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, o := range e.optOuts {
		if o.namespace == namespace && o.until == 0 && want[o.key] != o.value {
			e.optOuts[i].until = rv
		}
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if e.adminLabels[k] != want[k] {
			e.optOuts = append(e.optOuts, optOut{namespace: namespace, key: k, value: want[k], from: rv})
		}
	}
	e.adminLabels = want
}

// takeOptOuts returns the sequence's admin opt-outs and forgets them.
func (e *environment) takeOptOuts() []optOut {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.optOuts
	e.optOuts, e.adminLabels = nil, nil
	return out
}

// Where the mesh operator keeps and once kept the Sail Operator's Helm
// release records: Secrets in its own namespace (Helm's secret driver),
// and, from an earlier version, ConfigMaps in the Sail namespace.
const (
	forgedRelease  = "sh.helm.release.v1.sail-operator.v1"
	sailNamespace  = "sail-operator"
	meshNamespace  = "mesh-system"
	releaseOwner   = "helm"
	releaseName    = "sail-operator"
	releaseVersion = "1"
)

var gvrConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
var gvrSecrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// tenantRelease: the tenant forges a Helm release record of the Sail
// Operator whose manifest lists what protects the app namespace (its
// NetworkPolicies, its mesh-isolation AuthorizationPolicy, the namespace
// itself), so that an uninstall or upgrade diff that trusted it would
// delete them with the installer's rights. It first tries the places the
// mesh operator reads records from; the API server must refuse both (the
// action fails otherwise: a tenant who can write there defeats the
// record check's premise, docs/security.md). Then it writes the record,
// as Secret and ConfigMap, where it may: its own namespace. The judge's
// usual invariants (the fleet's NetworkPolicy at every state,
// releasedWhileHeld, checkTenants) then see whether anything it lists
// goes. The bed runs the mesh operator with --sail-install=false, so no
// uninstall runs there; the record check itself is
// mesh-operator/internal/controller/sailrelease_integration_test.go's.
// off deletes the tenant's records.
func (r *Runner) tenantRelease(ctx context.Context, w world, forge bool) error {
	tenant, err := r.asTenant()
	if err != nil {
		return err
	}
	if !forge {
		for _, gvr := range []schema.GroupVersionResource{gvrConfigMaps, gvrSecrets} {
			if err := tenant.Resource(gvr).Namespace(w.other).Delete(ctx, forgedRelease, metav1.DeleteOptions{}); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		return nil
	}
	manifest := fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: a
  namespace: %[1]s
---
apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata:
  name: %[2]s
  namespace: %[1]s
---
apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
`, w.app, meshIsolationPolicy)
	record := func(kind, ns string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{"namespace": ns, "name": forgedRelease, "labels": map[string]any{
				"owner": releaseOwner, "name": releaseName, "status": "deployed", "version": releaseVersion}},
		}}
		// Not Helm's encoding (base64 of gzipped JSON): what matters is
		// where a tenant can put a record, and that nothing it lists goes.
		if kind == "Secret" {
			o.Object["stringData"] = map[string]any{"release": manifest}
		} else {
			o.Object["data"] = map[string]any{"release": manifest}
		}
		return o
	}
	for _, c := range []struct {
		gvr       schema.GroupVersionResource
		kind, ns  string
		mayCreate bool
	}{
		{gvrSecrets, "Secret", meshNamespace, false},
		{gvrConfigMaps, "ConfigMap", sailNamespace, false},
		{gvrSecrets, "Secret", w.other, true},
		{gvrConfigMaps, "ConfigMap", w.other, true},
	} {
		_, err := tenant.Resource(c.gvr).Namespace(c.ns).Create(ctx, record(c.kind, c.ns), metav1.CreateOptions{FieldManager: tenantManager})
		switch {
		case c.mayCreate && client.IgnoreAlreadyExists(err) != nil:
			return fmt.Errorf("the tenant's record in its own namespace: %w", err)
		case !c.mayCreate && err == nil:
			return fmt.Errorf("the tenant wrote a Helm release record %s %s/%s, where the mesh operator reads them", c.kind, c.ns, forgedRelease)
		case !c.mayCreate && !apierrors.IsForbidden(err):
			return fmt.Errorf("the tenant's record %s %s/%s: want Forbidden, got %w", c.kind, c.ns, forgedRelease, err)
		}
	}
	return nil
}
