package local

import (
	"context"
	"fmt"
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Addressing of the fake nodes. Everything is in 127.0.0.0/8 so that any
// traffic a test (or an operator under test) sends to a Pod or node address
// stays on this machine; 127.0.0.0/16 (127.0.0.1, 127.0.0.53, ...) is never
// used.
//
// Each node gets a whole /16 rather than a /24: kwok's address pool never
// checks its range's end, and it loses an address whenever it plays the
// Pod-running stage twice for one Pod (it does for ~4% of Pods under load;
// the second patch is rejected, the address stays taken). With a /24 a
// long-running test bed with Pod churn would spill into the next node's range
// and hand out duplicate IPs; a /16 needs 65,000 such losses.
const (
	// MaxNodes keeps node ranges (127.1–127.250) clear of the node
	// addresses and fallbacks in 127.253 and 127.254.
	MaxNodes = 250
	// DefaultMaxPods is each node's Pod capacity: 10 nodes hold 900 Pods with
	// room to roll.
	DefaultMaxPods = 200

	fallbackPodCIDR = "127.253.0.0/16"
	fallbackNodeIP  = "127.254.0.254"

	// NodeLabel marks the provider's fake nodes.
	NodeLabel = "e2e.fleetmesh.dev/fake-node"
)

// NodeName is the name of fake node i.
func NodeName(i int) string { return "kwok-node-" + strconv.Itoa(i) }

// NodePodCIDR is the Pod range of address slot i: 127.<i+1>.0.0/16. kwok
// hands out its addresses from .0.1 upwards. A bed's node j uses the slot
// its rangeLease assigns, not slot j, so concurrent beds never overlap.
func NodePodCIDR(slot int) string { return fmt.Sprintf("127.%d.0.0/16", slot+1) }

// NodeIP is the InternalIP of the node in address slot i, used as hostIP of
// its Pods.
func NodeIP(slot int) string { return fmt.Sprintf("127.254.0.%d", slot+1) }

// IsLoopbackPodIP reports whether ip is a usable loopback Pod address: in
// 127.0.0.0/8 but not 127.0.0.1, which belongs to the host's own services.
func IsLoopbackPodIP(ip string) bool {
	parsed := net.ParseIP(ip)
	return parsed != nil && parsed.To4() != nil && parsed.IsLoopback() && !parsed.Equal(net.IPv4(127, 0, 0, 1))
}

// fakeNode builds node i as a kubelet would register it: spec.podCIDR set
// (immutable, so it must be set at creation), capacity, addresses and node
// info in status (a Node's status may be set on create), and the annotation
// that hands it to kwok. The zone label cycles through three zones so specs
// can exercise topology spreading.
func fakeNode(i, slot, maxPods int) *corev1.Node {
	name := NodeName(i)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   *resource.NewQuantity(int64(maxPods), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname":           name,
				"kubernetes.io/os":                 "linux",
				"kubernetes.io/arch":               "amd64",
				"topology.kubernetes.io/zone":      "zone-" + string(rune('a'+i%3)),
				"node.kubernetes.io/instance-type": "kwok",
				NodeLabel:                          "true",
			},
			Annotations: map[string]string{kwokManageAnnotationKey: kwokManageAnnotationValue},
		},
		Spec: corev1.NodeSpec{
			PodCIDR:  NodePodCIDR(slot),
			PodCIDRs: []string{NodePodCIDR(slot)},
		},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: NodeIP(slot)},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				Architecture:            "amd64",
				OperatingSystem:         "linux",
				KubeletVersion:          "v1.37.2-kwok",
				ContainerRuntimeVersion: "kwok://v0.8.0",
			},
		},
	}
}

func createNodes(ctx context.Context, client kubernetes.Interface, n, maxPods int, ranges *rangeLease) error {
	for i := range n {
		_, err := client.CoreV1().Nodes().Create(ctx, fakeNode(i, ranges.slot(i), maxPods), metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", NodeName(i), err)
		}
	}
	return nil
}

// nodesSchedulable reports whether n fake nodes are Ready and carry none of
// the not-ready/unreachable taints the node lifecycle controller puts on
// nodes it first saw before kwok reported them Ready. Pods created before the
// taint is gone would sit Pending for a few seconds.
func nodesSchedulable(ctx context.Context, client kubernetes.Interface, n int) (bool, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel + "=true"})
	if err != nil {
		return false, nil
	}
	ready := 0
	for _, node := range list.Items {
		if nodeReady(&node) && !hasNodeLifecycleTaint(&node) {
			ready++
		}
	}
	return ready >= n, nil
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasNodeLifecycleTaint(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return true
		}
	}
	return false
}

// defaultServiceAccountExists: Pods cannot be created in a namespace until the
// controller-manager made its "default" ServiceAccount.
func defaultServiceAccountExists(ctx context.Context, client kubernetes.Interface) (bool, error) {
	_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
	return err == nil, nil
}
