package local

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Flags for each component, kept as pure functions of the layout so they can
// be read (and tested) in one place.

// layout is where one local cluster keeps its files.
type layout struct {
	root string
}

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.root}, elem...)...)
}
func (l layout) etcdData() string { return l.path("etcd") }
func (l layout) pkiDir() string   { return l.path("pki") }
func (l layout) logDir() string   { return l.path("logs") }
func (l layout) logFile(name string) string {
	return l.path("logs", name+".log")
}
func (l layout) configDir() string  { return l.path("config") }
func (l layout) volumesDir() string { return l.path("volumes") }
func (l layout) kubeconfig() string { return l.path("kubeconfig") }

// owned lists what a provider may delete when it reuses a work dir: its own
// state from an earlier run, never anything else a caller keeps there.
func (l layout) owned() []string {
	return []string{l.etcdData(), l.pkiDir(), l.logDir(), l.configDir(), l.volumesDir(),
		l.kubeconfig(), l.path(ProcessesFile)}
}

func (l layout) mkdirs() error {
	for _, dir := range []string{l.pkiDir(), l.logDir(), l.configDir(), l.volumesDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func url(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// etcdArgs runs a single-member etcd on loopback. fsync is off: the data
// lives as long as one test run and fsync dominates write latency on CI disks.
func etcdArgs(l layout, clientPort, peerPort int) []string {
	return []string{
		"--name=fleetmesh",
		"--data-dir=" + l.etcdData(),
		"--listen-client-urls=" + url(clientPort),
		"--advertise-client-urls=" + url(clientPort),
		"--listen-peer-urls=" + url(peerPort),
		"--initial-advertise-peer-urls=" + url(peerPort),
		"--initial-cluster=fleetmesh=" + url(peerPort),
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

// apiServerArgs configures the parts of kube-apiserver the operators depend
// on: client-certificate authentication for the admin, ServiceAccount token
// issuing (TokenRequest, so operators can run with SA tokens), and Node+RBAC
// authorization so the charts' RBAC is actually enforced.
func apiServerArgs(l layout, p *pki, etcdPort, securePort int, serviceCIDR string) []string {
	return []string{
		"--etcd-servers=" + url(etcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(securePort),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAPub,
		"--service-account-signing-key-file=" + p.SAKey,
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// The "kubernetes" Service would get 127.0.0.1 as endpoint, which
		// Endpoints validation rejects; nothing in the test bed uses it.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}
}

// kcmArgs runs the controllers Pods, StatefulSets, garbage collection,
// ServiceAccount tokens and volume binding need. Node CIDR allocation is off:
// the provider gives every node a loopback spec.podCIDR itself, and kwok
// takes Pod IPs from it. Leader election is off (one replica), and serving is
// off (nothing scrapes it) so no further port is needed.
func kcmArgs(l layout, p *pki) []string {
	return []string{
		"--kubeconfig=" + l.kubeconfig(),
		"--leader-elect=false",
		"--controllers=*",
		"--allocate-node-cidrs=false",
		"--service-account-private-key-file=" + p.SAKey,
		"--root-ca-file=" + p.CACert,
		"--cluster-signing-cert-file=" + p.CACert,
		"--cluster-signing-key-file=" + p.CAKey,
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--concurrent-statefulset-syncs=10",
		"--secure-port=0",
		"--profiling=false",
	}
}

// schedulerConfig raises the client rate limits: 900 Pods at the default 50
// QPS would take the scheduler alone ~20s of binding calls.
func schedulerConfig(l layout) string {
	return strings.Join([]string{
		"apiVersion: kubescheduler.config.k8s.io/v1",
		"kind: KubeSchedulerConfiguration",
		"clientConnection:",
		"  kubeconfig: " + l.kubeconfig(),
		"  qps: 200",
		"  burst: 400",
		"leaderElection:",
		"  leaderElect: false",
		"",
	}, "\n")
}

func schedulerArgs(configPath string) []string {
	return []string{
		"--config=" + configPath,
		"--secure-port=0",
		"--profiling=false",
	}
}

// kwokManageAnnotation marks the Nodes the kwok controller manages; the
// provider puts it on every Node it creates.
const (
	kwokManageAnnotationKey   = "kwok.x-k8s.io/node"
	kwokManageAnnotationValue = "fake"
)

// kwokArgs runs kwok as the fake kubelet of the annotated nodes. --cidr and
// --node-ip are only fallbacks for Nodes without spec.podCIDR or an
// InternalIP; both are loopback so even a fallback never yields a routable
// address. No --server-address: the kubelet API (logs/exec) is not needed,
// so kwok opens no port.
func kwokArgs(l layout, stagesPath string) []string {
	return []string{
		"--kubeconfig=" + l.kubeconfig(),
		"--config=" + stagesPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokManageAnnotationKey + "=" + kwokManageAnnotationValue,
		"--cidr=" + fallbackPodCIDR,
		"--node-ip=" + fallbackNodeIP,
		"--node-lease-duration-seconds=40",
	}
}

// kwokEnv points kwok's work dir into ours so a ~/.kwok/kwok.yaml on the
// machine (which kwok would load before --config) cannot change our stages.
func kwokEnv(l layout) []string {
	return []string{"KWOK_WORKDIR=" + l.path("config", "kwok-home")}
}
