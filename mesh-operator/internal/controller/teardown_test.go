package controller

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
)

func TestDecideNamespace(t *testing.T) {
	const mesh = types.UID("mesh-uid")
	obj := func(group, kind, name string, uid types.UID, owners ...types.UID) foundObject {
		o := foundObject{Group: group, Kind: kind, Namespace: "istio-system", Name: name, UID: uid}
		for _, u := range owners {
			o.Owners = append(o.Owners, metav1.OwnerReference{UID: u})
		}
		return o
	}
	bookkeeping := []foundObject{
		obj("", "ServiceAccount", "default", "sa"),
		obj("", "ConfigMap", "kube-root-ca.crt", "root"),
		obj("", "Event", "istiod.1", "ev1"),
		obj("events.k8s.io", "Event", "istiod.2", "ev2"),
		obj("coordination.k8s.io", "Lease", "istio-leader", "lease"),
		obj("metrics.k8s.io", "PodMetrics", "istiod-abc", "pm"),
		obj("custom.metrics.k8s.io", "MetricValue", "requests", "mv"),
	}
	terminating := obj("", "Secret", "old", "old")
	terminating.Terminating = true
	for name, tc := range map[string]struct {
		objs   []foundObject
		unread []string
		delete bool
		others []string
	}{
		"empty":                                   {delete: true},
		"only what Kubernetes keeps there":        {objs: bookkeeping, delete: true},
		"an object the ServiceMesh owns":          {objs: []foundObject{obj("", "ConfigMap", "ours", "c", mesh)}, delete: true},
		"an object being deleted anyway":          {objs: []foundObject{terminating}, delete: true},
		"a tenant's plug-in CA":                   {objs: append([]foundObject{obj("", "Secret", "cacerts", "s")}, bookkeeping...), others: []string{"Secret cacerts"}},
		"a Kubernetes default name, but a Secret": {objs: []foundObject{obj("", "Secret", "default", "s")}, others: []string{"Secret default"}},
		"a user's Deployment holds, its ReplicaSet and Pods are judged through it": {
			objs: []foundObject{
				obj("apps", "Deployment", "kiali", "d"), obj("apps", "ReplicaSet", "kiali-1", "rs", "d"), obj("", "Pod", "kiali-1-x", "p", "rs"),
			},
			others: []string{"Deployment kiali"},
		},
		"a dependent of the operator's object goes with it": {
			objs: []foundObject{obj("", "ConfigMap", "ours", "c", mesh), obj("", "Secret", "derived", "s", "c")}, delete: true,
		},
		"a dependent of something outside the namespace is someone else's": {
			objs: []foundObject{obj("", "Secret", "issued", "s", "cluster-issuer")}, others: []string{"Secret issued"},
		},
		"the Endpoints of a Service found there are judged through it": {
			objs:   []foundObject{obj("", "Service", "gw", "svc"), obj("", "Endpoints", "gw", "ep")},
			others: []string{"Service gw"},
		},
		"Endpoints without their Service are someone's": {
			objs: []foundObject{obj("", "Endpoints", "external", "ep")}, others: []string{"Endpoints external"},
		},
		"a failed list keeps it (unknown is not empty)": {objs: bookkeeping, unread: []string{"listing secrets: forbidden"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := decideNamespace("istio-system", mesh, tc.objs, tc.unread)
			assert.Equal(t, tc.delete, got.Deleted)
			assert.Equal(t, tc.others, got.Others)
			assert.Equal(t, tc.unread, got.Unread)
		})
	}
}

func TestNamespaceTeardownCondition(t *testing.T) {
	_, _, ok := namespaceTeardownCondition(nil)
	assert.False(t, ok, "no namespace created: nothing to report")

	reason, msg, ok := namespaceTeardownCondition([]namespaceOutcome{{Name: "ztunnel", Deleted: true}, {Name: "istio-cni", Deleted: true}})
	assert.True(t, ok)
	assert.Equal(t, v1alpha1.ReasonNamespacesRemoved, reason)
	assert.Contains(t, msg, "ztunnel, istio-cni")

	reason, msg, _ = namespaceTeardownCondition([]namespaceOutcome{
		{Name: "ztunnel", Deleted: true},
		{Name: "istio-system", Others: []string{"Secret cacerts"}},
		{Name: "istio-cni", Unread: []string{"discovery of example.com/v1 failed"}},
	})
	assert.Equal(t, v1alpha1.ReasonNamespacesKept, reason)
	assert.Contains(t, msg, "istio-system: it holds objects the operator did not put there: Secret cacerts")
	assert.Contains(t, msg, "istio-cni: what it holds could not be read entirely (discovery of example.com/v1 failed)")
	assert.Contains(t, msg, "Deleted ztunnel")
}

func TestDecideCRDs(t *testing.T) {
	const (
		pa    = "peerauthentications.security.istio.io"
		vs    = "virtualservices.networking.istio.io"
		istio = "istios.sailoperator.io"
	)
	for name, tc := range map[string]struct {
		uses          []crdUse
		controlPlanes []string
		cpUnread      string
		remove        []string
		kept          []string
		why           map[string]string
	}{
		"nothing uses them": {uses: []crdUse{{Name: pa}, {Name: istio}}, remove: []string{istio, pa}},
		"a tenant's policy keeps its CRD only": {
			uses:   []crdUse{{Name: pa, Others: []string{"PeerAuthentication shop/strict"}}, {Name: vs}, {Name: istio}},
			remove: []string{istio, vs}, kept: []string{pa}, why: map[string]string{pa: "PeerAuthentication shop/strict"},
		},
		"a control plane the operator did not install keeps every Istio CRD, not Sail's": {
			uses: []crdUse{{Name: pa}, {Name: vs}, {Name: istio}}, controlPlanes: []string{"Deployment istio-system/istiod"},
			remove: []string{istio}, kept: []string{pa, vs}, why: map[string]string{vs: "Deployment istio-system/istiod"},
		},
		"control planes that could not be listed keep the Istio CRDs": {
			uses: []crdUse{{Name: pa}, {Name: istio}}, cpUnread: "forbidden",
			remove: []string{istio}, kept: []string{pa}, why: map[string]string{pa: "could not be listed: forbidden"},
		},
		"objects that could not be listed keep their CRD": {
			uses:   []crdUse{{Name: istio, Unread: "the server is currently unable to handle the request"}},
			remove: nil, kept: []string{istio}, why: map[string]string{istio: "its objects could not be listed"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			remove, kept := decideCRDs(tc.uses, tc.controlPlanes, tc.cpUnread)
			assert.Equal(t, tc.remove, remove)
			var keptNames []string
			for _, u := range tc.uses {
				if _, ok := kept[u.Name]; ok {
					keptNames = append(keptNames, u.Name)
				}
			}
			assert.ElementsMatch(t, tc.kept, keptNames)
			for n, frag := range tc.why {
				assert.Contains(t, kept[n], frag, n)
			}
		})
	}
}

func TestSailUninstalledOutcome(t *testing.T) {
	reason, msg := sailUninstalledOutcome("sail-operator", 4, nil, nil)
	assert.Equal(t, v1alpha1.ReasonSailOperatorUninstalled, reason)
	assert.Equal(t, "Uninstalled the Sail Operator from sail-operator and removed 4 CRDs it had created.", msg)

	reason, msg = sailUninstalledOutcome("sail-operator", 3, nil, []string{"widgets.example.com"})
	assert.Equal(t, v1alpha1.ReasonUntrustedCRDsIgnored, reason)
	assert.Contains(t, msg, "widgets.example.com")

	reason, msg = sailUninstalledOutcome("sail-operator", 3, map[string]string{"peerauthentications.security.istio.io": "objects of it that the operator did not create exist (PeerAuthentication shop/strict)"},
		[]string{"widgets.example.com"})
	assert.Equal(t, v1alpha1.ReasonSailCRDsKept, reason, "a kept CRD outranks an ignored name")
	assert.True(t, strings.HasPrefix(msg, "Uninstalled the Sail Operator from sail-operator and removed 3 CRDs"), msg)
	assert.Contains(t, msg, "widgets.example.com")
	assert.Contains(t, msg, "peerauthentications.security.istio.io: objects of it that the operator did not create exist (PeerAuthentication shop/strict)")
}
