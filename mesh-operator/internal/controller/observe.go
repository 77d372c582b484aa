package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/detect"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// Where detection looks: fixed locations, read one by one, so the operator
// needs no cluster-wide cache of Deployments, DaemonSets or ConfigMaps.
const (
	ciliumNamespace  = "kube-system"
	ciliumDaemonSet  = "cilium"
	ciliumConfigMap  = "cilium-config"
	istiodAppValue   = "istiod"
	istiodContainer  = "discovery"
	defaultIstioNSes = sail.IstioNamespace
	// istioInjectorWebhook ends the name of every sidecar-injector webhook
	// Istio registers (namespace.sidecar-injector.istio.io,
	// rev.object.sidecar-injector.istio.io, ...).
	istioInjectorWebhook = "sidecar-injector.istio.io"
)

// maistraVersions are the versions ServiceMeshControlPlane was served in
// (OSSM 2.x serves v2, older releases v1 only).
var maistraVersions = []string{"v2", "v1"}

// +kubebuilder:rbac:groups=maistra.io,resources=servicemeshcontrolplanes,verbs=list
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=list

// observed is what one reconcile read: the facts detection decides on, plus
// the live objects readiness is judged from.
type observed struct {
	facts detect.Facts
	// istios are the live Sail Istio CRs by name.
	istios map[string]*sail.Istio
	// istiods are the istiod Deployments by namespace/name.
	istiods []detect.Istiod
}

// observe gathers the facts: API discovery (fresh, see Served), then a few
// targeted reads. The reads are uncached on purpose (see Reader).
func (r *ServiceMeshReconciler) observe(ctx context.Context, mesh *v1alpha1.ServiceMesh) (*observed, error) {
	o := &observed{istios: map[string]*sail.Istio{}}
	apis, err := r.Served.Snapshot()
	if err != nil {
		return nil, err
	}
	// A group whose discovery failed (a broken aggregated API) is left out
	// rather than failing detection: none of the groups detection needs is
	// aggregated.
	o.facts.Resources = apis.Resources()

	deps := &appsv1.DeploymentList{}
	if err := r.Reader.List(ctx, deps, client.MatchingLabels{labels.IstiodApp: istiodAppValue}); err != nil {
		return nil, fmt.Errorf("listing istiod Deployments: %w", err)
	}
	for i := range deps.Items {
		o.facts.Istiods = append(o.facts.Istiods, istiodOf(&deps.Items[i]))
	}
	o.istiods = o.facts.Istiods

	// The sidecar-injector webhooks say, where no tenant can, which
	// namespaces run a control plane (detect.TrustedNamespaces).
	hooks := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := r.Reader.List(ctx, hooks); err != nil {
		return nil, fmt.Errorf("listing MutatingWebhookConfigurations (Istio's sidecar injectors): %w", err)
	}
	o.facts.InjectorNamespaces = injectorNamespaces(hooks.Items)

	ds := &appsv1.DaemonSet{}
	switch err := r.Reader.Get(ctx, types.NamespacedName{Namespace: ciliumNamespace, Name: ciliumDaemonSet}, ds); {
	case err == nil:
		o.facts.CiliumDaemonSet = true
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("looking for the Cilium DaemonSet: %w", err)
	}
	if o.facts.Cilium() {
		cm := &corev1.ConfigMap{}
		switch err := r.Reader.Get(ctx, types.NamespacedName{Namespace: ciliumNamespace, Name: ciliumConfigMap}, cm); {
		case err == nil:
			o.facts.CiliumConfig = cm.Data
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading %s/%s: %w", ciliumNamespace, ciliumConfigMap, err)
		}
	}

	if o.facts.Maistra() {
		// Only a ServiceMeshControlPlane shows OSSM 2 in use: its CRDs
		// outlive an uninstall.
		// The version to list in is the newest the snapshot serves it in.
		version := ""
		for _, v := range maistraVersions {
			ok, err := apis.Kind(schema.GroupVersionKind{Group: detect.GroupMaistra, Version: v, Kind: "ServiceMeshControlPlane"})
			if err != nil {
				return nil, fmt.Errorf("listing Maistra ServiceMeshControlPlanes: %w", err)
			}
			if ok {
				version = v
				break
			}
		}
		if version == "" {
			return nil, fmt.Errorf("listing Maistra ServiceMeshControlPlanes: %s serves them in none of the versions %v", detect.GroupMaistra, maistraVersions)
		}
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: detect.GroupMaistra, Version: version, Kind: "ServiceMeshControlPlaneList"})
		if err := r.Reader.List(ctx, list); err != nil {
			return nil, fmt.Errorf("listing Maistra ServiceMeshControlPlanes: %w", err)
		}
		for _, smcp := range list.Items {
			o.facts.MaistraControlPlanes = append(o.facts.MaistraControlPlanes, smcp.Namespace+"/"+smcp.Name)
		}
		sort.Strings(o.facts.MaistraControlPlanes)
	}

	if o.facts.SailAPI() {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(sail.GVK(sail.KindIstio + "List"))
		if err := r.Reader.List(ctx, list); err != nil {
			return nil, fmt.Errorf("listing Sail Istios: %w", err)
		}
		for i := range list.Items {
			obj, err := sail.FromUnstructured(&list.Items[i])
			if err != nil {
				return nil, err
			}
			istio := obj.(*sail.Istio)
			o.istios[istio.Name] = istio
			o.facts.Istios = append(o.facts.Istios, sailIstioOf(istio, mesh))
		}
		if r.Config.SailInstall {
			// Whether the Sail that serves the API is the release the
			// operator installed, to be kept current. Unreadable fails
			// detection: nothing is decided on a record not seen.
			rec, err := r.records().Get(ctx, r.Config.SailNamespace)
			if err != nil {
				return nil, err
			}
			if rec != nil {
				o.facts.SailRecord = &detect.SailRecord{Release: rec.Release, Holders: rec.Holders}
			}
		}
	}
	return o, nil
}

// injectorNamespaces are the namespaces of the services Istio's
// sidecar-injector webhooks call (webhook names ending in
// sidecar-injector.istio.io, as every Istio revision registers them),
// sorted and without duplicates.
func injectorNamespaces(hooks []admissionregistrationv1.MutatingWebhookConfiguration) []string {
	var out []string
	for _, h := range hooks {
		for _, w := range h.Webhooks {
			if strings.HasSuffix(w.Name, istioInjectorWebhook) && w.ClientConfig.Service != nil && !slices.Contains(out, w.ClientConfig.Service.Namespace) {
				out = append(out, w.ClientConfig.Service.Namespace)
			}
		}
	}
	sort.Strings(out)
	return out
}

func istiodOf(d *appsv1.Deployment) detect.Istiod {
	out := detect.Istiod{Namespace: d.Namespace, Name: d.Name, Revision: d.Labels[labels.IstioRevision]}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == istiodContainer {
			out.Version = imageTag(c.Image)
		}
	}
	fresh := d.Status.ObservedGeneration >= d.Generation
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && fresh && d.Status.AvailableReplicas > 0 {
			out.Available = true
		}
	}
	return out
}

// imageTag returns the tag of an image reference ("" for a digest-only one).
func imageTag(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[i+1:]
	}
	return ""
}

func sailIstioOf(i *sail.Istio, mesh *v1alpha1.ServiceMesh) detect.SailIstio {
	ns := i.Spec.Namespace
	if ns == "" {
		ns = defaultIstioNSes
	}
	rev := i.Status.ActiveRevisionName
	if rev == "" {
		rev = i.Name
	}
	return detect.SailIstio{Name: i.Name, Namespace: ns, Version: i.Spec.Version, Revision: rev, Ours: metav1.IsControlledBy(i, mesh)}
}
