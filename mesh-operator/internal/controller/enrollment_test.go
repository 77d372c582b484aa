package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/shared/labels"
)

func nsWithFields(l map[string]string, entries ...metav1.ManagedFieldsEntry) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: l, ManagedFields: entries}}
}

func fieldsEntry(manager string, op metav1.ManagedFieldsOperationType, raw string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(raw)}
}

func TestOwnedAndRequestLabels(t *testing.T) {
	ours := fieldsEntry(FieldManager, metav1.ManagedFieldsOperationApply,
		`{"f:metadata":{"f:labels":{"f:core.navique.com/mesh":{},"f:istio-injection":{}}}}`)
	fleet := fieldsEntry("fleet-operator/fleet/a/f", metav1.ManagedFieldsOperationApply,
		`{"f:metadata":{"f:labels":{"f:core.navique.com/mesh":{}}}}`)
	ourUpdate := fieldsEntry(FieldManager, metav1.ManagedFieldsOperationUpdate,
		`{"f:metadata":{"f:labels":{"f:team":{}}}}`)
	l := map[string]string{labels.Mesh: labels.MeshEnabled, labels.IstioInjection: "enabled", "team": "x"}

	assert.Equal(t, map[string]bool{labels.Mesh: true, labels.IstioInjection: true}, ownedLabels(nsWithFields(l, ours, ourUpdate)),
		"only the operator's server-side apply counts")
	assert.Empty(t, ownedLabels(nsWithFields(l, fieldsEntry(FieldManager, metav1.ManagedFieldsOperationApply, "not json"))))

	_, asked := requestLabels(nsWithFields(l, ours))[labels.Mesh]
	assert.False(t, asked, "a request only the operator holds is not a request")
	_, asked = requestLabels(nsWithFields(l, ours, fleet))[labels.Mesh]
	assert.True(t, asked, "a fleet still asks")
	_, asked = requestLabels(nsWithFields(l))[labels.Mesh]
	assert.True(t, asked, "a label set by hand asks")
	assert.Equal(t, "enabled", l[labels.Mesh], "the namespace's own labels are not changed")
}
