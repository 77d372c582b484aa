// Package names derives the names and selector labels of everything a fleet
// owns, so builders, reconcilers and tests agree on them.
package names

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/apply"
	"github.com/ericdev/fleetmesh/shared/labels"
)

const (
	// Runtime is the app.kubernetes.io/name of member Pods.
	Runtime = "celld"
	// Operator is the app.kubernetes.io/managed-by value and field manager name.
	Operator = "fleet-operator"

	// AppPort serves application traffic.
	AppPort = 8080
	// PeerPort serves peer RPC and the /state endpoint.
	PeerPort = 8081
	// AppPortName and PeerPortName name the container and Service ports.
	AppPortName  = "app"
	PeerPortName = "peer"
)

// AppService is the ClusterIP Service clients call on 8080.
func AppService(fleet string) string { return fleet }

// PeerService is the headless Service members resolve each other through.
func PeerService(fleet string) string { return fleet + "-peers" }

// NetworkPolicy protects member Pods.
func NetworkPolicy(fleet string) string { return fleet }

// Mesh names the fleet's AuthorizationPolicy and PeerAuthentication.
func Mesh(fleet string) string { return fleet + "-mesh" }

// Routing names the fleet's route (HTTPRoute or Ingress) and its NetworkPolicy.
func Routing(fleet string) string { return fleet + "-routing" }

// StatefulSet runs the members.
func StatefulSet(fleet string) string { return fleet }

// ServiceAccount is the default identity of members.
func ServiceAccount(fleet string) string { return fleet }

// ConfigMap holds the configuration handed to members.
func ConfigMap(fleet string) string { return fleet + "-config" }

// Member is the Pod name of the member with the given ordinal.
func Member(fleet string, ordinal int) string { return fmt.Sprintf("%s-%d", fleet, ordinal) }

// PeerAddress is what a member advertises to its peers: a DNS name that
// stays valid when the Pod IP changes.
func PeerAddress(fleet, namespace, pod string) string {
	return fmt.Sprintf("%s.%s.%s.svc:%d", pod, PeerService(fleet), namespace, PeerPort)
}

// Selector selects exactly the member Pods of a fleet. It is immutable once
// a StatefulSet exists, so it must never change.
func Selector(fleet string) map[string]string {
	return map[string]string{
		labels.Name:     Runtime,
		labels.Instance: fleet,
	}
}

// CommonLabels go on every object a fleet owns.
func CommonLabels(fleet string) map[string]string {
	return map[string]string{
		labels.Name:      Runtime,
		labels.Instance:  fleet,
		labels.ManagedBy: Operator,
	}
}

// ObjectMeta is the metadata of every object built for a fleet: in its
// namespace, with its common labels, controlled by it.
func ObjectMeta(f *v1alpha1.CelldFleet, name string) metav1.ObjectMeta {
	return apply.OwnedMeta(f, v1alpha1.GroupVersion.WithKind("CelldFleet"), name, CommonLabels(f.Name))
}
