package explore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
)

// The environment the operators do not own and a sequence may change: the
// Istio and Gateway API CRDs, the license Secret, a Gateway controller.

const (
	// gatewayName is the Gateway every sequence's edge namespace holds; a
	// fleet routed through the Gateway API attaches to it.
	gatewayName  = "edge"
	gatewayClass = "explore"
	// gatewayController is the played controller's name in route status.
	gatewayController = "explore.fleetmesh.dev/gateway"
	licenseSecret     = "mesh-operator-license"
	// shortLived is how long an expiring license or a short maintenance
	// window lasts.
	shortLived = 20 * time.Second
	// renewalGap is how long a renewed license Secret is gone between its
	// deletion and its creation.
	renewalGap = 2 * time.Second
	// unreadableReread bounds how long after the license can be read
	// again the operator may still act on what it could not read: it reads
	// an unreadable license again every 10 s, plus a few seconds.
	unreadableReread = 15 * time.Second
	// missingReread: likewise after the license Secret is back; a mesh
	// locked for a missing license reads it again every 30 s.
	missingReread = 35 * time.Second
)

// environment is the part of the bed the sequence's env.* actions change,
// and what reset puts back.
type environment struct {
	mu sync.Mutex
	// accept: the played Gateway controller's answer to routes.
	accept bool
	// removed: CRD groups ("istio", "gateway") whose CRDs are gone.
	removed map[string]bool
	// license is the bed's valid license, restored by reset.
	license []byte
	// expiries: when something the sequence set expires by itself (an
	// expiring license, a short maintenance window) or the operator is due
	// to read a license it could not know (closeHold); rest is not judged
	// before the last of them.
	expiries time.Time
	// licenseExpires: when the license the Secret holds expires (zero: not
	// within the sequence).
	licenseExpires time.Time
	// meshRoleRules: the rules of the mesh operator's Role (meshRole) as
	// the chart made them, while env.licenseread deny has taken its license
	// rule away (nil otherwise).
	meshRoleRules []rbacv1.PolicyRule
	meshRole      string
	// holds: the sequence's spans in which a valid license could not be
	// read or was missing for a moment, and nothing may be released.
	holds []hold
	// adminLabels: the labels the admin (admin.optout) holds on the fleets'
	// namespace now; optOuts: each one's span (checkTenants).
	adminLabels map[string]string
	optOuts     []optOut
	// activeFaults: the env.fault faults set now; playedFaults: those
	// ended, for the judge; handEdits: when env.handedit deleted a
	// fleet's NetworkPolicy (faults.go).
	activeFaults map[string]*faultRecord
	playedFaults []faultRecord
	handEdits    []time.Time
}

// hold is a span in which the operator cannot know the license, which was
// valid when the span began: it must hold the mesh as it is (see
// releasedWhileHeld).
type hold struct {
	why string
	// from: the fault is in place; until: the operator has had time to
	// read the license again (zero while the fault lasts, to the
	// sequence's end).
	from, until time.Time
	// expires: the license expires then, read or not, and releasing is
	// owed (zero: it does not expire within the sequence).
	expires time.Time
}

// covers: t is within the hold.
func (h hold) covers(t time.Time) bool {
	return !t.Before(h.from) && (h.until.IsZero() || !t.After(h.until)) && (h.expires.IsZero() || t.Before(h.expires))
}

// openHold starts a hold, unless the license has already expired or one
// for the same fault is open.
func (e *environment) openHold(why string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if !e.licenseExpires.IsZero() && !now.Before(e.licenseExpires) {
		return
	}
	for _, h := range e.holds {
		if h.why == why && h.until.IsZero() {
			return
		}
	}
	e.holds = append(e.holds, hold{why: why, from: now, expires: e.licenseExpires})
}

// closeHold ends the open hold for why once the operator has had the
// time to read the license again (reread from now); rest is not judged
// before (settle), since the operator acts on what it reads then.
func (e *environment) closeHold(why string, reread time.Duration) {
	e.mu.Lock()
	closed := false
	for i, h := range e.holds {
		if h.why == why && h.until.IsZero() {
			e.holds[i].until, closed = time.Now().Add(reread), true
		}
	}
	e.mu.Unlock()
	if closed {
		e.expiresIn(reread)
	}
}

// licenseExpiresAt notes that the license now in the Secret expires at t
// (zero: it does not); the holds not over yet end then at the latest. A
// hold whose license has expired stays over: releasing was owed.
func (e *environment) licenseExpiresAt(t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	e.licenseExpires = t
	for i, h := range e.holds {
		if (h.until.IsZero() || h.until.After(now)) && (h.expires.IsZero() || h.expires.After(now)) {
			e.holds[i].expires = t
		}
	}
}

// takeHolds returns the sequence's holds and forgets them.
func (e *environment) takeHolds() []hold {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.holds
	e.holds = nil
	return out
}

// expiresIn notes that something set now expires by itself after d.
func (e *environment) expiresIn(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t := time.Now().Add(d); t.After(e.expiries) {
		e.expiries = t
	}
}

func (e *environment) lastExpiry() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.expiries
}

// crdPaths are the manifests of the third-party CRDs by group name.
func crdPaths(ctx context.Context) (map[string]string, error) {
	paths, err := cluster.DefaultCRDPaths(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]string{"gateway": paths[0], "istio": paths[1]}, nil
}

// removeCRDs deletes the group's CRDs and waits until they are gone (their
// objects with them), as an admin uninstalling Istio or the Gateway API
// would.
func (r *Runner) removeCRDs(ctx context.Context, group string) error {
	paths, err := crdPaths(ctx)
	if err != nil {
		return err
	}
	objs, err := cluster.LoadManifests(paths[group])
	if err != nil {
		return err
	}
	var names []string
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}}
		if err := r.K8s.Delete(ctx, crd); client.IgnoreNotFound(err) != nil {
			return err
		}
		names = append(names, o.GetName())
	}
	r.env.mu.Lock()
	r.env.removed[group] = true
	r.env.mu.Unlock()
	return waitUntil(ctx, 2*time.Minute, func() (bool, string) {
		for _, n := range names {
			err := r.K8s.Get(ctx, client.ObjectKey{Name: n}, &apiextensionsv1.CustomResourceDefinition{})
			if !apierrors.IsNotFound(err) {
				return false, "CRD " + n + " still there"
			}
		}
		return true, ""
	})
}

// restoreCRDs installs the group's CRDs again and, for the Gateway API, the
// world's Gateway (it went with its CRD).
func (r *Runner) restoreCRDs(ctx context.Context, w world, group string) error {
	paths, err := crdPaths(ctx)
	if err != nil {
		return err
	}
	if err := cluster.InstallManifests(ctx, r.Bed.Cluster.REST, paths[group]); err != nil {
		return err
	}
	r.env.mu.Lock()
	delete(r.env.removed, group)
	r.env.mu.Unlock()
	if group == "gateway" && w.edge != "" {
		return r.createGateway(ctx, w)
	}
	return nil
}

// createGateway puts the world's Gateway in its edge namespace (nothing
// when the Gateway API is not served).
func (r *Runner) createGateway(ctx context.Context, w world) error {
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": gatewayClass},
		"spec":     map[string]any{"controllerName": gatewayController},
	}}
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"namespace": w.edge, "name": gatewayName},
		"spec": map[string]any{
			"gatewayClassName": gatewayClass,
			"listeners": []any{map[string]any{"name": "http", "port": int64(80), "protocol": "HTTP",
				"allowedRoutes": map[string]any{"namespaces": map[string]any{"from": "All"}}}},
		},
	}}
	for _, o := range []*unstructured.Unstructured{class, gw} {
		err := r.K8s.Create(ctx, o)
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil // the Gateway API is not served
		}
		if client.IgnoreAlreadyExists(err) != nil {
			return err
		}
	}
	return nil
}

// playGateway is the Gateway controller: every 500 ms it answers each
// HTTPRoute attached to a world's Gateway for the route's generation,
// Accepted or NotAllowedByListeners as env.gateway last said, and
// ResolvedRefs.
func (r *Runner) playGateway(ctx context.Context) {
	for ctx.Err() == nil {
		routes := &unstructured.UnstructuredList{}
		routes.SetAPIVersion("gateway.networking.k8s.io/v1")
		routes.SetKind("HTTPRouteList")
		if r.K8s.List(ctx, routes) == nil {
			r.env.mu.Lock()
			accept := r.env.accept
			r.env.mu.Unlock()
			for i := range routes.Items {
				r.answerRoute(ctx, &routes.Items[i], accept)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (r *Runner) answerRoute(ctx context.Context, route *unstructured.Unstructured, accept bool) {
	refs, _, _ := unstructured.NestedSlice(route.Object, "spec", "parentRefs")
	status, reason, msg := "True", "Accepted", "accepted by the explorer's Gateway controller"
	if !accept {
		status, reason, msg = "False", "NotAllowedByListeners", "refused by the explorer's Gateway controller"
	}
	var parents []any
	changed := false
	old, _, _ := unstructured.NestedSlice(route.Object, "status", "parents")
	for _, ref := range refs {
		m, _ := ref.(map[string]any)
		if m["name"] != gatewayName {
			continue
		}
		// Both conditions a Gateway controller must report on a route:
		// Accepted as env.gateway says, ResolvedRefs True (the backend is
		// the fleet's Service).
		now := time.Now().UTC().Format(time.RFC3339)
		want := []map[string]any{
			{"type": "Accepted", "status": status, "reason": reason, "message": msg, "observedGeneration": route.GetGeneration(), "lastTransitionTime": now},
			{"type": "ResolvedRefs", "status": "True", "reason": "ResolvedRefs", "message": "resolved by the explorer's Gateway controller",
				"observedGeneration": route.GetGeneration(), "lastTransitionTime": now},
		}
		var conds []any
		for _, cond := range want {
			same := false
			for _, p := range old {
				pm, _ := p.(map[string]any)
				had, _, _ := unstructured.NestedSlice(pm, "conditions")
				for _, c := range had {
					cm, _ := c.(map[string]any)
					if cm["type"] == cond["type"] && cm["status"] == cond["status"] && fmt.Sprint(cm["observedGeneration"]) == fmt.Sprint(route.GetGeneration()) {
						same = true
						cond = cm
					}
				}
			}
			changed = changed || !same
			conds = append(conds, cond)
		}
		parents = append(parents, map[string]any{"parentRef": m, "controllerName": gatewayController, "conditions": conds})
	}
	if !changed || len(parents) == 0 {
		return
	}
	_ = unstructured.SetNestedSlice(route.Object, parents, "status", "parents")
	_ = r.K8s.Status().Update(ctx, route) // a conflict is answered on the next pass
}

// What the holds are for: the faults during which a license that was valid
// cannot be known.
const (
	licenseUnreadable = "the mesh operator may not read its license Secret"
	licenseDeleted    = "the license Secret is deleted"
	licenseRenewing   = "the license Secret is renewed (deleted and created again)"
)

// setLicense changes the license Secret: delete, restore the bed's valid
// license, put one that expires 20 s later, or renew the one there.
func (r *Runner) setLicense(ctx context.Context, how string) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: harness.MeshNamespace, Name: licenseSecret}}
	switch how {
	case "delete":
		if err := r.K8s.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return err
		}
		r.env.openHold(licenseDeleted)
		return nil
	case "renew":
		return r.renewLicense(ctx)
	}
	data, expires := r.env.license, time.Time{}
	if how == "expiring" {
		expires = time.Now().Add(shortLived) // signed after: it expires a little later
		path := filepath.Join(os.TempDir(), fmt.Sprintf("explore-license-%d", time.Now().UnixNano()))
		defer os.Remove(path)
		if err := r.Bed.SignLicense(ctx, path, "explorer (expiring)", "preview", shortLived); err != nil {
			return err
		}
		r.env.expiresIn(shortLived)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		data = b
	}
	_, err := controllerutil.CreateOrUpdate(ctx, r.K8s, secret, func() error {
		secret.Data = map[string][]byte{"license": data}
		return nil
	})
	if err != nil {
		return err
	}
	r.env.licenseExpiresAt(expires)
	r.env.closeHold(licenseDeleted, missingReread)
	return nil
}

// renewLicense replaces the license Secret as kubectl replace --force or a
// GitOps tool recreating it does: deleted, and created again with the same
// content renewalGap later. Nothing happens when there is none.
func (r *Runner) renewLicense(ctx context.Context) error {
	old := &corev1.Secret{}
	if err := r.K8s.Get(ctx, client.ObjectKey{Namespace: harness.MeshNamespace, Name: licenseSecret}, old); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := r.K8s.Delete(ctx, old); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.env.openHold(licenseRenewing)
	time.Sleep(renewalGap)
	renewed := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: old.Namespace, Name: old.Name, Labels: old.Labels, Annotations: old.Annotations},
		Type:       old.Type, Data: old.Data,
	}
	if err := r.K8s.Create(ctx, renewed); err != nil {
		return err
	}
	r.env.closeHold(licenseRenewing, missingReread)
	return nil
}

// meshServiceAccount is the user the mesh operator runs as (the mesh
// chart's ServiceAccount, see harness.InstallRBAC).
var meshServiceAccount = "system:serviceaccount:" + harness.MeshNamespace + ":mesh-operator"

// setLicenseRead takes away (deny) or gives back (allow) the rule of the
// mesh operator's Role that lets it get its license Secret, as an admin
// editing the chart's RBAC would; the rest of the Role (its leader lease,
// Events) stays. It returns once the API server decides accordingly.
func (r *Runner) setLicenseRead(ctx context.Context, allow bool) error {
	r.env.mu.Lock()
	saved, name := r.env.meshRoleRules, r.env.meshRole
	r.env.mu.Unlock()
	if allow == (saved == nil) {
		return nil // already so
	}
	role := &rbacv1.Role{}
	if allow {
		if err := r.K8s.Get(ctx, client.ObjectKey{Namespace: harness.MeshNamespace, Name: name}, role); err != nil {
			return err
		}
		role.Rules = saved
	} else {
		roles := &rbacv1.RoleList{}
		if err := r.K8s.List(ctx, roles, client.InNamespace(harness.MeshNamespace)); err != nil {
			return err
		}
		i := slices.IndexFunc(roles.Items, func(ro rbacv1.Role) bool { return slices.ContainsFunc(ro.Rules, grantsLicense) })
		if i < 0 {
			return fmt.Errorf("no Role in %s grants get on Secret %s", harness.MeshNamespace, licenseSecret)
		}
		role = &roles.Items[i]
		saved, name = role.DeepCopy().Rules, role.Name
		role.Rules = slices.DeleteFunc(role.Rules, grantsLicense)
	}
	if err := r.K8s.Update(ctx, role); err != nil {
		return err
	}
	if err := waitUntil(ctx, 30*time.Second, func() (bool, string) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: meshServiceAccount,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: harness.MeshNamespace, Verb: "get", Resource: "secrets", Name: licenseSecret}}}
		if err := r.K8s.Create(ctx, sar); err != nil {
			return false, err.Error()
		}
		return sar.Status.Allowed == allow, fmt.Sprintf("the API server still says allowed=%t", sar.Status.Allowed)
	}); err != nil {
		return err
	}
	r.env.mu.Lock()
	if allow {
		r.env.meshRoleRules, r.env.meshRole = nil, ""
	} else {
		r.env.meshRoleRules, r.env.meshRole = saved, name
	}
	r.env.mu.Unlock()
	if allow {
		r.env.closeHold(licenseUnreadable, unreadableReread)
	} else {
		r.env.openHold(licenseUnreadable)
	}
	return nil
}

// grantsLicense: the rule lets its subject get the license Secret.
func grantsLicense(rule rbacv1.PolicyRule) bool {
	return slices.Contains(rule.APIGroups, "") && slices.Contains(rule.Resources, "secrets") &&
		slices.Contains(rule.ResourceNames, licenseSecret) && slices.Contains(rule.Verbs, "get")
}

// restoreEnvironment puts back what env.* actions changed: CRDs, the
// mesh operator's right to read its license, the license, a Gateway
// controller that accepts.
func (r *Runner) restoreEnvironment(ctx context.Context) error {
	r.endFaults()
	r.env.mu.Lock()
	r.env.accept = true
	var groups []string
	for g := range r.env.removed {
		groups = append(groups, g)
	}
	r.env.mu.Unlock()
	for _, g := range groups {
		if err := r.restoreCRDs(ctx, world{}, g); err != nil {
			return fmt.Errorf("restoring the %s CRDs: %w", g, err)
		}
	}
	if err := r.setLicenseRead(ctx, true); err != nil {
		return fmt.Errorf("restoring the mesh operator's license rule: %w", err)
	}
	return r.setLicense(ctx, "restore")
}
