package local

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
)

func TestNodeAddressingIsLoopback(t *testing.T) {
	for _, i := range []int{0, 1, 9, MaxNodes - 1} {
		_, cidr, err := net.ParseCIDR(NodePodCIDR(i))
		require.NoError(t, err)
		require.True(t, cidr.IP.IsLoopback(), NodePodCIDR(i))
		require.False(t, cidr.Contains(net.IPv4(127, 0, 0, 1)), NodePodCIDR(i))
		require.True(t, IsLoopbackPodIP(NodeIP(i)), NodeIP(i))
		require.False(t, cidr.Contains(net.ParseIP(NodeIP(i))), "node IPs are outside every Pod range")
		require.False(t, cidr.Contains(net.ParseIP("127.0.0.53")))
	}
	_, first, _ := net.ParseCIDR(NodePodCIDR(0))
	_, second, _ := net.ParseCIDR(NodePodCIDR(1))
	require.False(t, first.Contains(second.IP), "node ranges do not overlap")
	require.True(t, IsLoopbackPodIP(fallbackNodeIP))
	_, fallback, err := net.ParseCIDR(fallbackPodCIDR)
	require.NoError(t, err)
	require.True(t, fallback.IP.IsLoopback())

	require.False(t, IsLoopbackPodIP("127.0.0.1"))
	require.False(t, IsLoopbackPodIP("10.0.0.5"))
	require.False(t, IsLoopbackPodIP("::1"))
	require.False(t, IsLoopbackPodIP(""))
}

func TestFakeNodeIsManagedByKwokAndSized(t *testing.T) {
	node := fakeNode(2, 2, 200)
	require.Equal(t, "kwok-node-2", node.Name)
	require.Equal(t, kwokManageAnnotationValue, node.Annotations[kwokManageAnnotationKey])
	require.Equal(t, "127.3.0.0/16", node.Spec.PodCIDR)
	require.Equal(t, []string{"127.3.0.0/16"}, node.Spec.PodCIDRs)
	require.Equal(t, int64(200), node.Status.Allocatable.Pods().Value())
	require.Empty(t, node.Spec.Taints, "members must schedule without tolerations")
	require.Contains(t, kwokArgs(layout{root: "/w"}, "/w/s.yaml"),
		"--manage-nodes-with-annotation-selector="+kwokManageAnnotationKey+"="+kwokManageAnnotationValue)
}

// Two beds on one machine never share a node address range, and a bed's
// ranges are free again once it is down.
func TestConcurrentBedsLeaseDisjointRanges(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	first, err := leaseRanges(3)
	require.NoError(t, err)
	second, err := leaseRanges(2)
	require.NoError(t, err)
	require.Equal(t, 0, first.slot(0))
	require.Equal(t, 3, second.slot(0), "the second bed starts after the first one's slots")
	node := fakeNode(0, second.slot(0), 10)
	require.Equal(t, "kwok-node-0", node.Name)
	require.Equal(t, "127.4.0.0/16", node.Spec.PodCIDR)

	first.release()
	third, err := leaseRanges(3)
	require.NoError(t, err)
	require.Equal(t, 0, third.slot(0), "released slots are reused")
	second.release()
	third.release()

	none, err := leaseRanges(0)
	require.NoError(t, err)
	none.release()
}

// The embedded stages must parse as kwok Stage objects covering Nodes and
// Pods; the kwok binary refuses to start without them.
func TestKwokStagesParse(t *testing.T) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(kwokStages)))
	kinds := map[string]int{}
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		var stage struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Spec       struct {
				ResourceRef struct{ Kind string } `json:"resourceRef"`
			} `json:"spec"`
		}
		require.NoError(t, utilyaml.Unmarshal(doc, &stage))
		if stage.Kind == "" {
			continue
		}
		require.Equal(t, "kwok.x-k8s.io/v1alpha1", stage.APIVersion)
		require.Equal(t, "Stage", stage.Kind)
		kinds[stage.Spec.ResourceRef.Kind]++
	}
	require.Positive(t, kinds["Node"])
	require.Positive(t, kinds["Pod"])
	require.True(t, bytes.Contains(kwokStages, []byte("PodIPsWith .spec.nodeName")),
		"pod IPs must come from the node's podCIDR")
}

func TestControllerManagerLeavesNodeCIDRsAlone(t *testing.T) {
	args := kcmArgs(layout{root: "/w"}, &pki{})
	require.Contains(t, args, "--allocate-node-cidrs=false")
	api := apiServerArgs(layout{root: "/w"}, &pki{}, 1, 2, DefaultServiceCIDR)
	require.Contains(t, api, "--authorization-mode=Node,RBAC")
	require.Contains(t, api, "--bind-address=127.0.0.1")
	require.True(t, slices.ContainsFunc(api, func(a string) bool { return strings.HasPrefix(a, "--service-account-signing-key-file=") }))
}

func TestPKIServesLoopbackAndAuthenticatesAdmin(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, firstServiceIP(DefaultServiceCIDR))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(p.caPEM))

	serving := readCert(t, p.ServingCert)
	_, err = serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1"})
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(serving.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("10.96.0.1")) }))

	admin := readCert(t, p.AdminCert)
	_, err = admin.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	require.Equal(t, []string{"system:masters"}, admin.Subject.Organization)

	info, err := os.Stat(p.SAKey)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "private keys are not world-readable")
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(data)
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

func TestProvisionerVolumeForClaim(t *testing.T) {
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data-member-0", Namespace: "ns", UID: "abc"},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(StorageClassName),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("2Gi")},
			},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	require.True(t, wantsVolume(claim))
	pv := volumeFor(claim, "/w/volumes/pvc-abc")
	require.Equal(t, "pvc-abc", pv.Name)
	require.Equal(t, "abc", string(pv.Spec.ClaimRef.UID), "pre-bound to exactly this claim")
	require.Equal(t, resource.MustParse("2Gi"), pv.Spec.Capacity[corev1.ResourceStorage])
	require.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, pv.Spec.AccessModes)
	require.Equal(t, corev1.PersistentVolumeReclaimDelete, pv.Spec.PersistentVolumeReclaimPolicy)
	require.Equal(t, Provisioner, pv.Annotations[annProvisionedBy])

	other := claim.DeepCopy()
	other.Spec.StorageClassName = ptr.To("fast")
	require.False(t, wantsVolume(other), "claims of other classes are not ours")
	bound := claim.DeepCopy()
	bound.Spec.VolumeName = "pv-1"
	require.False(t, wantsVolume(bound))
}

func TestProcessRecordsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/"+ProcessesFile, []byte("etcd 123 /bin/etcd\nkwok 456 /bin/kwok\n"), 0o644))
	recs, err := ReadProcessRecords(dir)
	require.NoError(t, err)
	require.Equal(t, []ProcessRecord{{"etcd", 123, "/bin/etcd"}, {"kwok", 456, "/bin/kwok"}}, recs)
	none, err := ReadProcessRecords(t.TempDir())
	require.NoError(t, err)
	require.Empty(t, none)
}
