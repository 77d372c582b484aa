package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

// A policy event wakes only the fleet that controls the policy: not an
// owner that is no controller, nor a namesake kind of another group.
func TestControllingFleet(t *testing.T) {
	obj := func(refs ...metav1.OwnerReference) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetNamespace("ns")
		u.SetName("f-mesh")
		u.SetOwnerReferences(refs)
		return u
	}
	ours := metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "CelldFleet", Name: "f", Controller: ptr.To(true)}
	assert.Equal(t, []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "f"}}}, controllingFleet(context.Background(), obj(ours)))
	notController := ours
	notController.Controller = nil
	assert.Empty(t, controllingFleet(context.Background(), obj(notController)))
	other := ours
	other.APIVersion = "example.com/v1"
	assert.Empty(t, controllingFleet(context.Background(), obj(other)))
	assert.Empty(t, controllingFleet(context.Background(), obj()))
}
