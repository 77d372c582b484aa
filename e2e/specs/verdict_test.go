//go:build e2e

package specs

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/authzeval"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// hbonePort is where ztunnel delivers ambient traffic to a captured Pod.
const hbonePort = 15008

// caller is the source of a connection in a truth table: a Pod that need not
// exist (only its namespace, labels and identity matter), in the mesh or not.
type caller struct {
	name, namespace string
	labels          map[string]string
	serviceAccount  string
	// meshed: the caller speaks mTLS with the identity of its ServiceAccount
	// (an ambient-enrolled namespace, or a sidecar).
	meshed bool
}

func (c caller) String() string { return c.namespace + "/" + c.name }

func (c caller) principal() string {
	return fmt.Sprintf("cluster.local/ns/%s/sa/%s", c.namespace, c.serviceAccount)
}

// verdict is what each layer decides about one connection, from the live
// objects both operators wrote: the NetworkPolicies (judged by cyclonus, as
// a conformant CNI would) and the Istio PeerAuthentications and
// AuthorizationPolicies (judged by shared/authzeval, as ztunnel would at L4).
type verdict struct {
	network, istio bool
	why            string
}

func (v verdict) allowed() bool { return v.network && v.istio }

// judge decides a TCP connection from src to port of the live Pod dst. When
// both ends are captured by ambient, the packet the CNI sees goes to the
// HBONE port (and leaves the caller for it); Istio then judges the inner
// port.
func judge(t *testing.T, src caller, dst *corev1.Pod, port int, dstAmbient bool) verdict {
	t.Helper()
	ctx := context.Background()
	var policies []*networkingv1.NetworkPolicy
	for _, ns := range uniq(src.namespace, dst.Namespace) {
		list := &networkingv1.NetworkPolicyList{}
		require.NoError(t, k8s.List(ctx, list, client.InNamespace(ns)))
		for i := range list.Items {
			policies = append(policies, &list.Items[i])
		}
	}
	wirePort := port
	if src.meshed && dstAmbient {
		wirePort = hbonePort
	}
	np := matcher.BuildNetworkPolicies(false, policies).IsTrafficAllowed(&matcher.Traffic{
		Source: &matcher.TrafficPeer{IP: "127.250.0.1", Internal: &matcher.InternalPeer{
			Namespace: src.namespace, NamespaceLabels: namespaceLabels(t, src.namespace), PodLabels: src.labels}},
		Destination: &matcher.TrafficPeer{IP: dst.Status.PodIP, Internal: &matcher.InternalPeer{
			Namespace: dst.Namespace, NamespaceLabels: namespaceLabels(t, dst.Namespace), PodLabels: dst.Labels}},
		ResolvedPort: wirePort,
		Protocol:     corev1.ProtocolTCP,
	})

	pas := listIstio(t, "PeerAuthentication", dst.Namespace)
	var aps []authzeval.Policy
	for _, ap := range listIstio(t, "AuthorizationPolicy", dst.Namespace) {
		aps = append(aps, authzeval.FromUnstructured(&ap, dst.Labels))
	}
	req := authzeval.Request{MTLS: src.meshed, Port: port}
	if src.meshed {
		req.Principal, req.Namespace = src.principal(), src.namespace
	}
	mode := authzeval.MTLSMode(pas, dst.Labels, port)
	istio := authzeval.Evaluate(mode, aps, req)
	return verdict{
		network: np.IsAllowed(),
		istio:   istio.Allowed,
		why:     fmt.Sprintf("network policy on :%d %s; istio (%s) %s", wirePort, map[bool]string{true: "admits", false: "denies"}[np.IsAllowed()], mode, istio.Why),
	}
}

// namespaceLabels are the live labels of a namespace; one that does not
// exist gets the label the API server would give it.
func namespaceLabels(t *testing.T, name string) map[string]string {
	ns := &corev1.Namespace{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, ns); err != nil {
		require.True(t, client.IgnoreNotFound(err) == nil, err)
		return map[string]string{labels.NamespaceName: name}
	}
	return ns.Labels
}

func listIstio(t *testing.T, kind, namespace string) []unstructured.Unstructured {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("security.istio.io/v1")
	list.SetKind(kind + "List")
	require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(namespace)))
	return list.Items
}

func uniq(values ...string) []string {
	var out []string
	for _, v := range values {
		if !contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// flowRow is one expected row of a connectivity truth table.
type flowRow struct {
	src  caller
	port int
	want bool
	// istioAlone, when set, is what the Istio layer must decide by itself:
	// for cross-namespace rows, isolation must hold even where a CNI does not
	// enforce NetworkPolicy.
	istioAlone *bool
	why        string
}

// checkTable judges every row against dst and reports the whole table on a
// mismatch, so one failure shows what both layers did everywhere.
func checkTable(t *testing.T, dst *corev1.Pod, dstAmbient bool, rows []flowRow) {
	t.Helper()
	var table []string
	failed := false
	for _, r := range rows {
		v := judge(t, r.src, dst, r.port, dstAmbient)
		mark := "ok"
		if v.allowed() != r.want || (r.istioAlone != nil && v.istio != *r.istioAlone) {
			mark, failed = "WRONG", true
		}
		table = append(table, fmt.Sprintf("%-5s %-34s -> :%d  %-5s (%s) want %s: %s", mark, r.src, r.port,
			map[bool]string{true: "allow", false: "deny"}[v.allowed()], v.why,
			map[bool]string{true: "allow", false: "deny"}[r.want], r.why))
	}
	if failed {
		t.Errorf("connectivity to %s/%s:\n%s", dst.Namespace, dst.Name, strings.Join(table, "\n"))
	} else {
		t.Logf("connectivity to %s/%s:\n%s", dst.Namespace, dst.Name, strings.Join(table, "\n"))
	}
}
