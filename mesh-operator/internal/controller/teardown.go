package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sail"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// What the teardown deletes besides the Sail resources it owns: the
// namespaces it created and the CRDs the Sail install created. Both hold
// other people's objects once they exist (a tenant's plug-in CA in
// istio-system, every PeerAuthentication in the cluster), so each is
// deleted only when what exists shows that nothing but the operator's (and
// Kubernetes' own bookkeeping) would go with it. The decisions are pure
// functions of what was listed; a list that failed leaves the thing in
// place (unknown is not empty), reported.

// foundObject is an object the teardown found where it is about to delete.
type foundObject struct {
	Group, Kind     string
	Namespace, Name string
	UID             types.UID
	Owners          []metav1.OwnerReference
	Terminating     bool
}

func (o foundObject) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

func foundObjectOf(gvk schema.GroupVersionKind, m *metav1.PartialObjectMetadata) foundObject {
	return foundObject{Group: gvk.Group, Kind: gvk.Kind, Namespace: m.Namespace, Name: m.Name, UID: m.UID,
		Owners: m.OwnerReferences, Terminating: m.DeletionTimestamp != nil}
}

// ownedByMesh: the ServiceMesh (its UID) is among the object's owners.
func ownedByMesh(o foundObject, mesh types.UID) bool {
	for _, ref := range o.Owners {
		if ref.UID == mesh {
			return true
		}
	}
	return false
}

// kubernetesBookkeeping: objects Kubernetes itself keeps in a namespace,
// which hold nothing of anyone's: the default ServiceAccount and the
// kube-root-ca.crt ConfigMap (created in every namespace), Events (records
// about other objects that expire on their own), Leases (leader-election
// records their holders renew and recreate) and the metrics APIs
// (metricsGroup).
func kubernetesBookkeeping(o foundObject) bool {
	switch {
	case o.Group == "" && o.Kind == "ServiceAccount" && o.Name == "default",
		o.Group == "" && o.Kind == "ConfigMap" && o.Name == "kube-root-ca.crt",
		o.Kind == "Event" && (o.Group == "" || o.Group == "events.k8s.io"),
		o.Kind == "Lease" && o.Group == "coordination.k8s.io",
		metricsGroup(o.Group):
		return true
	}
	return false
}

// metricsGroup: the metrics APIs serve views (of Pods, of monitoring
// data), not objects anyone stores. Their discovery failing (a metrics
// adapter down) says nothing about what a namespace holds.
func metricsGroup(group string) bool {
	return group == "metrics.k8s.io" || group == "custom.metrics.k8s.io" || group == "external.metrics.k8s.io"
}

// othersInNamespace are the objects of a namespace the operator created
// that someone else put there, as "Kind name" (sorted): what deleting the
// namespace would take from them. Not counted: what is being deleted
// anyway, Kubernetes' bookkeeping, objects the ServiceMesh owns, Endpoints
// of a Service found there (the Service is judged), and dependents of an
// object found there (their owner is judged: its garbage collection takes
// them anyway). A dependent of anything else (cluster-scoped, or in
// another namespace) is someone else's.
func othersInNamespace(mesh types.UID, objs []foundObject) []string {
	here := map[types.UID]bool{}
	services := map[string]bool{}
	for _, o := range objs {
		here[o.UID] = true
		if o.Group == "" && o.Kind == "Service" {
			services[o.Name] = true
		}
	}
	var out []string
	for _, o := range objs {
		if o.Terminating || kubernetesBookkeeping(o) || ownedByMesh(o, mesh) ||
			(o.Group == "" && o.Kind == "Endpoints" && services[o.Name]) {
			continue
		}
		judgedThroughOwner := false
		for _, ref := range o.Owners {
			judgedThroughOwner = judgedThroughOwner || here[ref.UID]
		}
		if judgedThroughOwner {
			continue
		}
		out = append(out, o.Kind+" "+o.Name)
	}
	sort.Strings(out)
	return out
}

// namespaceOutcome is what the teardown did with one namespace it created.
type namespaceOutcome struct {
	Name    string
	Deleted bool
	// Others are objects someone else put there; Unread the lists that
	// failed (what they would have found is unknown).
	Others, Unread []string
}

// decideNamespace: a namespace the operator created is deleted only when
// every list succeeded and found nothing of anyone else's.
func decideNamespace(name string, mesh types.UID, objs []foundObject, unread []string) namespaceOutcome {
	out := namespaceOutcome{Name: name, Others: othersInNamespace(mesh, objs), Unread: unread}
	out.Deleted = len(out.Others) == 0 && len(out.Unread) == 0
	return out
}

func (o namespaceOutcome) why() string {
	var parts []string
	if len(o.Others) > 0 {
		parts = append(parts, "it holds objects the operator did not put there: "+listed(o.Others))
	}
	if len(o.Unread) > 0 {
		parts = append(parts, fmt.Sprintf("what it holds could not be read entirely (%s)", strings.Join(o.Unread, "; ")))
	}
	return strings.Join(parts, ", and ")
}

// namespaceTeardownCondition is the NamespaceTeardown condition for what
// became of the namespaces the operator created; ok is false when it
// created none (nothing to report).
func namespaceTeardownCondition(outcomes []namespaceOutcome) (reason v1alpha1.ConditionReason, msg string, ok bool) {
	if len(outcomes) == 0 {
		return "", "", false
	}
	var deleted, kept []string
	for _, o := range outcomes {
		if o.Deleted {
			deleted = append(deleted, o.Name)
		} else {
			kept = append(kept, fmt.Sprintf("%s: %s", o.Name, o.why()))
		}
	}
	if len(kept) == 0 {
		return v1alpha1.ReasonNamespacesRemoved, fmt.Sprintf("Deleted the namespaces the operator created (%s), which held nothing else.", strings.Join(deleted, ", ")), true
	}
	msg = fmt.Sprintf("Kept namespaces the operator created, deleting only what it made: %s. Delete them yourself once what is named there is no longer needed.", strings.Join(kept, "; "))
	if len(deleted) > 0 {
		msg += fmt.Sprintf(" Deleted %s, which held nothing else.", strings.Join(deleted, ", "))
	}
	return v1alpha1.ReasonNamespacesKept, msg, true
}

// namespaceContents lists everything in namespace ns, by every namespaced
// resource type discovery serves with the list verb (metadata only).
// unread names what could not be listed: a failed list, or a group whose
// discovery failed.
func (r *ServiceMeshReconciler) namespaceContents(ctx context.Context, ns string) (objs []foundObject, unread []string, err error) {
	apis, err := r.Served.Snapshot()
	if err != nil {
		return nil, nil, err
	}
	resources, failed := apis.NamespacedListable()
	for _, gv := range failed {
		if !metricsGroup(gv.Group) {
			unread = append(unread, fmt.Sprintf("discovery of %s failed", gv))
		}
	}
	for _, res := range resources {
		if metricsGroup(res.GroupVersion.Group) {
			continue
		}
		gvk := res.GroupVersion.WithKind(res.Kind)
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(res.GroupVersion.WithKind(res.Kind + "List"))
		if err := r.Reader.List(ctx, list, client.InNamespace(ns)); err != nil {
			if r.Served.Gone(gvk, err) {
				// The kind is no longer served (its CRD was just deleted,
				// discovery lags): nothing of it can be in the namespace.
				continue
			}
			unread = append(unread, fmt.Sprintf("listing %s: %v", schema.GroupResource{Group: res.GroupVersion.Group, Resource: res.Resource}, err))
			continue
		}
		for i := range list.Items {
			objs = append(objs, foundObjectOf(gvk, &list.Items[i]))
		}
	}
	return objs, unread, nil
}

// teardownNamespace deletes namespace name if this ServiceMesh created it
// (mine decides that from the namespace) and decideNamespace allows it. It
// returns nil when there was nothing of ours to decide about (absent, not
// ours, already being deleted). A kept namespace gets a Warning event.
func (r *ServiceMeshReconciler) teardownNamespace(ctx context.Context, mesh *v1alpha1.ServiceMesh, name string, mine func(*corev1.Namespace) bool) (*namespaceOutcome, error) {
	ns := &corev1.Namespace{}
	err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, ns)
	if apierrors.IsNotFound(err) || (err == nil && (!mine(ns) || ns.DeletionTimestamp != nil)) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var objs []foundObject
	var unread []string
	grant, err := r.grantListing(ctx, mesh, name)
	switch {
	case errors.Is(err, errNoGrant):
		unread = []string{err.Error()}
	case err != nil:
		return nil, err
	default:
		objs, unread, err = r.namespaceContents(ctx, name)
		if err != nil {
			return nil, errors.Join(err, r.revokeListing(ctx, grant))
		}
	}
	out := decideNamespace(name, mesh.UID, objs, unread)
	if !out.Deleted {
		if err := r.revokeListing(ctx, grant); err != nil {
			return nil, err
		}
		r.Recorder.Eventf(mesh, nil, corev1.EventTypeWarning, string(v1alpha1.ReasonNamespacesKept), "Delete",
			"Kept namespace %s, which the operator created: %s.", name, out.why())
		return &out, nil
	}
	// The grant goes with the namespace.
	uid := ns.UID
	if err := client.IgnoreNotFound(r.Client.Delete(ctx, ns, client.Preconditions{UID: &uid})); err != nil {
		return nil, err
	}
	return &out, nil
}

// errNoGrant: the operator cannot grant itself the right to list
// everything in a namespace, so what is there stays unknown.
var errNoGrant = errors.New("the operator may not list every kind of object in it")

// listingGrant is the Role and RoleBinding by which the operator may list
// every kind in one namespace for the teardown's look at it.
type listingGrant struct{ role, binding client.Object }

// grantListing lets the operator list every kind of object in namespace ns:
// a Role granting list on everything there, bound to the operator's own
// identity, both owned by the ServiceMesh (so they do not count as someone
// else's, and the garbage collector removes any left behind). No
// ClusterRole of the operator holds that right; creating the Role takes
// the installer's escalate and bind on Roles, so with sail.install=false
// it is errNoGrant. generateName keeps the names clear of anyone's object.
// It returns once the grant is in force. (Asking who it is and what it may
// do, SelfSubjectReview and SelfSubjectAccessReview, is every
// authenticated user's right: Kubernetes' system:basic-user.)
func (r *ServiceMeshReconciler) grantListing(ctx context.Context, mesh *v1alpha1.ServiceMesh, ns string) (*listingGrant, error) {
	if !r.Config.SailInstall {
		return nil, fmt.Errorf("%w (with sail.install=false it holds no right to grant itself that)", errNoGrant)
	}
	review := &authenticationv1.SelfSubjectReview{}
	if err := r.Client.Create(ctx, review); err != nil {
		return nil, fmt.Errorf("asking the API server who the operator is: %w", err)
	}
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(mesh, v1alpha1.GroupVersion.WithKind("ServiceMesh"))}
	objMeta := metav1.ObjectMeta{Namespace: ns, GenerateName: "mesh-operator-teardown-", OwnerReferences: owner,
		Labels: map[string]string{labels.ManagedBy: sail.ManagedBy}}
	role := &rbacv1.Role{ObjectMeta: objMeta, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"list"}}}}
	if err := r.Client.Create(ctx, role); err != nil {
		if apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("%w: %v", errNoGrant, err)
		}
		return nil, fmt.Errorf("creating the Role that lets the operator list %s: %w", ns, err)
	}
	grant := &listingGrant{role: role}
	binding := &rbacv1.RoleBinding{ObjectMeta: objMeta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: review.Status.UserInfo.Username}}}
	if err := r.Client.Create(ctx, binding); err != nil {
		return nil, errors.Join(fmt.Errorf("binding the Role that lets the operator list %s: %w", ns, err), r.revokeListing(ctx, grant))
	}
	grant.binding = binding
	// The authorizer learns of a new binding a moment later.
	deadline := time.Now().Add(grantPropagation) // wall time: the API server's, not the reconcile clock
	for {
		sar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Group: "*", Resource: "*"}}}
		if err := r.Client.Create(ctx, sar); err != nil {
			return nil, errors.Join(fmt.Errorf("checking the operator's grant to list %s: %w", ns, err), r.revokeListing(ctx, grant))
		}
		if sar.Status.Allowed {
			return grant, nil
		}
		if !time.Now().Before(deadline) {
			return nil, errors.Join(fmt.Errorf("the operator's grant to list %s is not in force yet; retrying", ns), r.revokeListing(ctx, grant))
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), r.revokeListing(ctx, grant))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// grantPropagation bounds the wait for a new RoleBinding to be in force.
const grantPropagation = 5 * time.Second

// revokeListing deletes what grantListing created (nil is nothing).
func (r *ServiceMeshReconciler) revokeListing(ctx context.Context, g *listingGrant) error {
	if g == nil {
		return nil
	}
	var errs []error
	for _, obj := range []client.Object{g.binding, g.role} {
		if obj != nil {
			errs = append(errs, client.IgnoreNotFound(r.Client.Delete(ctx, obj)))
		}
	}
	return errors.Join(errs...)
}

// controlledByMesh: the namespaces created for the control plane carry the
// ServiceMesh as their controller.
func controlledByMesh(mesh *v1alpha1.ServiceMesh) func(*corev1.Namespace) bool {
	return func(ns *corev1.Namespace) bool { return metav1.IsControlledBy(ns, mesh) }
}

// createdForSail: the Sail namespace created by the install carries the
// managed-by label (setting a namespace's labels takes cluster-wide rights).
func createdForSail(ns *corev1.Namespace) bool { return ns.Labels[labels.ManagedBy] == sail.ManagedBy }

// crdUse is what keeps a CRD the install created from being deleted.
type crdUse struct {
	Name string
	// Others are the objects of the CRD the operator did not create.
	Others []string
	// Unread says why its objects could not be listed ("" when they were).
	Unread string
}

// decideCRDs splits the CRDs the install created (and the record may
// vouch for) into those to delete and those to keep, with why for each
// kept one. Deleting a CRD deletes every object of it, so one is deleted
// only when its objects were listed and none is someone else's, and, for
// Istio's own API groups (*.istio.io), when no Istio control plane the
// operator did not install runs (controlPlanes, e.g. an istiod installed
// with istioctl or Helm and adopted): it serves those kinds and would lose
// its configuration API. controlPlanesUnread says why the control planes
// could not be listed ("" when they were): then no Istio CRD is deleted.
func decideCRDs(uses []crdUse, controlPlanes []string, controlPlanesUnread string) (remove []string, kept map[string]string) {
	kept = map[string]string{}
	for _, u := range uses {
		var why []string
		if u.Unread != "" {
			why = append(why, "its objects could not be listed: "+u.Unread)
		}
		if len(u.Others) > 0 {
			why = append(why, fmt.Sprintf("objects of it that the operator did not create exist (%s)", listed(u.Others)))
		}
		if _, group, _ := strings.Cut(u.Name, "."); group != sailinstall.GroupSail {
			if controlPlanesUnread != "" {
				why = append(why, "the Istio control planes could not be listed: "+controlPlanesUnread)
			}
			if len(controlPlanes) > 0 {
				why = append(why, fmt.Sprintf("an Istio control plane the operator did not install runs (%s)", listed(controlPlanes)))
			}
		}
		if len(why) > 0 {
			kept[u.Name] = strings.Join(why, "; ")
			continue
		}
		remove = append(remove, u.Name)
	}
	sort.Strings(remove)
	return remove, kept
}

// keptCRDsMessage describes the kept CRDs of decideCRDs, sorted by name.
func keptCRDsMessage(kept map[string]string) string {
	names := make([]string, 0, len(kept))
	for n := range kept {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+": "+kept[n])
	}
	return fmt.Sprintf("Kept CRDs the install created, since deleting a CRD deletes every object of it: %s. Delete them yourself once nothing uses them.", strings.Join(parts, "; "))
}

// crdUseOf lists the objects of CRD name (metadata only) and names those
// the operator did not create: not owned by the ServiceMesh, and not
// being deleted. The Sail CRs it owned are gone by now (the teardown
// waited for them) and its policies left with the namespaces.
func (r *ServiceMeshReconciler) crdUseOf(ctx context.Context, mesh *v1alpha1.ServiceMesh, name string) (crdUse, error) {
	use := crdUse{Name: name}
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := r.Reader.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
		if apierrors.IsNotFound(err) {
			return use, nil
		}
		return use, fmt.Errorf("reading CRD %s: %w", name, err)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	version := ""
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if served, _ := vm["served"].(bool); served && version == "" {
			version, _ = vm["name"].(string)
		}
	}
	if version == "" || kind == "" {
		return use, nil // nothing served: no object can be read or lost through it
	}
	gvk := schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(kind + "List"))
	if err := r.Reader.List(ctx, list); err != nil {
		use.Unread = err.Error()
		return use, nil
	}
	for i := range list.Items {
		o := foundObjectOf(gvk, &list.Items[i])
		if !o.Terminating && !ownedByMesh(o, mesh.UID) {
			use.Others = append(use.Others, o.String())
		}
	}
	sort.Strings(use.Others)
	return use, nil
}

// foreignControlPlanes lists the istiod Deployments (label app=istiod)
// that no Sail resource controls, as "Deployment namespace/name": a
// control plane the operator did not install (istioctl, Helm). The Sail
// Operator's own are judged through their Sail resources. Anyone who may
// create a Deployment can add one; it can only keep CRDs, never have one
// deleted.
func (r *ServiceMeshReconciler) foreignControlPlanes(ctx context.Context) ([]string, error) {
	deps := &metav1.PartialObjectMetadataList{}
	deps.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DeploymentList"})
	if err := r.Reader.List(ctx, deps, client.MatchingLabels{labels.IstiodApp: istiodAppValue}); err != nil {
		return nil, err
	}
	var out []string
	for i := range deps.Items {
		d := &deps.Items[i]
		if ref := metav1.GetControllerOf(d); d.DeletionTimestamp != nil || (ref != nil && strings.HasPrefix(ref.APIVersion, sailinstall.GroupSail+"/")) {
			continue
		}
		out = append(out, "Deployment "+d.Namespace+"/"+d.Name)
	}
	sort.Strings(out)
	return out, nil
}
