package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/shared/contract"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/podmesh"
	istiopolicy "github.com/ericdev/fleetmesh/shared/policy"
)

// +kubebuilder:rbac:groups=security.istio.io,resources=authorizationpolicies;peerauthentications,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=celld.eric.dev,resources=celldfleets,verbs=patch

// observeMesh decides the fleet's mesh state from the proxies its Pods run.
func observeMesh(fleet *v1alpha1.CelldFleet, pods []corev1.Pod, sts *appsv1.StatefulSet, in mesh.Intent) mesh.State {
	o := mesh.Observation{Desired: in.Sidecar, WasMeshed: mesh.WasMeshed(fleet), Ambient: in.Ambient, Requested: in.StandsBy(), Strict: in.Strict,
		MayBeCaptured: in.MayBeCaptured(), Replicas: int(derefReplicas(fleet))}
	if sts != nil && sts.Status.ObservedGeneration >= sts.Generation {
		o.TargetRevision = sts.Status.UpdateRevision
	}
	o.Pods = meshPods(pods)
	return mesh.Decide(o)
}

// meshPods are the member Pods as the mesh decisions read them. What the
// proxy's environment says (its control plane) is fixed at the Pod's
// creation, so no update of it needs to wake the fleet (memberFacts).
func meshPods(pods []corev1.Pod) []mesh.Pod {
	out := make([]mesh.Pod, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		cps, known := podmesh.ProxyControlPlanes(p)
		out = append(out, mesh.Pod{
			Name: p.Name, Revision: p.Labels[revisionLabel],
			Proxy: podmesh.HasProxy(p), Terminating: p.DeletionTimestamp != nil, Captured: podmesh.Redirected(p),
			ControlPlanes: cps, ControlPlaneUnknown: !known,
		})
	}
	return out
}

// istiodNamespaces are the control planes the fleet's NetworkPolicy opens
// (mesh.IstiodNamespaces), given the ones its live policy opens now. A
// failed read of the live policy is returned, never taken for "none open".
func (r *FleetReconciler) istiodNamespaces(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) ([]string, error) {
	if !obs.mesh.IstiodEgress {
		return nil, nil
	}
	var open []string
	live := &networkingv1.NetworkPolicy{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: fleet.Namespace, Name: names.NetworkPolicy(fleet.Name)}, live)
	switch {
	case err == nil && metav1.IsControlledBy(live, fleet):
		open = network.OpenIstiodNamespaces(live)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading NetworkPolicy %s: %w", names.NetworkPolicy(fleet.Name), err)
	}
	return mesh.IstiodNamespaces(obs.mesh, mesh.ControlPlaneNamespace(fleet, obs.intent), open, meshPods(obs.pods)), nil
}

// meshChange is a change of the members' mesh membership.
type meshChange string

const (
	joiningMesh meshChange = "joining"
	leavingMesh meshChange = "leaving"
)

// heldMeshChange is the mesh change the maintenance pause holds back: the
// live member template asks for the sidecar and the spec no longer does
// (leaving), or the other way round (joining). Read from the template, not
// from the Pods: a member without its proxy on a held template is the
// pause's doing, not the injector's.
func heldMeshChange(fleet *v1alpha1.CelldFleet, live *appsv1.StatefulSet, in mesh.Intent) meshChange {
	if !fleet.Spec.Maintenance.Paused {
		return ""
	}
	return pendingMeshChange(fleet, live, in)
}

// pendingMeshChange is the mesh change the spec asks of the live member
// template: joining when the template the spec builds asks for the sidecar
// and the live one does not, leaving the other way round; "" when there is
// no live template yet or no such change.
func pendingMeshChange(fleet *v1alpha1.CelldFleet, live *appsv1.StatefulSet, in mesh.Intent) meshChange {
	if live == nil {
		return ""
	}
	wants := memberStatefulSet(fleet, in).Spec.Template.Labels[labels.IstioInject] == "true"
	runs := live.Spec.Template.Labels[labels.IstioInject] == "true"
	switch {
	case wants && !runs:
		return joiningMesh
	case runs && !wants:
		return leavingMesh
	}
	return ""
}

// istioServed reports whether the API server serves Istio's
// security.istio.io/v1 AuthorizationPolicy. The REST mapper discovers
// lazily, so an API installed later is found without a restart.
func (r *FleetReconciler) istioServed() (bool, error) {
	return r.served(mesh.AuthorizationPolicyKind)
}

// needsIstioAPI reports a mesh state in which an Istio object must exist or
// be written. A Left fleet needs none, and neither does a Leaving one once
// the API is gone: the API's removal took its objects with it, and the
// members roll out of the mesh without them.
func needsIstioAPI(st mesh.State) bool {
	switch st.Phase {
	case mesh.Joining, mesh.Meshed, mesh.Ambient:
		return true
	}
	return false
}

// istioAPIUnavailable is the blockage of a fleet that needs Istio's API
// where it is not served.
func istioAPIUnavailable(fleet *v1alpha1.CelldFleet) *blockage {
	fix := "set spec.mesh.mode: disabled (the namespace is enrolled in a mesh)"
	if fleet.Spec.Mesh != nil && fleet.Spec.Mesh.Istio != nil {
		fix = "remove spec.mesh.istio"
	}
	return &blockage{
		reason: v1alpha1.ReasonIstioAPIUnavailable,
		message: "The fleet's mesh settings (spec.mesh.istio, or a namespace enrolled in a mesh) need Istio's security.istio.io/v1 API " +
			"(AuthorizationPolicy, PeerAuthentication), which this cluster does not serve. Install Istio 1.22 or later, or " + fix +
			". Members are left as they are.",
	}
}

// recordOptIn keeps the control-plane namespace on the fleet. Its presence
// is what makes a fleet that later leaves the mesh opt its Pods out of
// injection explicitly, across reconciles and operator restarts. The patch
// goes through a copy: the API server's answer may carry a newer spec, and
// this reconcile must go on building from (and reporting) the spec it
// started with.
func (r *FleetReconciler) recordOptIn(ctx context.Context, fleet *v1alpha1.CelldFleet, in mesh.Intent) error {
	ns := mesh.ControlPlaneNamespace(fleet, in)
	if !in.Sidecar || fleet.Annotations[labels.IstioControlPlane] == ns {
		return nil
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, labels.IstioControlPlane, ns)
	if err := r.Client.Patch(ctx, fleet.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("recording the mesh opt-in on the fleet: %w", err)
	}
	if fleet.Annotations == nil {
		fleet.Annotations = map[string]string{}
	}
	fleet.Annotations[labels.IstioControlPlane] = ns
	return nil
}

// reconcileMeshPolicies applies or removes FLEET-mesh objects for the state.
// It runs before the member template changes, so the relaxed policies are in
// place before the first member rolls into or out of the mesh. What is
// removed is decided from the objects that exist, never from status. Both
// names are read from a cache of the operator's own Istio objects, which
// runs only while Istio's API is served (optionalCaches): an unchanged
// fleet costs no request; a miss is confirmed with the API server before
// anything is written.
func (r *FleetReconciler) reconcileMeshPolicies(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed, istio bool) error {
	if !istio {
		// Nothing of Istio's can exist, and a state that needs it blocked
		// the fleet before this step.
		return nil
	}
	st := obs.mesh
	ap := mesh.AuthorizationPolicy(fleet, r.meshParams(), obs.intent.Access, st.Relaxed, obs.wiring, obs.formerAccounts)
	if st.Phase == mesh.Ambient || st.Standby || st.Captured {
		ap = mesh.AmbientAuthorizationPolicy(fleet, r.meshParams(), obs.intent.Access, obs.wiring, obs.formerAccounts)
	}
	pa := mesh.PeerAuthentication(fleet)
	if st.Policies || st.Standby {
		if err := r.apply(ctx, fleet, ap); err != nil {
			return err
		}
	} else if err := r.deleteOwned(ctx, fleet, ap); err != nil {
		return err
	}
	if st.Relaxed {
		return r.apply(ctx, fleet, pa)
	}
	return r.deleteOwned(ctx, fleet, pa)
}

func (r *FleetReconciler) meshParams() mesh.Params {
	return mesh.Params{
		OperatorNamespace:      r.Config.OperatorNamespace,
		OperatorServiceAccount: r.Config.OperatorServiceAccount,
		TrustDomain:            r.Config.IstioTrustDomain,
	}
}

// deleteOwned deletes the fleet's object named like desired if it exists
// (read as removeOwned reads it) and the fleet controls it.
func (r *FleetReconciler) deleteOwned(ctx context.Context, fleet *v1alpha1.CelldFleet, desired *unstructured.Unstructured) error {
	live, err := r.Applier.Observed(ctx, desired.GroupVersionKind(), client.ObjectKeyFromObject(desired))
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil // nothing there, or the API itself is gone
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(live, fleet) || live.GetDeletionTimestamp() != nil {
		return nil // someone else's object, or on its way out
	}
	uid := live.GetUID()
	err = r.Client.Delete(ctx, live, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting %s %s: %w", desired.GetKind(), desired.GetName(), err)
	}
	r.Recorder.Eventf(fleet, nil, corev1.EventTypeNormal, string(v1alpha1.EventMeshPolicyDeleted), "Delete", "Deleted %s %s", desired.GetKind(), desired.GetName())
	return nil
}

// formerAccounts are mesh.FormerAccounts of the member Pods and the live
// StatefulSet (nil: none yet).
func formerAccounts(fleet *v1alpha1.CelldFleet, pods []corev1.Pod, live *appsv1.StatefulSet) []string {
	podAccounts := make([]string, 0, len(pods))
	for i := range pods {
		podAccounts = append(podAccounts, pods[i].Spec.ServiceAccountName)
	}
	var template *string
	if live != nil {
		template = &live.Spec.Template.Spec.ServiceAccountName
	}
	return mesh.FormerAccounts(fleet, podAccounts, template)
}

// sharingServiceAccount lists the Pods of the fleet's namespace, other than
// its members, that run as the fleet's ServiceAccount. Only an ambient fleet
// with AllowAll asks (its policy refuses that identity on 8080): one
// uncached list, filtered by the API server.
func (r *FleetReconciler) sharingServiceAccount(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) ([]string, error) {
	if obs.mesh.Phase != mesh.Ambient || obs.intent.Access == v1alpha1.Policies {
		return nil, nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	sa := members.ServiceAccountName(fleet)
	if err := r.Client.List(ctx, list, client.InNamespace(fleet.Namespace),
		client.MatchingFields{"spec.serviceAccountName": sa}); err != nil {
		return nil, fmt.Errorf("listing Pods that run as ServiceAccount %s: %w", sa, err)
	}
	var out []string
	for _, p := range list.Items {
		l := p.GetLabels()
		if l[labels.Name] == names.Runtime && l[labels.Instance] == fleet.Name {
			continue
		}
		out = append(out, p.GetName())
	}
	sort.Strings(out)
	return out, nil
}

// ambient reports a fleet captured by an ambient mesh.
func ambient(obs *observed) bool { return obs.mesh.Phase == mesh.Ambient }

// hboneOpen: the fleet's NetworkPolicies admit HBONE (15008) from the
// sources they admit while a member is captured, and beforehand while the
// fleet stands by for an enrollment in effect in its namespace
// (mesh.Intent.StandsBy): istio-cni captures members the moment the
// namespace turns ambient, before this operator can react, and a captured
// member behind a NetworkPolicy without 15008 is cut off (found by the
// transition explorer). Without an enrollment in effect and with no member
// captured, nothing can use the port, and it stays closed.
func hboneOpen(obs *observed) bool {
	return ambient(obs) || obs.mesh.Captured || obs.intent.StandsBy()
}

// strictInForce reports isolation strict in force in the fleet's namespace
// for a fleet with policies: the mesh operator says the namespace is
// enrolled with isolation strict and STRICT mTLS. At PERMISSIVE (the
// cutover, a maintenance window, a data-plane migration) a principal rule
// would drop plaintext callers that are still allowed, so the fleet keeps
// the namespace-wide 8080 rule then, as the mesh operator withholds its
// allow-nothing baseline.
func strictInForce(obs *observed) bool {
	st := obs.namespace.state
	return obs.mesh.Policies && obs.intent.Access != v1alpha1.Policies &&
		st.Enrolled && st.Isolation == contract.IsolationStrict && st.MTLS == contract.MTLSStrict
}

// resolveWiring resolves the fleet's wiring graph into identities under
// isolation strict: the ServiceAccounts of the live Pods labelled
// celld.eric.dev/client-of: FLEET in its namespace and of the Pods its
// routing source selects. The Pods are listed uncached (the cache holds
// member Pods only), filtered by the API server; this runs on every
// reconcile of a strict fleet, and the Applier writes FLEET-mesh only when
// the identities changed. The names come from Pods' specs but only ever
// become principals of the Pods' own namespaces, so a Pod can admit no
// identity but its own.
func (r *FleetReconciler) resolveWiring(ctx context.Context, fleet *v1alpha1.CelldFleet, obs *observed) (mesh.Wiring, error) {
	if !strictInForce(obs) {
		return mesh.Wiring{}, nil
	}
	w := mesh.Wiring{Strict: true}
	add := func(namespace string, selector map[string]string) error {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := r.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(selector)); err != nil {
			return fmt.Errorf("listing Pods in %s selected by %v: %w", namespace, selector, err)
		}
		for _, p := range list.Items {
			if p.GetDeletionTimestamp() != nil {
				continue
			}
			if phase, _, _ := unstructured.NestedString(p.Object, "status", "phase"); phase == string(corev1.PodSucceeded) || phase == string(corev1.PodFailed) {
				continue
			}
			sa, _, _ := unstructured.NestedString(p.Object, "spec", "serviceAccountName")
			if sa == "" {
				sa = "default"
			}
			w.Callers = append(w.Callers, istiopolicy.Principal(r.Config.IstioTrustDomain, namespace, sa))
		}
		return nil
	}
	if err := add(fleet.Namespace, map[string]string{labels.ClientOf: fleet.Name}); err != nil {
		return mesh.Wiring{}, err
	}
	var unreadable error
	if rt := fleet.Spec.Routing; rt != nil {
		sel := map[string]string{}
		for k, v := range rt.Source.PodLabels {
			sel[k] = string(v)
		}
		if err := add(rt.Source.Namespace, sel); err != nil {
			held, herr := r.heldSourceCallers(ctx, fleet, rt.Source.Namespace, err)
			if herr != nil {
				return mesh.Wiring{}, herr
			}
			w.Callers = append(w.Callers, held...)
			unreadable = &unreadableSource{namespace: rt.Source.Namespace, err: err}
		}
	}
	sort.Strings(w.Callers)
	w.Callers = slices.Compact(w.Callers)
	return w, unreadable
}
