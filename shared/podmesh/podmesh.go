// Package podmesh answers "is this Pod meshed, and how" once, for both
// operators: the mesh operator's STRICT cutover and the fleet operator's
// view of its members must never disagree about the same Pod.
//
// A Pod is meshed by a sidecar when it runs Istio's proxy container (a
// regular container, or a native sidecar: an init container with
// restartPolicy Always); it is meshed by ambient when istio-cni has marked
// it redirected to ztunnel. A sidecar speaks mTLS whatever the namespace's
// data plane is (istio-cni does not capture a Pod that has one), so it
// counts in both; ambient redirection counts only where ztunnel runs, that
// is in an ambient data plane.
package podmesh

import (
	"encoding/json"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// ProxyContainer is the name Istio gives the injected proxy.
const ProxyContainer = "istio-proxy"

// How a Pod is meshed.
type How string

const (
	// None: the Pod speaks plaintext.
	None How = ""
	// Sidecar: the Pod runs Istio's proxy.
	Sidecar How = "sidecar"
	// Ambient: istio-cni redirects the Pod's traffic to ztunnel.
	Ambient How = "ambient"
)

// DataPlane is a data plane as both operators spell it ("ambient" or
// "sidecar", the values of the mesh-dataplane state label).
type DataPlane string

// Data planes.
const (
	DataPlaneAmbient DataPlane = "ambient"
	DataPlaneSidecar DataPlane = "sidecar"
)

// HasProxy reports whether the Pod runs an injected proxy, as a regular
// container or as a native sidecar (an init container that keeps running;
// an init container named istio-proxy that exits is no proxy).
func HasProxy(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == ProxyContainer {
			return true
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == ProxyContainer && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return true
		}
	}
	return false
}

// Redirected reports whether istio-cni marked the Pod captured by ztunnel.
// It reads the metadata only, so a metadata-only list answers it too.
func Redirected(p metav1.Object) bool {
	return p.GetAnnotations()[labels.IstioAmbientRedirection] == "enabled"
}

// Of says how the Pod is meshed. A proxy wins over a redirection mark:
// istio-cni leaves Pods with a sidecar alone, so such a mark is stale.
func Of(p *corev1.Pod) How {
	switch {
	case HasProxy(p):
		return Sidecar
	case Redirected(p):
		return Ambient
	}
	return None
}

// MeshedIn reports whether the Pod speaks mTLS in a mesh whose data plane is
// dp: a sidecar in either data plane, ambient redirection only in ambient
// (without ztunnel a redirection mark carries nothing).
func MeshedIn(dp DataPlane, p *corev1.Pod) bool {
	switch Of(p) {
	case Sidecar:
		return true
	case Ambient:
		return dp == DataPlaneAmbient
	}
	return false
}

// Running reports whether the Pod still takes part in traffic: not
// finished and not being deleted. Only such Pods hold a cutover back.
func Running(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && p.DeletionTimestamp == nil
}

// Where an injected proxy finds istiod: Istio's injection template writes
// the mesh's proxy configuration, discoveryAddress included, into the
// proxy's PROXY_CONFIG variable, and CA_ADDR when certificates come from
// another address.
const (
	proxyConfigEnv = "PROXY_CONFIG"
	caAddressEnv   = "CA_ADDR"
)

// ProxyControlPlanes are the namespaces of the istiod the Pod's injected
// proxy talks to for configuration and certificates, read from what the
// injector wrote into the proxy container (PROXY_CONFIG's discoveryAddress,
// CA_ADDR), sorted. known is false when the Pod runs a proxy that names no
// Service address this function can read (a custom injection template, an
// address outside the cluster): the caller must then assume it may talk to
// any control plane it ever had. A Pod without a proxy talks to none.
func ProxyControlPlanes(p *corev1.Pod) (namespaces []string, known bool) {
	if !HasProxy(p) {
		return nil, true
	}
	var proxy *corev1.Container
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == ProxyContainer {
				proxy = &list[i]
			}
		}
	}
	known = true
	for _, e := range proxy.Env {
		var address string
		switch e.Name {
		case proxyConfigEnv:
			var cfg struct {
				DiscoveryAddress string `json:"discoveryAddress"`
			}
			if json.Unmarshal([]byte(e.Value), &cfg) != nil {
				return nil, false
			}
			address = cfg.DiscoveryAddress
		case caAddressEnv:
			address = e.Value
		default:
			continue
		}
		ns, ok := serviceNamespace(address)
		if !ok {
			return nil, false
		}
		namespaces = append(namespaces, ns)
	}
	if len(namespaces) == 0 {
		return nil, false
	}
	slices.Sort(namespaces)
	return slices.Compact(namespaces), true
}

// serviceNamespace is the namespace of a Service address
// (NAME.NAMESPACE.svc[.DOMAIN][:PORT]).
func serviceNamespace(address string) (string, bool) {
	host := address
	if h, _, err := net.SplitHostPort(address); err == nil {
		host = h
	}
	parts := strings.Split(host, ".")
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[2] != "svc" {
		return "", false
	}
	return parts[1], true
}
