//go:build e2e

package local_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
)

const (
	testNamespace = "loopback"
	members       = 4
	webReplicas   = 3
)

// TestFullTierPodsGetLoopbackIPs runs a StatefulSet (with a native sidecar
// and a volumeClaimTemplate) and a Deployment on kwok nodes and checks the
// real data: every Pod Running and Ready, every claim Bound, and every Pod IP
// a loopback address from its node's spec.podCIDR — never 127.0.0.1 and never
// a routable address. Deleting the claims must delete their volumes.
func TestFullTierPodsGetLoopbackIPs(t *testing.T) {
	requireTools(t, "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
	var hook podIPRecorder
	_, c := up(t, local.Options{Nodes: 3, NoDefaultCRDs: true, PodIPs: hook.handler()})
	client, err := c.Clientset()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	nodeCIDRs := requireLoopbackNodes(ctx, t, client, 3)

	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.AppsV1().StatefulSets(testNamespace).Create(ctx, memberStatefulSet(), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = client.AppsV1().Deployments(testNamespace).Create(ctx, webDeployment(), metav1.CreateOptions{})
	require.NoError(t, err)

	started := time.Now()
	pods := waitPodsReady(ctx, t, client, members+webReplicas)
	t.Logf("%d pods Running and Ready after %s", len(pods), time.Since(started).Round(time.Millisecond))
	requireLoopbackPodIPs(t, pods, nodeCIDRs)
	requireClaimsBound(ctx, t, client, members)
	requireHookSawPods(t, &hook, pods)

	// Reclaim policy Delete: the volumes go with the claims.
	require.NoError(t, client.AppsV1().StatefulSets(testNamespace).Delete(ctx, "member", metav1.DeleteOptions{}))
	require.NoError(t, client.CoreV1().PersistentVolumeClaims(testNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		return err == nil && len(pvs.Items) == 0, nil
	})
	require.NoError(t, err, "released volumes should be deleted")
}

func requireLoopbackNodes(ctx context.Context, t *testing.T, client kubernetes.Interface, n int) map[string]*net.IPNet {
	t.Helper()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, n)
	cidrs := map[string]*net.IPNet{}
	for _, node := range nodes.Items {
		require.NotEmpty(t, node.Spec.PodCIDRs, "node %s has no podCIDRs", node.Name)
		require.Equal(t, node.Spec.PodCIDR, node.Spec.PodCIDRs[0])
		for _, cidr := range node.Spec.PodCIDRs {
			_, ipnet, err := net.ParseCIDR(cidr)
			require.NoError(t, err)
			require.True(t, ipnet.IP.IsLoopback(), "node %s podCIDR %s is not loopback", node.Name, cidr)
			require.False(t, ipnet.Contains(net.IPv4(127, 0, 0, 1)), "node %s podCIDR %s contains 127.0.0.1", node.Name, cidr)
		}
		for _, addr := range node.Status.Addresses {
			if addr.Type == corev1.NodeInternalIP {
				require.True(t, local.IsLoopbackPodIP(addr.Address), "node %s InternalIP %s", node.Name, addr.Address)
			}
		}
		_, cidrs[node.Name], _ = net.ParseCIDR(node.Spec.PodCIDR)
	}
	return cidrs
}

func memberStatefulSet() *appsv1.StatefulSet {
	labels := map[string]string{"app": "member"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "member"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To[int32](members),
			ServiceName:         "member",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{
						Name: "proxy", Image: "example.invalid/proxy:test",
						RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
					}},
					Containers: []corev1.Container{{
						Name: "app", Image: "example.invalid/celld:test",
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					},
				},
			}},
		},
	}
}

func webDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](webReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "web", Image: "example.invalid/web:test"}},
				},
			},
		},
	}
}

// waitPodsReady waits for want Pods in the test namespace to be Running and
// Ready, and returns them.
func waitPodsReady(ctx context.Context, t *testing.T, client kubernetes.Interface, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods(testNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, pod := range list.Items {
			if pod.Status.Phase == corev1.PodRunning && podReady(&pod) {
				ready++
			}
		}
		last = fmt.Sprintf("%d of %d listed pods ready", ready, len(list.Items))
		pods = list.Items
		return ready == want && len(list.Items) == want, nil
	})
	require.NoError(t, err, "pods not ready: %s", last)
	return pods
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func requireLoopbackPodIPs(t *testing.T, pods []corev1.Pod, nodeCIDRs map[string]*net.IPNet) {
	t.Helper()
	seen := map[string]string{}
	for _, pod := range pods {
		require.NotEmpty(t, pod.Status.PodIP, "pod %s has no IP", pod.Name)
		require.True(t, local.IsLoopbackPodIP(pod.Status.PodIP), "pod %s IP %s is not a loopback Pod IP", pod.Name, pod.Status.PodIP)
		require.NotEmpty(t, pod.Status.PodIPs, "pod %s has no podIPs", pod.Name)
		require.Equal(t, pod.Status.PodIP, pod.Status.PodIPs[0].IP)
		for _, ip := range pod.Status.PodIPs {
			require.True(t, local.IsLoopbackPodIP(ip.IP), "pod %s podIPs entry %s is not a loopback Pod IP", pod.Name, ip.IP)
		}
		cidr := nodeCIDRs[pod.Spec.NodeName]
		require.NotNil(t, cidr, "pod %s on unknown node %q", pod.Name, pod.Spec.NodeName)
		require.True(t, cidr.Contains(net.ParseIP(pod.Status.PodIP)), "pod %s IP %s outside node %s podCIDR %s",
			pod.Name, pod.Status.PodIP, pod.Spec.NodeName, cidr)
		require.True(t, local.IsLoopbackPodIP(pod.Status.HostIP), "pod %s hostIP %s", pod.Name, pod.Status.HostIP)
		if other, dup := seen[pod.Status.PodIP]; dup {
			t.Fatalf("pods %s and %s share IP %s", other, pod.Name, pod.Status.PodIP)
		}
		seen[pod.Status.PodIP] = pod.Name
	}
}

func requireClaimsBound(ctx context.Context, t *testing.T, client kubernetes.Interface, want int) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		claims, err := client.CoreV1().PersistentVolumeClaims(testNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(claims.Items) != want {
			return false, nil
		}
		for _, claim := range claims.Items {
			if claim.Status.Phase != corev1.ClaimBound {
				return false, nil
			}
			if ptr.Deref(claim.Spec.StorageClassName, "") != local.StorageClassName {
				return false, fmt.Errorf("claim %s has class %v, want the default %s", claim.Name, claim.Spec.StorageClassName, local.StorageClassName)
			}
		}
		return true, nil
	})
	require.NoError(t, err, "claims not bound")
}

// podIPRecorder collects what the Options.PodIPs hook reported.
type podIPRecorder struct {
	mu       sync.Mutex
	assigned map[string]string // pod name -> IP
}

func (r *podIPRecorder) handler() *cluster.PodIPHandler {
	return &cluster.PodIPHandler{
		Assigned: func(ip cluster.PodIP) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.assigned == nil {
				r.assigned = map[string]string{}
			}
			r.assigned[ip.Name] = ip.IP
		},
		Released: func(ip cluster.PodIP) {
			r.mu.Lock()
			defer r.mu.Unlock()
			delete(r.assigned, ip.Name)
		},
	}
}

func requireHookSawPods(t *testing.T, r *podIPRecorder, pods []corev1.Pod) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, pod := range pods {
			if r.assigned[pod.Name] != pod.Status.PodIP {
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "the PodIPs hook should report every running pod with its IP")
}
