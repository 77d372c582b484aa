package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestEventFilters: of a namespace, its labels and generation wake the
// ServiceMesh; of a NetworkPolicy, its spec; nothing else does. Creates
// and deletes always do.
func TestEventFilters(t *testing.T) {
	ns := func() *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}
	}
	relabelled, annotated, terminating := ns(), ns(), ns()
	relabelled.Labels[labels.Mesh] = labels.MeshDisabled
	annotated.Annotations = map[string]string{"note": "x"}
	terminating.Status.Phase = corev1.NamespaceTerminating
	assert.True(t, namespaceFacts.Update(event.UpdateEvent{ObjectOld: ns(), ObjectNew: relabelled}), "a label")
	assert.False(t, namespaceFacts.Update(event.UpdateEvent{ObjectOld: ns(), ObjectNew: annotated}), "an annotation")
	assert.False(t, namespaceFacts.Update(event.UpdateEvent{ObjectOld: ns(), ObjectNew: terminating}), "status")
	assert.True(t, namespaceFacts.Create(event.CreateEvent{Object: ns()}))
	assert.True(t, namespaceFacts.Delete(event.DeleteEvent{Object: ns()}))

	np := func(gen int64) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: gen, Labels: map[string]string{"a": "b"}}}
	}
	relabelledNP := np(1)
	relabelledNP.Labels = nil
	assert.True(t, networkPolicyFacts.Update(event.UpdateEvent{ObjectOld: np(1), ObjectNew: np(2)}), "spec")
	assert.False(t, networkPolicyFacts.Update(event.UpdateEvent{ObjectOld: np(1), ObjectNew: relabelledNP}), "metadata")
}
