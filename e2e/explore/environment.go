package explore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// expiring license, a short maintenance window); rest is not judged
	// before the last of them.
	expiries time.Time
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
// Accepted or NotAllowedByListeners as env.gateway last said.
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
		cond := map[string]any{"type": "Accepted", "status": status, "reason": reason, "message": msg,
			"observedGeneration": route.GetGeneration(), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
		same := false
		for _, p := range old {
			pm, _ := p.(map[string]any)
			conds, _, _ := unstructured.NestedSlice(pm, "conditions")
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				if cm["type"] == "Accepted" && cm["status"] == status && fmt.Sprint(cm["observedGeneration"]) == fmt.Sprint(route.GetGeneration()) {
					same = true
					cond = cm
				}
			}
		}
		changed = changed || !same
		parents = append(parents, map[string]any{"parentRef": m, "controllerName": gatewayController, "conditions": []any{cond}})
	}
	if !changed || len(parents) == 0 {
		return
	}
	_ = unstructured.SetNestedSlice(route.Object, parents, "status", "parents")
	_ = r.K8s.Status().Update(ctx, route) // a conflict is answered on the next pass
}

// setLicense changes the license Secret: delete, restore the bed's valid
// license, or put one that expires 20 s later.
func (r *Runner) setLicense(ctx context.Context, how string) error {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: harness.MeshNamespace, Name: licenseSecret}}
	if how == "delete" {
		return client.IgnoreNotFound(r.K8s.Delete(ctx, secret))
	}
	data := r.env.license
	if how == "expiring" {
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
	return err
}

// restoreEnvironment puts back what env.* actions changed: CRDs, the
// license, a Gateway controller that accepts.
func (r *Runner) restoreEnvironment(ctx context.Context) error {
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
	return r.setLicense(ctx, "restore")
}
