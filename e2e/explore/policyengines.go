package explore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/harness"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	meshv1 "github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// Policy engines, tenants and admins of issue 43 (section 2):
//
//   - policy.nslabels on/off: a ValidatingAdmissionPolicy that refuses any
//     change of the labels of the world's app and edge namespaces made by
//     either operator (a platform that keeps namespace labels to its own
//     team). Admins (system:masters) still write them.
//   - policy.sts on/off: a ValidatingAdmissionPolicy that refuses, in the
//     app namespace, every StatefulSet without the label policyLabel (which
//     no fleet's StatefulSet carries): creates and updates are refused.
//   - policy.pss restricted/off: the admin's
//     pod-security.kubernetes.io/enforce=restricted on the app namespace
//     (server-side apply, field manager explore-admin, like admin.optout);
//     Pod Security admission judges every Pod the StatefulSet controller
//     creates there, kwok or not.
//   - tenant.netpol on/off: the tenant (explore-tenant, edit rights in the
//     world's other namespace only) creates its own NetworkPolicy there
//     that selects every Pod and admits every port but HBONE (15008), in
//     and out.
//   - tenant.snippet on/off: the app namespace's editor (explore-app-editor,
//     the built-in edit ClusterRole bound in the app namespace only: the
//     fleet's author) puts ingress-nginx's configuration-snippet on the
//     fleet's Ingress with its own rights (merge patch, field manager
//     explore-app-editor); off removes it. Without an Ingress it does
//     nothing.
//   - admin.serviceaccount custom/default: the admin creates the
//     ServiceAccount adminServiceAccount in the app namespace (once) and sets
//     it as the fleet's spec.serviceAccountName; default removes the field.
//
// What the admin or a tenant set is judged to stand (checkAdversaries): an
// object they created is neither deleted nor changed (its spec, labels,
// annotations and owner references), an annotation they put on an object
// reads as they set it while that object (same UID) exists, and the admin's
// namespace labels are the opt-out spans of checkTenants. While a policy
// refuses, nothing destructive happens (a fleet's StatefulSet is not
// deleted under policy.sts; nothing is released under policy.nslabels, the
// holds of releasedWhileHeld) and, at rest, the affected fleet's status
// says so (policiesAtRest).
const (
	policyNSLabels = "explore-namespace-labels"
	policySTS      = "explore-statefulset-label"
	// policyLabel is the label policy.sts asks every StatefulSet to carry.
	policyLabel = "explore.fleetmesh.dev/approved"
	// tenantNetpol is the tenant's NetworkPolicy in its own namespace.
	tenantNetpol = "tenant-no-hbone"
	// appEditor edits the app namespace (and nothing else).
	appEditor           = "explore-app-editor"
	adminServiceAccount = "explore-members"
	snippetValue        = `more_set_headers "X-Explore: snippet";`
	// nslabelsHold is the hold (releasedWhileHeld) while policy.nslabels
	// refuses the operators' namespace label writes; policyReread bounds how
	// long after the policy goes the operators may still act on a refusal.
	nslabelsHold = "the namespace label policy refuses the operators' label writes"
	policyReread = 5 * time.Second
)

var (
	gvrIngresses       = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}
	gvrStatefulSets    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	gvrServiceAccounts = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
)

// The recorder also follows what the adversaries' invariants judge.
func init() {
	watched = append(watched, gvrIngresses, gvrStatefulSets, gvrServiceAccounts)
}

// Operator identities as the bed runs them (harness.Process: a token of
// each chart's ServiceAccount).
var operatorUsers = []string{
	"system:serviceaccount:" + harness.FleetNamespace + ":fleet-operator",
	"system:serviceaccount:" + harness.MeshNamespace + ":mesh-operator",
}

// policyMessage is what each policy answers; the fleet's status must
// quote it (policiesAtRest looks for the policy's name).
func policyMessage(name string) string {
	return "the platform's policy engine refuses this (" + name + ")"
}

// standing is something an admin or a tenant set: an object it created
// (key ""), or an annotation key=value it put on an object (bound to the
// object's UID: the object going with its owner ends it). It stands from
// the resourceVersion of the write that set it until the one of the write
// that took it away (0: to the end of the sequence).
type standing struct {
	who             string
	gvr             schema.GroupVersionResource
	namespace, name string
	uid             types.UID
	key, value      string
	// fingerprint of an object as created (fingerprint).
	fingerprint string
	from, until int64
}

func (o standing) stands(rv int64) bool {
	return rv >= o.from && (o.until == 0 || rv < o.until)
}

func (o standing) String() string {
	if o.key != "" {
		return fmt.Sprintf("%s's %s=%q on %s %s/%s", o.who, o.key, o.value, o.gvr.Resource, o.namespace, o.name)
	}
	return fmt.Sprintf("%s's %s %s/%s", o.who, o.gvr.Resource, o.namespace, o.name)
}

// fingerprint is what of an object its author decides: spec, labels,
// annotations, owner references.
func fingerprint(u *unstructured.Unstructured) string {
	b, _ := json.Marshal([]any{u.Object["spec"], u.GetLabels(), u.GetAnnotations(), u.GetOwnerReferences()})
	return string(b)
}

// adversaries is what the runner knows of the sequence's policies and of
// what admins and tenants set.
type adversaries struct {
	mu       sync.Mutex
	standing []standing
	// inForce: the policies (PolicyNSLabels, PolicySTS, PolicyPSS) in force now.
	inForce map[string]bool
	// stsSpans: when policy.sts refused StatefulSets (until zero: still).
	stsSpans []span
	// editorIn: the namespace explore-app-editor was last granted.
	editorIn string
}

type span struct{ from, until time.Time }

func (s span) covers(t time.Time) bool {
	return !t.Before(s.from) && (s.until.IsZero() || !t.After(s.until))
}

// advRecord is what the judge gets of the runner's adversaries.
type advRecord struct {
	standing []standing
	inForce  map[string]bool
	stsSpans []span
}

func (a *adversaries) take() advRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := advRecord{standing: a.standing, inForce: maps.Clone(a.inForce), stsSpans: a.stsSpans}
	a.standing, a.stsSpans = nil, nil
	return out
}

func (a *adversaries) add(s standing) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.standing = append(a.standing, s)
}

// end ends the open spans of what matches at rv.
func (a *adversaries) end(gvr schema.GroupVersionResource, namespace, name, key string, rv int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, s := range a.standing {
		if s.gvr == gvr && s.namespace == namespace && s.name == name && s.key == key && s.until == 0 {
			a.standing[i].until = rv
		}
	}
}

func (a *adversaries) setInForce(policy string, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inForce == nil {
		a.inForce = map[string]bool{}
	}
	a.inForce[policy] = on
	if policy == PolicySTS {
		n := len(a.stsSpans)
		switch {
		case on && (n == 0 || !a.stsSpans[n-1].until.IsZero()):
			a.stsSpans = append(a.stsSpans, span{from: time.Now()})
		case !on && n > 0 && a.stsSpans[n-1].until.IsZero():
			a.stsSpans[n-1].until = time.Now().Add(policyReread)
		}
	}
}

// playAdversary carries out the actions of this file.
func (r *Runner) playAdversary(ctx context.Context, w world, a Action, fleetExists bool) error {
	switch a.Kind {
	case PolicyNSLabels:
		return r.setPolicy(ctx, w, PolicyNSLabels, a.Arg == "on")
	case PolicySTS:
		return r.setPolicy(ctx, w, PolicySTS, a.Arg == "on")
	case PolicyPSS:
		value := ""
		if a.Arg == "restricted" {
			value = "restricted"
		}
		if err := r.adminLabel(ctx, w, labels.PodSecurityEnforce, value); err != nil {
			return err
		}
		r.adv.setInForce(PolicyPSS, value != "")
		return nil
	case TenantNetpol:
		return r.tenantNetpol(ctx, w, a.Arg == "on")
	case TenantSnippet:
		return r.tenantSnippet(ctx, w, a.Fleet, a.Arg == "on")
	case AdminServiceAccount:
		if !fleetExists {
			return nil
		}
		return r.adminServiceAccount(ctx, w, a.Fleet, a.Arg == "custom")
	}
	return fmt.Errorf("unknown action %q", a.Kind)
}

// asUser is a dynamic client that acts as user (in groups).
func (r *Runner) asUser(user string, groups ...string) (dynamic.Interface, client.Client, error) {
	cfg := rest.CopyConfig(r.Bed.Cluster.REST)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: r.K8s.Scheme()})
	return dyn, c, err
}

// policyObjects are the ValidatingAdmissionPolicy and its binding for one
// of the policies, bound to the world's namespaces.
func policyObjects(w world, which string) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	rule := func(group, resource string, ops ...admissionregistrationv1.OperationType) *admissionregistrationv1.MatchResources {
		return &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: ops,
				Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}}},
		}}}
	}
	var name string
	var spec admissionregistrationv1.ValidatingAdmissionPolicySpec
	var namespaces []string
	switch which {
	case PolicyNSLabels:
		name, namespaces = policyNSLabels, []string{w.app, w.edge}
		quoted := make([]string, len(operatorUsers))
		for i, u := range operatorUsers {
			quoted[i] = strconv.Quote(u)
		}
		labelsOf := func(o string) string {
			return "(has(" + o + ".metadata.labels) ? " + o + ".metadata.labels : {'': ''})"
		}
		spec = admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: rule("", "namespaces", admissionregistrationv1.Update),
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "operators",
				Expression: "request.userInfo.username in [" + strings.Join(quoted, ", ") + "]"}},
			Validations: []admissionregistrationv1.Validation{{Expression: labelsOf("object") + " == " + labelsOf("oldObject"), Message: policyMessage(name)}},
		}
	case PolicySTS:
		name, namespaces = policySTS, []string{w.app}
		spec = admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: rule("apps", "statefulsets", admissionregistrationv1.Create, admissionregistrationv1.Update),
			Validations: []admissionregistrationv1.Validation{{
				Expression: "has(object.metadata.labels) && " + strconv.Quote(policyLabel) + " in object.metadata.labels", Message: policyMessage(name)}},
		}
	}
	spec.FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: labels.NamespaceName, Operator: metav1.LabelSelectorOpIn, Values: namespaces}}}}}}
	return vap, binding
}

// setPolicy installs (on) or removes the policy and returns once the API
// server answers accordingly (a dry run as the policy's target).
func (r *Runner) setPolicy(ctx context.Context, w world, which string, on bool) error {
	vap, binding := policyObjects(w, which)
	if on {
		for _, o := range []client.Object{vap, binding} {
			if err := r.K8s.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
				return fmt.Errorf("installing %s: %w", vap.Name, err)
			}
		}
		if which == PolicyNSLabels {
			r.env.openHold(nslabelsHold)
		}
	} else {
		for _, o := range []client.Object{binding, vap} {
			if err := r.K8s.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("removing %s: %w", vap.Name, err)
			}
		}
	}
	if err := r.waitForPolicy(ctx, w, which, on); err != nil {
		return err
	}
	r.adv.setInForce(which, on)
	if !on && which == PolicyNSLabels {
		r.env.closeHold(nslabelsHold, policyReread)
	}
	return nil
}

// waitForPolicy probes with a dry run until the API server refuses (on)
// or admits (off) what the policy is about.
func (r *Runner) waitForPolicy(ctx context.Context, w world, which string, on bool) error {
	_, asOperator, err := r.asUser(operatorUsers[0], "system:masters")
	if err != nil {
		return err
	}
	probe := func() error {
		switch which {
		case PolicyNSLabels:
			return asOperator.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.app}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"explore-probe":"x"}}}`)), client.DryRunAll)
		default:
			sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: w.app, Name: "explore-probe"},
				Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "registry.example/probe:1"}}}}}}
			return asOperator.Create(ctx, sts, client.DryRunAll)
		}
	}
	return waitUntil(ctx, 30*time.Second, func() (bool, string) {
		err := probe()
		if on {
			return err != nil && (apierrors.IsInvalid(err) || apierrors.IsForbidden(err)), fmt.Sprintf("%s not enforced yet: %v", which, err)
		}
		return err == nil, fmt.Sprintf("%s still enforced: %v", which, err)
	})
}

// removePolicies takes away what an earlier sequence installed (reset).
func (r *Runner) removePolicies(ctx context.Context) error {
	for _, which := range []string{PolicyNSLabels, PolicySTS} {
		vap, binding := policyObjects(world{}, which)
		for _, o := range []client.Object{binding, vap} {
			if err := r.K8s.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	r.adv.mu.Lock()
	r.adv.inForce, r.adv.editorIn = nil, ""
	r.adv.mu.Unlock()
	return nil
}

// adminLabel sets (value "": removes) one label of the admin's on the app
// namespace, with the admin's other labels, as adminOptOut does.
func (r *Runner) adminLabel(ctx context.Context, w world, key, value string) error {
	r.env.mu.Lock()
	want := maps.Clone(r.env.adminLabels)
	r.env.mu.Unlock()
	if want == nil {
		want = map[string]string{}
	}
	if value == "" {
		delete(want, key)
	} else {
		want[key] = value
	}
	return r.applyAdminLabels(ctx, w, want)
}

// tenantNetpol creates (on) or deletes the tenant's NetworkPolicy in its
// own namespace: every Pod there, every port but HBONE, in and out.
func (r *Runner) tenantNetpol(ctx context.Context, w world, on bool) error {
	tenant, err := r.asTenant()
	if err != nil {
		return err
	}
	nps := tenant.Resource(gvrNetpols).Namespace(w.other)
	if !on {
		cur, err := nps.Get(ctx, tenantNetpol, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		// The span ends now (the cluster's resourceVersion, not the
		// object's, which is that of its last change).
		rv, err := r.currentRV(ctx)
		if err != nil {
			return err
		}
		// Only this version is deleted: a change in between fails the action.
		err = nps.Delete(ctx, tenantNetpol, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: ptr.To(cur.GetResourceVersion())}})
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		r.adv.end(gvrNetpols, w.other, tenantNetpol, "", rv+1)
		return nil
	}
	ports := func() []any {
		return []any{
			map[string]any{"protocol": "TCP", "port": int64(1), "endPort": int64(hbonePort - 1)},
			map[string]any{"protocol": "TCP", "port": int64(hbonePort + 1), "endPort": int64(65535)},
			map[string]any{"protocol": "UDP", "port": int64(1), "endPort": int64(65535)},
		}
	}
	np := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"namespace": w.other, "name": tenantNetpol},
		"spec": map[string]any{
			"podSelector": map[string]any{},
			"policyTypes": []any{"Ingress", "Egress"},
			"ingress":     []any{map[string]any{"ports": ports()}},
			"egress":      []any{map[string]any{"ports": ports()}},
		},
	}}
	got, err := nps.Create(ctx, np, metav1.CreateOptions{FieldManager: tenantManager})
	if apierrors.IsAlreadyExists(err) {
		return nil
	} else if err != nil {
		return err
	}
	return r.stand(standing{who: "the tenant", gvr: gvrNetpols}, got, "")
}

// currentRV is the cluster's resourceVersion now (a consistent list's).
func (r *Runner) currentRV(ctx context.Context) (int64, error) {
	l, err := r.Dyn.Resource(gvrNamespaces).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(l.GetResourceVersion(), 10, 64)
}

// stand records that what got's write set stands from its resourceVersion.
func (r *Runner) stand(s standing, got *unstructured.Unstructured, key string) error {
	rv, err := strconv.ParseInt(got.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: resourceVersion %q: %w", got.GetName(), got.GetResourceVersion(), err)
	}
	s.namespace, s.name, s.uid, s.from = got.GetNamespace(), got.GetName(), got.GetUID(), rv
	if key == "" {
		s.fingerprint = fingerprint(got)
	} else {
		s.key, s.value = key, got.GetAnnotations()[key]
	}
	r.adv.add(s)
	return nil
}

// grantEditor binds the built-in edit ClusterRole to appEditor in the app
// namespace (once per sequence) and waits until the API server lets it
// patch Ingresses there and not in the tenant's namespace.
func (r *Runner) grantEditor(ctx context.Context, w world) error {
	r.adv.mu.Lock()
	done := r.adv.editorIn == w.app
	r.adv.mu.Unlock()
	if done {
		return nil
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: w.app, Name: appEditor + "-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: appEditor}}}
	if err := r.K8s.Create(ctx, rb); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	err := waitUntil(ctx, 30*time.Second, func() (bool, string) {
		for ns, want := range map[string]bool{w.app: true, w.other: false} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: appEditor,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: gvrIngresses.Group, Resource: gvrIngresses.Resource}}}
			if err := r.K8s.Create(ctx, sar); err != nil {
				return false, err.Error()
			}
			if sar.Status.Allowed != want {
				return false, fmt.Sprintf("the API server says %s may patch Ingresses in %s: %t", appEditor, ns, sar.Status.Allowed)
			}
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	r.adv.mu.Lock()
	r.adv.editorIn = w.app
	r.adv.mu.Unlock()
	return nil
}

// tenantSnippet: the app namespace's editor puts (on) or takes away the
// configuration-snippet on fleet's Ingress; without one it does nothing.
func (r *Runner) tenantSnippet(ctx context.Context, w world, fleet string, on bool) error {
	if err := r.grantEditor(ctx, w); err != nil {
		return err
	}
	editor, _, err := r.asUser(appEditor)
	if err != nil {
		return err
	}
	name := fleet + "-routing" // the fleet operator's names.Routing
	before, err := r.currentRV(ctx)
	if err != nil {
		return err
	}
	value := "null"
	if on {
		value = strconv.Quote(snippetValue)
	}
	patch := `{"metadata":{"annotations":{` + strconv.Quote(labels.NginxConfigurationSnippet) + `:` + value + `}}}`
	got, err := editor.Resource(gvrIngresses).Namespace(w.app).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: appEditor})
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(r.Log, "explore: %s: %s %s does not apply: no Ingress %s\n", w.app, TenantSnippet, fleet, name)
		return nil
	} else if err != nil {
		return err
	}
	if !on {
		rv, err := strconv.ParseInt(got.GetResourceVersion(), 10, 64)
		if err != nil {
			return err
		}
		// A removal that changed nothing (the annotation already gone)
		// answers with the object's last resourceVersion: the span ends
		// now, not then (an operator that took it away is judged for it).
		r.adv.end(gvrIngresses, w.app, name, labels.NginxConfigurationSnippet, max(rv, before+1))
		return nil
	}
	return r.stand(standing{who: "the namespace editor " + appEditor, gvr: gvrIngresses}, got, labels.NginxConfigurationSnippet)
}

// adminServiceAccount: the admin's ServiceAccount (created once, as it
// stands) named in the fleet's spec.serviceAccountName (custom), or the
// field removed (default).
func (r *Runner) adminServiceAccount(ctx context.Context, w world, fleet string, custom bool) error {
	if custom {
		sa := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
			"metadata": map[string]any{"namespace": w.app, "name": adminServiceAccount}}}
		got, err := r.Dyn.Resource(gvrServiceAccounts).Namespace(w.app).Create(ctx, sa, metav1.CreateOptions{FieldManager: adminManager})
		switch {
		case err == nil:
			if err := r.stand(standing{who: "the admin", gvr: gvrServiceAccounts}, got, ""); err != nil {
				return err
			}
		case !apierrors.IsAlreadyExists(err):
			return err
		}
	}
	value := "null"
	if custom {
		value = strconv.Quote(adminServiceAccount)
	}
	f := &fleetv1.CelldFleet{ObjectMeta: metav1.ObjectMeta{Namespace: w.app, Name: fleet}}
	return client.IgnoreNotFound(r.K8s.Patch(ctx, f, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"serviceAccountName":`+value+`}}`)),
		client.FieldOwner(adminManager)))
}

// advJudge is what checkAdversaries remembers between states.
type advJudge struct {
	advRecord
	// sts: the fleets' StatefulSets (name → UID) of the state before.
	sts map[string]types.UID
}

// checkAdversaries: what the admin or a tenant set stands (standing), and
// while policy.sts refuses StatefulSets no live fleet's StatefulSet is
// deleted or replaced (the operator must not delete what it cannot write
// again).
func (j *judgement) checkAdversaries(s *snapshot, step int) {
	if j.adv == nil {
		return
	}
	for i, o := range j.adv.standing {
		if !o.stands(s.rv) || s.absent[o.gvr] {
			continue
		}
		u := s.objs[o.gvr][o.namespace+"/"+o.name]
		if ns := s.objs[gvrNamespaces]["/"+o.namespace]; ns != nil && ns.GetDeletionTimestamp() != nil {
			continue
		}
		k := fmt.Sprintf("standing %d", i)
		switch {
		case o.key != "":
			if u == nil || u.GetUID() != o.uid {
				continue // the object went (its owner's doing); so did the annotation
			}
			if got, ok := u.GetAnnotations()[o.key]; !ok {
				j.fail(k, "step %d, after %s: %s was deleted", step, s.last, o)
			} else if got != o.value {
				j.fail(k, "step %d, after %s: %s was overwritten: it reads %q", step, s.last, o, got)
			}
		case u == nil:
			j.fail(k, "step %d, after %s: %s was deleted", step, s.last, o)
		case u.GetUID() != o.uid:
			j.fail(k, "step %d, after %s: %s was replaced (uid %s -> %s)", step, s.last, o, o.uid, u.GetUID())
		case fingerprint(u) != o.fingerprint:
			j.fail(k, "step %d, after %s: %s was changed: %s, was %s", step, s.last, o, fingerprint(u), o.fingerprint)
		}
	}
	now := map[string]types.UID{}
	for _, u := range s.in(gvrStatefulSets, j.w.app) {
		now[u.GetName()] = u.GetUID()
	}
	refusing := false
	for _, sp := range j.adv.stsSpans {
		refusing = refusing || sp.covers(s.at)
	}
	if refusing && j.adv.sts != nil {
		for _, f := range s.fleets(j.w.app) {
			was, had := j.adv.sts[f.Name]
			if f.DeletionTimestamp != nil || !had || now[f.Name] == was {
				continue
			}
			j.fail("sts deleted "+f.Name, "step %d, after %s: while %s refuses StatefulSets, fleet %s's StatefulSet %s/%s was deleted (uid %s -> %q): a refused write must not take the members' StatefulSet away",
				step, s.last, policySTS, f.Name, j.w.app, f.Name, was, now[f.Name])
		}
	}
	if !s.absent[gvrStatefulSets] {
		j.adv.sts = now
	}
}

// policiesAtRest: at rest, while a policy refuses the fleet operator, the
// affected fleet's status says so. Under policy.nslabels a fleet that asks
// for enrollment (mode not disabled) in a namespace without
// core.navique.com/mesh reports NamespaceDeclared=False/NamespaceLabelsRefused
// quoting the policy; under policy.sts a fleet whose spec is not yet
// applied (observedGeneration behind, unpaused) reports
// Reconciled=False/StepFailed quoting the policy.
func (j *judgement) policiesAtRest(s *snapshot) []string {
	if s == nil || j.adv == nil {
		return nil
	}
	var out []string
	says := func(f fleetv1.CelldFleet, typ fleetv1.ConditionType, reason fleetv1.ConditionReason, policy, why string) {
		c := meta.FindStatusCondition(f.Status.Conditions, string(typ))
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(reason) || !strings.Contains(c.Message, policy) {
			got := "no condition"
			if c != nil {
				got = fmt.Sprintf("%s=%s/%s: %s", typ, c.Status, c.Reason, c.Message)
			}
			out = append(out, fmt.Sprintf("at rest, %s refuses %s for fleet %s, but its status does not say so (want %s=False/%s quoting the policy): %s",
				policy, why, f.Name, typ, reason, got))
		}
	}
	// The ServiceMesh: a Ready mesh that is to enroll the app or edge
	// namespace, still without its mesh-state label, reports
	// EnrollmentFailed=True/EnrollmentStepFailed quoting the policy.
	if m := s.serviceMesh(); m != nil && j.adv.inForce[PolicyNSLabels] && m.DeletionTimestamp == nil &&
		meta.IsStatusConditionTrue(m.Status.Conditions, string(meshv1.ConditionReady)) {
		for _, name := range []string{j.w.app, j.w.edge} {
			ns := s.objs[gvrNamespaces]["/"+name]
			if ns == nil || optedOut(m, ns) {
				continue
			}
			if _, has := ns.GetLabels()[labels.MeshState]; has {
				continue
			}
			c := meta.FindStatusCondition(m.Status.Conditions, string(meshv1.ConditionEnrollmentFailed))
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(meshv1.ReasonEnrollmentStepFailed) || !strings.Contains(c.Message, policyNSLabels) {
				got := "no condition"
				if c != nil {
					got = fmt.Sprintf("%s=%s/%s: %s", c.Type, c.Status, c.Reason, c.Message)
				}
				out = append(out, fmt.Sprintf("at rest, %s refuses enrolling namespace %s, but the ServiceMesh's status does not say so (want %s=True/%s quoting the policy): %s",
					policyNSLabels, name, meshv1.ConditionEnrollmentFailed, meshv1.ReasonEnrollmentStepFailed, got))
			}
		}
	}
	for _, f := range s.fleets(j.w.app) {
		if f.DeletionTimestamp != nil {
			continue
		}
		if j.adv.inForce[PolicyNSLabels] && (f.Spec.Mesh == nil || f.Spec.Mesh.Mode != fleetv1.MeshDisabled) {
			if _, has := s.nsLabels(j.w.app)[labels.Mesh]; !has {
				says(f, fleetv1.ConditionNamespaceDeclared, fleetv1.ReasonNamespaceLabelsRefused, policyNSLabels, "the enrollment request "+labels.Mesh)
			}
		}
		if j.adv.inForce[PolicySTS] && !f.Spec.Maintenance.Paused && f.Status.ObservedGeneration < f.Generation {
			says(f, fleetv1.ConditionReconciled, fleetv1.ReasonStepFailed, policySTS, "the StatefulSet")
		}
	}
	return out
}

// refusedByPolicy: fleet f runs fewer members than it wants because a
// policy in force refuses them, and its status says so (membersAtRest
// does not count it; policiesAtRest judges what it says).
func (j *judgement) refusedByPolicy(f fleetv1.CelldFleet) bool {
	if j.adv == nil {
		return false
	}
	if j.adv.inForce[PolicySTS] {
		if c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionReconciled)); c != nil &&
			c.Reason == string(fleetv1.ReasonStepFailed) && strings.Contains(c.Message, policySTS) {
			return true
		}
	}
	if j.adv.inForce[PolicyPSS] {
		if c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionProvisioning)); c != nil &&
			c.Reason == string(fleetv1.ReasonMembersRefused) {
			return true
		}
	}
	return false
}

// refusedRetriesAtRest: how many refused writes of one object by one
// writer the quiet window (12 s) tolerates at rest. A step the API server
// refuses (a policy in force) is tried again, by design, no more often
// than the writer's poll: a fleet's namespace declaration at the fleet's
// --state-interval (10 s on the bed), the mesh operator's enrollment after
// its failure backoff (1 s doubling to 30 s; at rest it has reached 8 s or
// more): at most twice in the window. More is a retry loop. Several
// pollers of one kind (two fleets, the mesh operator's namespaces) are
// counted apart: the fault proxies record each write with its operator,
// field manager and object (harness.FaultProxy.Writes), which the API
// server's metrics do not (issue 43, seeds 7001 and 7038).
const refusedRetriesAtRest = 2

// writesAtRest names the stored writes between two readings of the API
// server's counters (all writes less the refused ones, which store
// nothing; refusedRetries judges those).
func writesAtRest(before, after, refusedBefore, refusedAfter map[string]float64) []string {
	var out []string
	for k, v := range after {
		refused := refusedAfter[k] - refusedBefore[k]
		if d := v - before[k] - refused; d > 0 {
			out = append(out, fmt.Sprintf("%s %v", k, d))
		}
	}
	return out
}

// refusedTally is every refused write of writes, counted per operator,
// field manager, verb and object, for the log ("" when none).
func refusedTally(writes map[string][]harness.WriteRecord) string {
	n := map[string]int{}
	for op, ws := range writes {
		for _, w := range ws {
			if cluster.RefusedCodes[strconv.Itoa(w.Code)] {
				n[fmt.Sprintf("%s %q %s %s (%d)", op, w.FieldManager, w.Verb, w.Object(), w.Code)]++
			}
		}
	}
	var out []string
	for k, c := range n {
		out = append(out, fmt.Sprintf("%s x%d", k, c))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// refusedRetries names each writer (operator and field manager) that had
// one object's write refused (cluster.RefusedCodes) more often than
// refusedRetriesAtRest among writes, each operator's as its fault proxy
// recorded them in the quiet window, with the times of the refusals.
func refusedRetries(writes map[string][]harness.WriteRecord) []string {
	type key struct{ operator, manager, verb, object string }
	times := map[key][]time.Time{}
	var keys []key
	for op, ws := range writes {
		for _, w := range ws {
			if !cluster.RefusedCodes[strconv.Itoa(w.Code)] {
				continue
			}
			k := key{op, w.FieldManager, w.Verb, w.Object()}
			if times[k] == nil {
				keys = append(keys, k)
			}
			times[k] = append(times[k], w.At)
		}
	}
	var out []string
	for _, k := range keys {
		ts := times[k]
		if len(ts) <= refusedRetriesAtRest {
			continue
		}
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		at := []string{ts[0].UTC().Format(time.TimeOnly)}
		for _, t := range ts[1:] {
			at = append(at, "+"+t.Sub(ts[0]).Round(100*time.Millisecond).String())
		}
		out = append(out, fmt.Sprintf("the %s (field manager %q) had %s %s refused %d times (at %s), retried more often than the poll",
			k.operator, k.manager, k.verb, k.object, len(ts), strings.Join(at, ", ")))
	}
	sort.Strings(out)
	return out
}
