package access

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/policy"
)

// Scheme holds the typed kinds Read reads.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Kinds answers whether the API server serves a kind: a
// *served.Catalog (shared/served), Fresh for a one-shot read.
type Kinds interface {
	Kind(schema.GroupVersionKind) (bool, error)
}

// ReadOptions say what to read beyond the fleet's own neighbourhood.
type ReadOptions struct {
	Options
	// From (NAMESPACE/NAME) is a caller Pod to read and judge as well.
	From string
}

// Read takes a Snapshot of what decides access to the fleet
// namespace/name, with get and list only. Only the fleet itself must be
// readable; whatever else is refused is listed in Snapshot.Unreadable and
// the verdicts that depend on it are marked unknown. A cluster without the
// Istio security API is a fleet-only cluster: IstioAPI is false.
func Read(ctx context.Context, c client.Reader, apis Kinds, namespace, name string, opts ReadOptions) (*Snapshot, error) {
	s := &Snapshot{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s.Fleet); err != nil {
		switch {
		case meta.IsNoMatchError(err):
			return nil, fmt.Errorf("this cluster has no CelldFleet API (%s): is the fleet operator installed?", v1alpha1.GroupVersion)
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("CelldFleet %s/%s not found", namespace, name)
		}
		return nil, fmt.Errorf("reading CelldFleet %s/%s: %w", namespace, name, err)
	}
	f := &s.Fleet
	refused := func(what string, err error) error {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			s.Unreadable = append(s.Unreadable, what+": "+reason(err))
			return nil
		}
		return fmt.Errorf("reading %s: %w", what, err)
	}

	// The fleet's own policies first: they name the operator's namespace.
	npsRead := map[string]bool{}
	readPolicies := func(ns string) error {
		if ns == "" || npsRead[ns] {
			return nil
		}
		npsRead[ns] = true
		list := &networkingv1.NetworkPolicyList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return refused("NetworkPolicy in "+ns, err)
		}
		s.NetworkPolicies = append(s.NetworkPolicies, list.Items...)
		return nil
	}
	if err := readPolicies(f.Namespace); err != nil {
		return nil, err
	}

	istio, err := apis.Kind(policy.IstioSecurity.WithKind(policy.KindAuthorizationPolicy))
	if err != nil {
		return nil, fmt.Errorf("discovering the Istio security API: %w", err)
	}
	s.IstioAPI = istio
	if s.IstioAPI {
		for _, kind := range []string{policy.KindPeerAuthentication, policy.KindAuthorizationPolicy} {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(policy.IstioSecurity.WithKind(kind + "List"))
			if err := c.List(ctx, list, client.InNamespace(f.Namespace)); err != nil {
				if err := refused(kind+" in "+f.Namespace, err); err != nil {
					return nil, err
				}
				continue
			}
			if kind == policy.KindPeerAuthentication {
				s.PeerAuthentications = list.Items
			} else {
				s.AuthorizationPolicies = list.Items
			}
		}
	}

	op := operatorOf(s, opts.Options, cmp.Or(opts.TrustDomain, DefaultTrustDomain))
	fromNS, fromName, _ := strings.Cut(opts.From, "/")
	podNamespaces := []string{f.Namespace, op.Namespace}
	if f.Spec.Routing != nil {
		podNamespaces = append(podNamespaces, f.Spec.Routing.Source.Namespace)
	}
	namespaces := slices.Clone(podNamespaces)
	if fromNS != "" {
		namespaces = append(namespaces, fromNS)
	}
	for _, ns := range namespaces {
		if err := readPolicies(ns); err != nil {
			return nil, err
		}
	}

	// Namespace labels: the mesh state, and what namespace selectors see.
	nsSeen := map[string]bool{}
	for _, ns := range namespaces {
		if nsSeen[ns] {
			continue
		}
		nsSeen[ns] = true
		obj := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			if err := refused("Namespace "+ns, err); err != nil {
				return nil, err
			}
			continue
		}
		s.Namespaces = append(s.Namespaces, *obj)
	}

	podsRead := map[string]bool{}
	for _, ns := range podNamespaces {
		if podsRead[ns] {
			continue
		}
		podsRead[ns] = true
		list := &corev1.PodList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			if err := refused("Pod in "+ns, err); err != nil {
				return nil, err
			}
			continue
		}
		s.Pods = append(s.Pods, list.Items...)
	}
	if fromNS != "" && !podsRead[fromNS] {
		p := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: fromNS, Name: fromName}, p); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("--from %s: Pod not found", opts.From)
			}
			if err := refused("Pod "+opts.From, err); err != nil {
				return nil, err
			}
		} else {
			s.Pods = append(s.Pods, *p)
		}
	}
	for i := range s.Pods {
		// Only what the verdicts read is kept, so a saved snapshot holds no
		// environment values or other Pod details.
		s.Pods[i] = slimPod(&s.Pods[i])
	}
	return s, nil
}

func reason(err error) string {
	if apierrors.IsForbidden(err) {
		return "forbidden"
	}
	return "unauthorized"
}

// slimPod keeps what decides a Pod's access: identity, labels, mesh
// annotations, containers by name (the proxy), IP and phase.
func slimPod(p *corev1.Pod) corev1.Pod {
	out := corev1.Pod{}
	out.APIVersion, out.Kind = "v1", "Pod"
	out.Namespace, out.Name, out.Labels = p.Namespace, p.Name, p.Labels
	if v, ok := p.Annotations[labels.IstioAmbientRedirection]; ok {
		out.Annotations = map[string]string{labels.IstioAmbientRedirection: v}
	}
	out.DeletionTimestamp = p.DeletionTimestamp
	out.Spec.ServiceAccountName = p.Spec.ServiceAccountName
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Image: c.Image})
	}
	for _, c := range p.Spec.InitContainers {
		out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, Image: c.Image, RestartPolicy: c.RestartPolicy})
	}
	out.Status.Phase, out.Status.PodIP = p.Status.Phase, p.Status.PodIP
	return out
}
