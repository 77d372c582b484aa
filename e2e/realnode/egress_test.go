//go:build realnode

package realnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/real"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

// memberContainer is the celld container of every member Pod, and
// standinBinary the stand-in image's entrypoint, which also has -dial.
const (
	memberContainer = "celld"
	standinBinary   = "/celld-standin"
)

// execDial runs the stand-in's -dial inside a member's own container (its
// network namespace, so its NetworkPolicy's egress applies) with kubectl
// exec, and returns one result per address, in order.
func execDial(t *testing.T, e *env, ns, pod string, addrs []string) []dialResult {
	t.Helper()
	bin, _ := cluster.BinDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", e.c.Kubeconfig, "exec", "-n", ns, pod, "-c", memberContainer,
		"--", standinBinary, "-dial", strings.Join(addrs, ","), "-dial-timeout", "2s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl exec %s/%s -- %s -dial: %v\n%s%s", ns, pod, standinBinary, err, stdout.String(), stderr.String())
	}
	var out []dialResult
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r dialResult
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Addr != "" {
			out = append(out, r)
		}
	}
	if len(out) != len(addrs) {
		t.Fatalf("kubectl exec %s/%s: %d results for %d addresses: %s", ns, pod, len(out), len(addrs), stdout.String())
	}
	return out
}

// startListener runs the stand-in image serving 8080/8081 as a plain Pod
// (labels app=other, selected by no NetworkPolicy) and returns its IP: a
// target that listens, so a refused dial to it is the dialer's policy.
func startListener(t *testing.T, e *env, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "other"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "listener", Image: e.standin, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-startup-delay", "0s"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if _, err := e.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("listener %s/%s: %v", ns, name, err)
	}
	var ip string
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return false, nil
		}
		ip = p.Status.PodIP
		return true, nil
	})
	if err != nil {
		t.Fatalf("listener %s/%s not running: %v", ns, name, err)
	}
	return ip
}

func podIP(t *testing.T, e *env, ns, name string) string {
	t.Helper()
	p, err := e.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || p.Status.PodIP == "" {
		t.Fatalf("Pod %s/%s has no IP (%v)", ns, name, err)
	}
	return p.Status.PodIP
}

func coreDNSIP(t *testing.T, e *env) string {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("no CoreDNS Pod with an IP (%v)", err)
	}
	return pods.Items[0].Status.PodIP
}

// egressRow is one measured outbound connection of a member: where, what
// the networking docs' table says, and (where it models the row) what
// kubectl celld access says.
type egressRow struct {
	What   string
	Addr   string
	Want   bool   // docs/networking.md's table (and the Kubernetes semantics it rests on)
	Model  string // the egress entry of kubectl celld access that models it: "CLASS NAME PORT"; empty: not modelled
	Packet dialResult
}

type accessEgress struct {
	Member string `json:"member"`
	Target struct {
		Class     string `json:"class"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"target"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Allowed  bool   `json:"allowed"`
	Unknown  bool   `json:"unknown"`
}

func accessEgressReport(t *testing.T, e *env, ns, fleet string) []accessEgress {
	t.Helper()
	cmd := exec.Command(e.plugin, "access", fleet, "-n", ns, "-o", "json", "--kubeconfig", e.c.Kubeconfig, "--operator-namespace", fleetNS)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("kubectl celld access %s: %v\n%s", fleet, err, stderr.String())
		}
	}
	var rep struct {
		Egress []accessEgress `json:"egress"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("kubectl celld access -o json: %v", err)
	}
	return rep.Egress
}

// memberEgress measures what member 0 of a fleet of (at least) two can dial,
// from inside its own container: its peer by its peer DNS name and by IP on
// 8081 (allowed), the peer's application port 8080 (no egress rule: denied),
// cluster DNS on TCP 53 at the CoreDNS Pod and at the kube-dns Service
// (allowed), CoreDNS's other port 8181 (denied: DNS is admitted on 53 only),
// a listening Pod of the fleet's namespace and of another namespace on 8080
// (denied), and the API server, directly (198.18.0.1:6443) and through the
// kubernetes Service (10.96.0.1:443; kube-proxy rewrites it to :6443 before
// the firewall judges it, so the any-address 443 rule does not admit it).
// Every row must match the docs' table, and kubectl celld access where one of
// its egress entries models the row. The listeners and CoreDNS's 8181 are
// dialled from a node-network Pod too, so a refusal is the member's policy,
// not a closed port.
func memberEgress(t *testing.T, e *env, ns, fleet string) {
	t.Helper()
	ctx := context.Background()
	m0, m1 := fleet+"-0", fleet+"-1"
	peerIP, dnsIP := podIP(t, e, ns, m1), coreDNSIP(t, e)
	here := startListener(t, e, ns, "listener")
	there := startListener(t, e, "other", "listener")
	defer func() {
		_ = e.cs.CoreV1().Pods(ns).Delete(ctx, "listener", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = e.cs.CoreV1().Pods("other").Delete(ctx, "listener", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	rows := []egressRow{
		{What: "peer by its peer DNS name, 8081", Addr: fmt.Sprintf("%s.%s-peers.%s.svc:8081", m1, fleet, ns), Want: true, Model: "peer " + ns + "/" + m1 + " 8081"},
		{What: "peer by IP, 8081", Addr: peerIP + ":8081", Want: true, Model: "peer " + ns + "/" + m1 + " 8081"},
		{What: "peer's application port 8080", Addr: peerIP + ":8080", Want: false},
		{What: "cluster DNS, CoreDNS Pod, TCP 53", Addr: dnsIP + ":53", Want: true, Model: "dns (cluster DNS) 53"},
		{What: "cluster DNS, kube-dns Service, TCP 53", Addr: real.DNSServiceIP + ":53", Want: true, Model: "dns (cluster DNS) 53"},
		{What: "CoreDNS's readiness port 8181", Addr: dnsIP + ":8181", Want: false},
		{What: "a listening Pod of " + ns + ", 8080", Addr: here + ":8080", Want: false, Model: "other (another Pod of " + ns + ") 8080"},
		{What: "a listening Pod of another namespace, 8080", Addr: there + ":8080", Want: false, Model: "other (a Pod of another namespace) 8080"},
		{What: "the API server directly, 6443", Addr: fmt.Sprintf("%s:%d", real.HostAddr, real.APIPort), Want: false},
		{What: "the API server by the kubernetes Service, 443 (-> 6443)", Addr: "10.96.0.1:443", Want: false},
	}
	// kube-router learns the listeners' addresses within its sync.
	time.Sleep(3 * time.Second)
	var addrs []string
	for _, r := range rows {
		addrs = append(addrs, r.Addr)
	}
	results := execDial(t, e, ns, m0, addrs)
	model := map[string]accessEgress{}
	for _, eg := range accessEgressReport(t, e, ns, fleet) {
		if eg.Member != m0 || eg.Protocol != "TCP" {
			continue
		}
		model[fmt.Sprintf("%s %s %d", eg.Target.Class, eg.Target.Name, eg.Port)] = eg
	}
	var b strings.Builder
	fmt.Fprintf(&b, "egress of %s/%s (packet | docs | kubectl celld access):\n", ns, m0)
	for i := range rows {
		r := &rows[i]
		r.Packet = results[i]
		mark, access := "  ", "(not modelled)"
		if r.Packet.Open != r.Want {
			mark = "!!"
			t.Errorf("%s -> %s (%s): packets say %s (%s), docs/networking.md's table %s", m0, r.Addr, r.What, verdict(r.Packet.Open), r.Packet.Error, verdict(r.Want))
		}
		if strings.Contains(r.Packet.Error, "no such host") {
			t.Errorf("%s -> %s: the name did not resolve: %s", m0, r.Addr, r.Packet.Error)
		}
		if r.Model != "" {
			eg, ok := model[r.Model]
			switch {
			case !ok:
				t.Errorf("kubectl celld access has no egress entry %q for %s", r.Model, m0)
			case eg.Unknown || eg.Allowed != r.Packet.Open:
				mark = "!!"
				t.Errorf("%s -> %s (%s): packets say %s, kubectl celld access (%s) %s (unknown %v)", m0, r.Addr, r.What, verdict(r.Packet.Open), r.Model, verdict(eg.Allowed), eg.Unknown)
			}
			if ok {
				access = verdict(eg.Allowed) + " (" + r.Model + ")"
			}
		}
		fmt.Fprintf(&b, "  %s %-58s %-28s %-7s | %-7s | %s\n", mark, r.What, r.Addr, verdict(r.Packet.Open), verdict(r.Want), access)
	}
	t.Log(b.String())

	// The same listeners from the node's network (a hostNetwork Pod, like
	// the kubelet): they listen, so the member's refusals above are its
	// NetworkPolicy's.
	nodeDial(t, e, "listeners", []string{here + ":8080", there + ":8080", dnsIP + ":8181"}, func(addr string, r dialResult) {
		if !r.Open {
			t.Errorf("from the node, %s does not answer (%s): the member's refusal of it proves nothing", addr, r.Error)
		}
	})
}

// nodeDial runs a probe Pod in the node's network namespace (hostNetwork,
// in "default": where the kubelet's probes come from) that dials addrs, and
// hands each result to check.
func nodeDial(t *testing.T, e *env, round string, addrs []string, check func(string, dialResult)) {
	t.Helper()
	ctx := context.Background()
	name := "node-" + round
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: e.standin, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-dial", strings.Join(addrs, ","), "-dial-timeout", "2s"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if _, err := e.cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node probe: %v", err)
	}
	defer func() {
		_ = e.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	for i, r := range probeResults(t, e, "default", name, len(addrs)) {
		check(addrs[i], r)
	}
}

// kubeletProbes: the kubelet's readiness probes (GET /state on 8081) come
// from the member's own node, and the fleet's policy admits 8081 only from
// members and the operator, with no ipBlock: the members are Ready all the
// same, because traffic from a Pod's own node is always allowed (the
// Kubernetes NetworkPolicy semantics; kube-router accepts locally sourced
// traffic before the policy chains). Measured: the members Ready with no
// readiness failure since, and a Pod in the node's network reaching both
// member ports. kubectl celld access does not model the node (outside
// ambient it has no kubelet-probe caller), so its verdict for that Pod is
// logged, not compared.
func kubeletProbes(t *testing.T, e *env, ns, fleet string) {
	t.Helper()
	ctx := context.Background()
	np, err := e.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, fleet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range np.Spec.Ingress {
		for _, p := range r.From {
			if p.IPBlock != nil {
				t.Errorf("the fleet's policy has an ipBlock ingress peer %s: the node's traffic would be admitted by a rule, not by the node exemption this checks", p.IPBlock.CIDR)
			}
		}
	}
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + fleet})
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, p := range pods.Items {
		if !podReady(&p) {
			t.Errorf("member %s not Ready: the kubelet's readiness probe does not reach it under the policy", p.Name)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				t.Errorf("member %s container %s restarted %d time(s)", p.Name, cs.Name, cs.RestartCount)
			}
		}
		addrs = append(addrs, p.Status.PodIP+":8081", p.Status.PodIP+":8080")
	}
	evs, err := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ev := range evs.Items {
			if ev.Reason == "Unhealthy" && strings.HasPrefix(ev.InvolvedObject.Name, fleet+"-") {
				// A member reports Starting (503) for its first second, and
				// the very first probe may come before it listens
				// ("connection refused", seen on the first run): neither is
				// the network. A policy drop would time out.
				if strings.Contains(ev.Message, "timeout") || strings.Contains(ev.Message, "deadline") {
					t.Errorf("readiness probe of %s failed on the network: %s", ev.InvolvedObject.Name, ev.Message)
				} else {
					t.Logf("readiness probe event of %s (x%d): %s", ev.InvolvedObject.Name, ev.Count, ev.Message)
				}
			}
		}
	}
	var b strings.Builder
	nodeDial(t, e, "kubelet", addrs, func(addr string, r dialResult) {
		fmt.Fprintf(&b, "  node (%s's network) -> %-22s %s %s\n", real.NodeName, addr, verdict(r.Open), r.Error)
		if !r.Open {
			t.Errorf("from the node, member port %s is %s (%s): the kubelet's probes come from there and traffic from a Pod's own node is always allowed", addr, verdict(r.Open), r.Error)
		}
	})
	t.Logf("kubelet's side of %s/%s (readiness probes GET /state on 8081 from the node; every member Ready):\n%s", ns, fleet, b.String())
}

// peersBeforeReadiness: a fleet whose members report Starting for ten
// minutes (the stand-in's STANDIN_STARTUP_DELAY through spec.env: the
// readiness probe fails, so no member is Ready) still has its members'
// peer names resolving through CoreDNS, as seed 000 and docs/networking.md
// say (the peer Service publishes addresses before readiness): a client
// dials POD.FLEET-peers.NAMESPACE.svc:8080, member 0 dials member 1's
// :8081 by that name from inside its container, while the application
// Service (ready endpoints only) has no endpoint; no member is Ready before
// or after.
func peersBeforeReadiness(e *env) bool {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const ns, name = "early", "early"
	createNS(t, e, ns, nil)
	start := time.Now()
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fleetv1.CelldFleetSpec{Replicas: ptr.To[int32](2), Image: e.standin, ImagePullPolicy: corev1.PullNever,
			Env: []corev1.EnvVar{{Name: "STANDIN_STARTUP_DELAY", Value: "10m"}}},
	}
	if err := e.k8s.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	notReady := func(when string) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if podReady(&p) {
				t.Errorf("%s: member %s is Ready: readiness was not held back", when, p.Name)
			}
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + name})
		if err != nil || len(pods.Items) != 2 {
			return false, nil
		}
		for _, p := range pods.Items {
			started := false
			for _, cs := range p.Status.ContainerStatuses {
				started = cs.State.Running != nil
			}
			if p.Status.PodIP == "" || !started {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the 2 members of %s/%s did not run: %v", ns, name, err)
	}
	e.timing("  2 members running, not Ready (Starting)", start)
	notReady("before the dials")
	start = time.Now()
	peer := func(i, port int) string { return fmt.Sprintf("%s-%d.%s-peers.%s.svc:%d", name, i, name, ns, port) }
	app := fmt.Sprintf("%s.%s.svc:8080", name, ns)
	startProbe(t, e, caller{NS: ns, Name: "client", Labels: map[string]string{"celld.eric.dev/client-of": name}}, "early", []string{peer(0, 8080), peer(1, 8080), app})
	res := probeResults(t, e, ns, "client-early", 3)
	for _, r := range res[:2] {
		if !r.Open {
			t.Errorf("client -> %s before readiness: %s (the peer Service publishes not-ready addresses; the policy admits clients on 8080)", r.Addr, r.Error)
		} else {
			t.Logf("client -> %s before readiness: connected by its peer name", r.Addr)
		}
	}
	if res[2].Open {
		t.Errorf("client -> %s connected while no member is Ready: the application Service should have no endpoint", app)
	} else {
		t.Logf("client -> %s (application Service, ready endpoints only): %s, as expected", app, res[2].Error)
	}
	for _, r := range execDial(t, e, ns, name+"-0", []string{peer(1, 8081)}) {
		if !r.Open {
			t.Errorf("member %s-0 -> %s before readiness: %s", name, r.Addr, r.Error)
		} else {
			t.Logf("member %s-0 -> %s before readiness: connected (DNS, peer egress and ingress)", name, r.Addr)
		}
	}
	notReady("after the dials")
	e.timing("  peer names resolved and dialled before readiness", start)
	_ = e.cs.CoreV1().Pods(ns).Delete(ctx, "client-early", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err := e.k8s.Delete(ctx, f); err != nil {
		t.Error(err)
	}
	return !t.Failed()
}
