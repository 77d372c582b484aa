package sailinstall

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// The holders record reference-counts a Sail Operator installation.
//
// It is the ConfigMap RecordName in the release namespace. Each key of its
// data is one holder: a party that needs the installation (the mesh
// operator's key is HolderKey; any other tool may add its own key, with any
// value). Annotations say what the installation consists of, so whoever
// removes the last key can uninstall it without any other knowledge:
//
//   - AnnotationRelease: the Helm release name (records: configmap driver);
//   - AnnotationCRDs: the CRDs the install created (those that did not exist
//     before it), removed after the release;
//
// A Sail Operator without this record (installed by OLM, OpenShift Service
// Mesh 3, or a user's own Helm release) is never uninstalled by the operator.
// Holders are added and removed with merge patches that touch only their own
// key, and the record is deleted with a resourceVersion precondition, so a
// holder joining at the same moment makes the deletion fail instead of being lost.
const (
	RecordName        = "sail-operator-holders"
	AnnotationRelease = labels.SailRelease
	AnnotationCRDs    = labels.SailCRDs
	// HolderKey is the mesh operator's key in the record.
	HolderKey = labels.SailHolderServiceMesh
)

// Record is the holders record as read.
type Record struct {
	Namespace string
	Release   string
	CRDs      []string
	// Holders are the data keys, sorted.
	Holders []string
	// Created is the record's creation time. It is written before the
	// install, so a CRD the install created is not older than it.
	Created metav1.Time

	resourceVersion string
}

// Holds reports whether key is a holder.
func (r *Record) Holds(key string) bool { return r != nil && slices.Contains(r.Holders, key) }

// Records reads and writes holders records with c.
type Records struct {
	Client client.Client
	// Reader reads uncached (the operator does not watch ConfigMaps).
	Reader client.Reader
}

// configMap reads a record ConfigMap uncached: nil when there is none; a
// failed read is an error naming what (never "none").
func (rs Records) configMap(ctx context.Context, namespace, name, what string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := rs.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", what, namespace, name, err)
	}
	return cm, nil
}

// Get returns the record in namespace, or nil when there is none.
func (rs Records) Get(ctx context.Context, namespace string) (*Record, error) {
	cm, err := rs.configMap(ctx, namespace, RecordName, "the Sail holders record")
	if cm == nil || err != nil {
		return nil, err
	}
	r := &Record{Namespace: namespace, Release: cm.Annotations[AnnotationRelease], Created: cm.CreationTimestamp, resourceVersion: cm.ResourceVersion}
	if crds := cm.Annotations[AnnotationCRDs]; crds != "" {
		r.CRDs = strings.Split(crds, ",")
	}
	for k := range cm.Data {
		r.Holders = append(r.Holders, k)
	}
	sort.Strings(r.Holders)
	return r, nil
}

// Create writes a new record with holder as its only holder. It fails with
// AlreadyExists when another party created one first; the caller then joins it.
func (rs Records) Create(ctx context.Context, namespace, release string, crds []string, holder, note string) error {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: RecordName,
			Labels:      map[string]string{labels.ManagedBy: "mesh-operator", labels.PartOf: "sail-operator"},
			Annotations: map[string]string{AnnotationRelease: release, AnnotationCRDs: strings.Join(crds, ",")},
		},
		Data: map[string]string{holder: note},
	}
	return rs.Client.Create(ctx, cm)
}

// Join adds holder to the record (idempotent).
func (rs Records) Join(ctx context.Context, namespace, holder, note string) error {
	return rs.patchData(ctx, namespace, map[string]any{holder: note})
}

// AddCRDs records crds (created for an upgrade of the installation, as
// the install records what it created) next to those already recorded, so
// the last holder removes them too.
func (rs Records) AddCRDs(ctx context.Context, r *Record, crds []string) error {
	all := append(slices.Clone(r.CRDs), crds...)
	sort.Strings(all)
	all = slices.Compact(all)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationCRDs: strings.Join(all, ",")}}})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: RecordName}}
	return rs.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
}

// Leave removes holder from the record (idempotent; no record is fine).
func (rs Records) Leave(ctx context.Context, namespace, holder string) error {
	err := rs.patchData(ctx, namespace, map[string]any{holder: nil})
	return client.IgnoreNotFound(err)
}

func (rs Records) patchData(ctx context.Context, namespace string, data map[string]any) error {
	patch, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RecordName}}
	return rs.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
}

// DeleteIfOnly deletes r when holder is its only holder (or it has none),
// and only if it is unchanged since it was read: a holder that joined
// meanwhile keeps it (the API server answers Conflict).
func (rs Records) DeleteIfOnly(ctx context.Context, r *Record, holder string) error {
	for _, h := range r.Holders {
		if h != holder {
			return fmt.Errorf("the Sail holders record %s/%s is still held by %s", r.Namespace, RecordName, h)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: RecordName}}
	err := rs.Client.Delete(ctx, cm, client.Preconditions{ResourceVersion: &r.resourceVersion})
	return client.IgnoreNotFound(err)
}

// GroupSail is the Sail Operator's own API group.
const GroupSail = "sailoperator.io"

// SailAPIGroup reports whether group is one of the API groups whose CRDs
// the Sail Operator chart ships: its own, and Istio's (*.istio.io).
func SailAPIGroup(group string) bool {
	if group == GroupSail {
		return true
	}
	sub, ok := strings.CutSuffix(group, ".istio.io")
	return ok && sub != "" && !strings.HasSuffix(sub, ".")
}

// RemovableCRDs splits the CRD names of a holders record into those the last
// holder may delete and those it must leave alone. The record is a ConfigMap
// that anyone allowed to write ConfigMaps in its namespace can edit, so its
// names are trusted only where they are CRDs of the Sail API groups that the
// chart itself ships (chartCRDs: CRDNames of the chart). Both lists come
// back sorted and without duplicates or blanks.
func RemovableCRDs(recorded, chartCRDs []string) (remove, ignored []string) {
	seen := map[string]bool{}
	for _, n := range recorded {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		_, group, _ := strings.Cut(n, ".")
		if slices.Contains(chartCRDs, n) && SailAPIGroup(group) {
			remove = append(remove, n)
		} else {
			ignored = append(ignored, n)
		}
	}
	sort.Strings(remove)
	sort.Strings(ignored)
	return remove, ignored
}
