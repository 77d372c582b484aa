package real

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/e2e/cluster/proc"
)

func (p *Provider) socket() string { return p.path("node", "containerd", "containerd.sock") }

// writeConfigs writes containerd's, the CNI network's, the kubelet's,
// kube-proxy's and the node components' kubeconfigs.
func (p *Provider) writeConfigs() error {
	files := map[string]string{
		"node/config/containerd.toml":          p.containerdConfig(),
		"node/cni/net.d/10-fleetmesh.conflist": cniConfig(p.path("node", "cni", "ipam")),
		"node/config/kubelet.yaml":             p.kubeletConfig(),
		"node/config/kube-proxy.yaml":          p.kubeProxyConfig(),
		"node/config/resolv.conf":              "# the real node has no upstream DNS\nnameserver 127.0.0.1\n",
	}
	for rel, body := range files {
		if err := os.WriteFile(p.path(rel), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for name, id := range map[string][]string{
		"kubelet":     {"system:node:" + NodeName, "system:nodes"},
		"kube-proxy":  {"system:kube-proxy"},
		"kube-router": {"fleetmesh-real:kube-router", "system:masters"},
	} {
		if err := p.writeNodeKubeconfig(p.path("node", "config", name+".kubeconfig"), id[0], id[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// writeNodeKubeconfig writes a kubeconfig for a node component: the API
// server through the host-side proxy, verified as "localhost" (a name the
// serving certificate carries).
func (p *Provider) writeNodeKubeconfig(path, user string, groups ...string) error {
	cert, key, ca, err := p.control.IssueClientCert(user, groups...)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["real"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://%s:%d", HostAddr, APIPort),
		CertificateAuthorityData: ca, TLSServerName: "localhost"}
	cfg.AuthInfos["real"] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["real"] = &clientcmdapi.Context{Cluster: "real", AuthInfo: "real"}
	cfg.CurrentContext = "real"
	return clientcmd.WriteToFile(*cfg, path)
}

// containerdConfig: state under the work dir, the CNI plugins of bin/node,
// the pause image built here as sandbox, Debian's runc with cgroupfs, and
// restrict_oom_score_adj (this VM lacks CAP_SYS_RESOURCE: without it every
// container fails with "can't get final child's PID from pipe").
func (p *Provider) containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[debug]
  level = "info"

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %q

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    enable_unprivileged_ports = true
    enable_unprivileged_icmp = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`, p.path("node", "containerd", "root"), p.path("node", "containerd", "state"), p.socket(), PauseImage,
		p.opts.Runc, filepath.Join(p.binDir, "node", "cni"), p.path("node", "cni", "net.d"))
}

// cniConfig is one bridge (cni0) for the node's Pods with host-local
// addresses from PodCIDR. ipMasq lets Pods reach the API server (the
// "kubernetes" Service's endpoint is the host side of the veth, which has no
// route back to PodCIDR); Pod-to-Pod traffic stays unmasqueraded, so
// NetworkPolicy sees the real source.
func cniConfig(ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "fleetmesh",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`, ipamDir, PodCIDR)
}

// kubeletConfig: cgroup v1 with cgroupfs under CgroupRoot, swap tolerated,
// image GC and evictions off (the images exist only as imported), its own
// dirs, the API server authenticating anonymously (the bed's kube-apiserver
// has no kubelet client certificate) for logs and exec.
func (p *Provider) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDNS: [%s]
clusterDomain: cluster.local
resolvConf: %s
podLogsDir: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
maxPods: 110
serializeImagePulls: false
syncFrequency: 5s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
protectKernelDefaults: false
`, CgroupRoot, p.socket(), NodeAddr, DNSServiceIP, p.path("node", "config", "resolv.conf"), p.path("node", "pod-logs"))
}

// kubeProxyConfig: iptables mode; conntrack left as it is (0: do not set;
// nf_conntrack_max is global and only the host's to change).
func (p *Provider) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  syncPeriod: 10s
  minSyncPeriod: 0s
`, p.path("node", "config", "kube-proxy.kubeconfig"), ClusterCIDR, NodeName, NodeAddr)
}

func (p *Provider) startContainerd(ctx context.Context) error {
	_, err := p.startNodeProc("containerd", filepath.Join(p.binDir, "node", "containerd"),
		"--config", p.path("node", "config", "containerd.toml"))
	if err != nil {
		return err
	}
	return p.wait(ctx, "containerd's socket", func(context.Context) (bool, error) {
		c, err := net.DialTimeout("unix", p.socket(), time.Second)
		if err != nil {
			return false, nil
		}
		_ = c.Close()
		return true, nil
	})
}

// importImages loads the archives into containerd's k8s.io namespace (the
// CRI's), unpacked for the CRI's snapshotter.
func (p *Provider) importImages(ctx context.Context) error {
	for _, a := range p.opts.ImageArchives {
		start := time.Now()
		if _, err := run(p.inNode(filepath.Join(p.binDir, "node", "ctr"), "--address", p.socket(), "-n", "k8s.io",
			"images", "import", "--snapshotter", "overlayfs", a)...); err != nil {
			return fmt.Errorf("import %s: %w", a, err)
		}
		p.logf("imported %s (%s)", filepath.Base(a), time.Since(start).Round(10*time.Millisecond))
	}
	out, err := run(p.inNode(filepath.Join(p.binDir, "node", "ctr"), "--address", p.socket(), "-n", "k8s.io", "images", "ls", "-q")...)
	if err != nil {
		return err
	}
	for _, want := range []string{PauseImage, CoreDNSImage} {
		if !strings.Contains(out, want) {
			return fmt.Errorf("image %s not in the node after import (has: %s)", want, strings.Join(strings.Fields(out), ", "))
		}
	}
	return nil
}

func (p *Provider) startKubelet(ctx context.Context, client kubernetes.Interface) error {
	_, err := p.startNodeProc("kubelet", filepath.Join(p.binDir, "node", "kubelet"),
		"--config="+p.path("node", "config", "kubelet.yaml"),
		"--kubeconfig="+p.path("node", "config", "kubelet.kubeconfig"),
		"--root-dir="+p.path("node", "kubelet"),
		"--cert-dir="+p.path("node", "kubelet", "pki"),
		"--hostname-override="+NodeName,
		"--node-ip="+NodeAddr,
		"--v=1")
	if err != nil {
		return err
	}
	if err := p.wait(ctx, "the node to register", func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	// kube-router's firewall reads the node's Pod range (no controller
	// allocates it here).
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, PodCIDR, PodCIDR)
	if _, err := client.CoreV1().Nodes().Patch(ctx, NodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("node podCIDR: %w", err)
	}
	return p.wait(ctx, "the node Ready", func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// startAddons: the "kubernetes" Service's endpoint, kube-proxy, kube-router's
// firewall and CoreDNS; returns once CoreDNS is Ready.
func (p *Provider) startAddons(ctx context.Context, client kubernetes.Interface) error {
	if err := apiEndpoint(ctx, client); err != nil {
		return err
	}
	if _, err := p.startNodeProc("kube-proxy", filepath.Join(p.binDir, "node", "kube-proxy"),
		"--config="+p.path("node", "config", "kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}
	if _, err := p.startNodeProc("kube-router", filepath.Join(p.binDir, "node", "kube-router"),
		"--kubeconfig="+p.path("node", "config", "kube-router.kubeconfig"),
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--run-loadbalancer=false",
		"--hostname-override="+NodeName,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--enable-ipv6=false",
		"--health-port=20244",
		"--metrics-port=0",
		"--iptables-sync-period=10s",
		"--v=1"); err != nil {
		return err
	}
	if err := coreDNS(ctx, client); err != nil {
		return err
	}
	return p.wait(ctx, "CoreDNS Ready", func(ctx context.Context) (bool, error) {
		d, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return d.Status.ReadyReplicas >= 1, nil
	})
}

// apiEndpoint points the "kubernetes" Service (which the API server creates;
// the bed's runs with --endpoint-reconciler-type=none) at the host-side
// proxy, so in-cluster clients reach the API server.
func apiEndpoint(ctx context.Context, client kubernetes.Interface) error {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default", Labels: map[string]string{
			discoveryv1.LabelServiceName: "kubernetes", discoveryv1.LabelManagedBy: "fleetmesh-real"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{HostAddr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(APIPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// coreDNS runs CoreDNS (bin/node/coredns in CoreDNSImage) as the kube-dns
// Deployment and Service, answering cluster.local only.
func coreDNS(ctx context.Context, client kubernetes.Interface) error {
	const ns, name = "kube-system", "coredns"
	labels := map[string]string{"k8s-app": "kube-dns"}
	corefile := `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`
	objs := []func() error{
		func() error {
			_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
					{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
				}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Data: map[string]string{"Corefile": corefile}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels},
				Spec: corev1.ServiceSpec{ClusterIP: DNSServiceIP, Selector: labels, Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To(int32(1)),
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{
							ServiceAccountName: name,
							DNSPolicy:          corev1.DNSDefault,
							PriorityClassName:  "system-cluster-critical",
							SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
							Containers: []corev1.Container{{
								Name: "coredns", Image: CoreDNSImage, ImagePullPolicy: corev1.PullNever,
								Args: []string{"-conf", "/etc/coredns/Corefile"},
								Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
									{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP}},
								ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
									PeriodSeconds: 1},
								SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
									Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, ReadOnlyRootFilesystem: ptr.To(true)},
								VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns"}},
							}},
							Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
								LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}},
						},
					},
				}}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("CoreDNS: %w", err)
		}
	}
	return nil
}

// wait polls cond every 100 ms, failing early if any node component (or
// the control plane) exits.
func (p *Provider) wait(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	return proc.Poll(ctx, what, p.Healthy, cond)
}
