package contract

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Writer is a party the contract lets write namespace labels.
type Writer string

// The writers of the contract's labels. Only the two operators write
// through this package; Admin is listed so the table is complete (an
// admin's kubectl is not checked by anyone, but the operators treat what an
// admin alone may write as the admin's word).
const (
	Admin            Writer = "admin"
	MeshOperator     Writer = "mesh operator"
	WorkloadOperator Writer = "workload operator"
)

// Value kinds for rows whose value is a name rather than a fixed word.
const (
	// AnyNamespace: the value is a namespace name.
	AnyNamespace = "<namespace>"
	// AnyRevision: the value is an Istio revision name.
	AnyRevision = "<revision>"
	// edgeKey stands for allow-from.core.navique.com/<namespace> in the table.
	edgeKey = labels.AllowFromPrefix + AnyNamespace
)

// Rule is one row of the contract's label table: a key, one value (or a
// value kind), who may write that value, and what it means.
type Rule struct {
	Key     string
	Value   string
	Writers []Writer
	Meaning string
}

// Table is every namespace label value the contract knows and who may
// write it. docs/mesh-contract.md shows it row for row (a test compares
// them); Permit refuses anything else.
var Table = []Rule{
	{labels.Mesh, labels.MeshEnabled, []Writer{Admin, MeshOperator, WorkloadOperator},
		"please enroll this namespace (an admin; the mesh operator for spec.enrollNamespaces; a workload operator for a workload in mode auto or enabled)"},
	{labels.Mesh, labels.MeshDisabled, []Writer{Admin},
		"never enroll this namespace; no writer replaces it, whatever else asks"},
	{labels.MeshState, labels.MeshStateEnrolled, []Writer{MeshOperator}, "the namespace's mesh configuration is in place"},
	{labels.MeshState, labels.MeshStateJoining, []Writer{MeshOperator}, "the namespace is about to be captured by ambient and waits for its NetworkPolicies to admit capture; workload operators prepare theirs (HBONE, the probe address)"},
	{labels.MeshDataPlane, string(Ambient), []Writer{MeshOperator}, "its workloads are captured by ztunnel"},
	{labels.MeshDataPlane, string(Sidecar), []Writer{MeshOperator}, "its workloads get sidecars"},
	{labels.MeshMTLS, MTLSStrict, []Writer{MeshOperator}, "namespace-wide STRICT mTLS is in force"},
	{labels.MeshMTLS, MTLSPermissive, []Writer{MeshOperator}, "namespace-wide PERMISSIVE mTLS is in force (cutover, maintenance window, migration)"},
	{labels.MeshIsolation, IsolationOff, []Writer{MeshOperator}, "no isolation policy"},
	{labels.MeshIsolation, IsolationNamespace, []Writer{MeshOperator}, "cross-namespace traffic is denied except from declared edges"},
	{labels.MeshIsolation, IsolationStrict, []Writer{MeshOperator}, "as namespace, plus per-service least privilege: each workload admits only its wired callers"},
	{labels.MeshControlPlane, AnyNamespace, []Writer{MeshOperator}, "where istiod runs"},
	{edgeKey, "true", []Writer{WorkloadOperator}, "a cross-namespace edge that isolation must admit"},
	{labels.IstioDataPlaneMode, string(Ambient), []Writer{MeshOperator}, "Istio's own label: ambient capture (enrolled ambient namespaces)"},
	{labels.IstioInjection, labels.MeshEnabled, []Writer{MeshOperator}, "Istio's own label: default-revision sidecar injection (enrolled sidecar namespaces)"},
	{labels.IstioRevision, AnyRevision, []Writer{MeshOperator}, "Istio's own label: sidecar injection by a named revision (enrolled sidecar namespaces)"},
}

// rowKey is the table key a label key falls under.
func rowKey(key string) string {
	if ns, ok := strings.CutPrefix(key, labels.AllowFromPrefix); ok && validation.IsDNS1123Label(ns) == nil {
		return edgeKey
	}
	return key
}

func valueMatches(rule, value string) bool {
	switch rule {
	case AnyNamespace:
		return validation.IsDNS1123Label(value) == nil
	case AnyRevision:
		return len(validation.IsValidLabelValue(value)) == 0 && value != ""
	}
	return rule == value
}

// Governed reports whether the contract governs a label key (the mesh
// group's keys, edge keys and the Istio data-plane keys).
func Governed(key string) bool {
	return strings.HasPrefix(key, labels.MeshGroup+"/") || strings.HasPrefix(key, labels.AllowFromPrefix) ||
		key == labels.IstioDataPlaneMode || key == labels.IstioInjection || key == labels.IstioRevision
}

// Writers lists who may write key=value; none for a value outside the table.
func Writers(key, value string) []Writer {
	rk := rowKey(key)
	for _, r := range Table {
		if r.Key == rk && valueMatches(r.Value, value) {
			return r.Writers
		}
	}
	return nil
}

// Permit returns an error unless w may write key=value.
func Permit(w Writer, key, value string) error {
	ws := Writers(key, value)
	if ws == nil {
		return fmt.Errorf("namespace label %s=%q is not in the mesh contract's table", key, value)
	}
	if !slices.Contains(ws, w) {
		return fmt.Errorf("the mesh contract does not let the %s write namespace label %s=%q (writers: %v)", w, key, value, ws)
	}
	return nil
}

// Outcome is what ApplyLabels did.
type Outcome struct {
	// Withheld maps each wanted key the writer did not write to the value
	// that stands there instead (e.g. core.navique.com/mesh=disabled).
	Withheld map[string]string
	// Wrote: a write was sent.
	Wrote bool
}

// OptedOut reports that the writer's enrollment request was withheld
// because the namespace says disabled.
func (o Outcome) OptedOut() bool { return o.Withheld[labels.Mesh] == labels.MeshDisabled }

// IstioOptOut values: Istio's own labels that keep a namespace out of the
// mesh. No writer of this contract writes them (the table has no row for
// them), so where one stands an admin (or another tool) put it there.
const (
	IstioInjectionDisabled = "disabled"
	IstioDataPlaneModeNone = "none"
)

// IstioOptOut is the Istio opt-out label on a namespace, as "key=value"
// ("" when there is none): istio-injection=disabled or
// istio.io/dataplane-mode=none, whichever data plane the mesh runs (the
// admin's "no Istio here" is not second-guessed). It counts as the admin's
// core.navique.com/mesh=disabled does: the namespace is never enrolled,
// and no writer adds a label there it does not already hold.
func IstioOptOut(nsLabels map[string]string) string {
	switch {
	case nsLabels[labels.IstioInjection] == IstioInjectionDisabled:
		return labels.IstioInjection + "=" + IstioInjectionDisabled
	case nsLabels[labels.IstioDataPlaneMode] == IstioDataPlaneModeNone:
		return labels.IstioDataPlaneMode + "=" + IstioDataPlaneModeNone
	}
	return ""
}

// OptedOut reports whether an admin opted the namespace out of the mesh:
// core.navique.com/mesh=disabled or an Istio opt-out (IstioOptOut).
func OptedOut(nsLabels map[string]string) bool {
	return nsLabels[labels.Mesh] == labels.MeshDisabled || IstioOptOut(nsLabels) != ""
}

// istioKeys are Istio's own namespace labels the contract lets the mesh
// operator write.
var istioKeys = []string{labels.IstioInjection, labels.IstioDataPlaneMode, labels.IstioRevision}

// Withhold drops from want what the writer may not put in place of what
// stands, given the label keys it already holds:
//
//   - an enrollment request never replaces another value of the request
//     label: an admin's disabled wins over every request, and an unknown
//     value is an admin's to fix;
//   - a value of Istio's own labels (istio-injection,
//     istio.io/dataplane-mode, istio.io/rev) that the writer does not hold
//     is someone else's and is never replaced (it would take the label
//     over, and leaving would then delete it);
//   - on a namespace an admin opted out (core.navique.com/mesh=disabled, or
//     an Istio opt-out: IstioOptOut) a writer adds no key it does not
//     already hold: whatever it decided from an earlier read (enrollment,
//     state, edges of an enrolled namespace) no longer applies, and the
//     namespace only sheds labels from then on. Keys it holds it may keep
//     while it withdraws them in its own order (the mesh operator removes
//     its state labels before its policies, its data-plane label last).
//
// (A writer never holds a value other than the one it applied: whoever
// changes it takes the field over.) The second result maps each withheld
// key to the value that stands there ("" if none).
func Withhold(current map[string]string, held []string, want map[string]string) (map[string]string, map[string]string) {
	out := maps.Clone(want)
	withheld := map[string]string{}
	if v, ok := want[labels.Mesh]; ok {
		if have, present := current[labels.Mesh]; present && have != v {
			delete(out, labels.Mesh)
			withheld[labels.Mesh] = have
		}
	}
	for _, k := range istioKeys {
		v, ok := want[k]
		if have, present := current[k]; ok && present && have != v && !slices.Contains(held, k) {
			delete(out, k)
			withheld[k] = have
		}
	}
	if OptedOut(current) {
		for k := range out {
			if !slices.Contains(held, k) {
				delete(out, k)
				withheld[k] = current[k]
			}
		}
	}
	return out, withheld
}

// maxAttempts bounds the retries of ApplyLabels when the namespace changes
// under it.
const maxAttempts = 5

// ApplyLabels makes want exactly the set of labels that writer w applies on
// namespace ns under fieldManager (server-side apply: a key it stops
// applying goes unless someone else also holds it). It is the one way both
// operators write contract labels:
//
//   - every wanted value must be one the table lets w write (else nothing
//     is written);
//   - a value the writer may not replace is withheld (see Withhold) and
//     reported, never overwritten;
//   - nothing is written when w's labels already stand as wanted;
//   - the apply carries the resourceVersion the decision was made on, so a
//     label someone changed in between (an admin's disabled) is never
//     overridden: on a conflict the namespace is read again through fresh
//     (an uncached reader) and the decision is made anew.
//
// ns is the namespace as the caller observed it; on return it holds the
// latest state this call saw (after a write, the apply's answer).
func ApplyLabels(ctx context.Context, c client.Client, fresh client.Reader, w Writer, fieldManager string, ns *corev1.Namespace, want map[string]string) (Outcome, error) {
	for k, v := range want {
		if err := Permit(w, k, v); err != nil {
			return Outcome{}, err
		}
	}
	for attempt := 1; ; attempt++ {
		held := LabelsHeldBy(ns, fieldManager)
		apply, withheld := Withhold(ns.Labels, held, want)
		out := Outcome{Withheld: withheld}
		if standing(ns.Labels, held, apply) {
			return out, nil
		}
		// Unstructured, so that the apply's answer comes back whole, managed
		// fields included: the caller's copy has the old resourceVersion, and
		// the answer replaces it for any later decision (no read-back: at a
		// thousand namespaces that was a request per write).
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Namespace")
		u.SetName(ns.Name)
		u.SetResourceVersion(ns.ResourceVersion)
		if len(apply) > 0 {
			u.SetLabels(apply)
		}
		err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership)
		if err == nil {
			out.Wrote = true
			applied := &corev1.Namespace{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, applied); err != nil {
				return out, fmt.Errorf("namespace %s as applied: %w", ns.Name, err)
			}
			if applied.ResourceVersion == "" {
				return out, fmt.Errorf("namespace %s as applied: the answer has no resourceVersion", ns.Name)
			}
			*ns = *applied
			return out, nil
		}
		if !apierrors.IsConflict(err) || attempt == maxAttempts {
			return out, fmt.Errorf("applying labels on namespace %s: %w", ns.Name, err)
		}
		if err := fresh.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
			return out, fmt.Errorf("reading namespace %s: %w", ns.Name, err)
		}
	}
}

// standing reports that exactly the keys of want are held, with want's values.
func standing(current map[string]string, held []string, want map[string]string) bool {
	if len(held) != len(want) {
		return false
	}
	for k, v := range want {
		if !slices.Contains(held, k) || current[k] != v {
			return false
		}
	}
	return true
}

// LabelsHeldBy lists the label keys a field manager holds on an object
// through server-side apply, sorted.
func LabelsHeldBy(obj metav1.Object, manager string) []string {
	return slices.Sorted(maps.Keys(LabelsAppliedBy(obj, manager)))
}

// LabelsAppliedBy is LabelsHeldBy as a set.
func LabelsAppliedBy(obj metav1.Object, manager string) map[string]bool {
	return labelsHeld(obj, func(mf metav1.ManagedFieldsEntry) bool {
		return mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply
	})
}

// LabelsHeldByOthers are the label keys held by anyone but manager's
// server-side apply: other managers, and manager's own updates (a
// label it wrote with an update is not one it can take back by applying).
func LabelsHeldByOthers(obj metav1.Object, manager string) map[string]bool {
	return labelsHeld(obj, func(mf metav1.ManagedFieldsEntry) bool {
		return mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply
	})
}

// labelsHeld are the label keys held by the managedFields entries that
// match; an entry that cannot be read holds nothing.
func labelsHeld(obj metav1.Object, match func(metav1.ManagedFieldsEntry) bool) map[string]bool {
	out := map[string]bool{}
	for _, mf := range obj.GetManagedFields() {
		if !match(mf) || mf.FieldsV1 == nil {
			continue
		}
		var f struct {
			Metadata struct {
				Labels map[string]any `json:"f:labels"`
			} `json:"f:metadata"`
		}
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &f) != nil {
			continue
		}
		for k := range f.Metadata.Labels {
			if key, ok := strings.CutPrefix(k, "f:"); ok {
				out[key] = true
			}
		}
	}
	return out
}
