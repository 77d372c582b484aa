package network

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
)

// peerAppProtocol is the appProtocol of the peer port. Peer RPC is an opaque
// byte stream; meshes that honour the standard field (Istio among them) then
// proxy it as plain TCP instead of sniffing it as HTTP.
const peerAppProtocol = "tcp"

// serviceTypeMeta is set on every Service because server-side apply sends
// the object as it is and the API server needs apiVersion and kind.
var serviceTypeMeta = metav1.TypeMeta{
	APIVersion: corev1.SchemeGroupVersion.String(),
	Kind:       "Service",
}

// AppService is the ClusterIP Service named after the fleet that clients call
// on TCP 8080 (my-fleet:8080 from the fleet namespace).
//
// The target port is the number, not the container port's name: the port
// numbers are fixed by the product and the NetworkPolicy admits those
// numbers, so Service and policy cannot drift apart, and a member template
// that missed the port name would not silently leave the Service without
// endpoints.
//
// spec.clusterIP is left to the API server: it is allocated on create and
// immutable, so applying it would only ever conflict.
func AppService(fleet *v1alpha1.CelldFleet) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   serviceTypeMeta,
		ObjectMeta: objectMeta(fleet, names.AppService(fleet.Name)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: names.Selector(fleet.Name),
			Ports: []corev1.ServicePort{{
				Name:       names.AppPortName,
				Protocol:   corev1.ProtocolTCP,
				Port:       names.AppPort,
				TargetPort: intstr.FromInt32(names.AppPort),
			}},
		},
	}
}

// PeerService is the headless Service FLEET-peers through which members
// resolve each other: each member advertises POD.FLEET-peers.NAMESPACE.svc:8081,
// a name that survives Pod IP changes during recovery.
//
// publishNotReadyAddresses is true because peers may need each other's
// follower service to finish startup: peer DNS must not wait for application
// readiness, or members starting together would wait on each other forever.
func PeerService(fleet *v1alpha1.CelldFleet) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   serviceTypeMeta,
		ObjectMeta: objectMeta(fleet, names.PeerService(fleet.Name)),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 names.Selector(fleet.Name),
			Ports: []corev1.ServicePort{{
				Name:        names.PeerPortName,
				Protocol:    corev1.ProtocolTCP,
				AppProtocol: ptr.To(peerAppProtocol),
				Port:        names.PeerPort,
				TargetPort:  intstr.FromInt32(names.PeerPort),
			}},
		},
	}
}
