package network_test

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/shared/golden"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// chartParams are the Params the chart's defaults produce: the operator in
// its own namespace, selected by its name label.
var chartParams = network.Params{
	OperatorNamespace: "celld-system",
	OperatorPodLabels: map[string]string{labels.Name: "fleet-operator"},
}

// newFleet is a fleet as the reconciler gets it from the API server: no
// TypeMeta (typed clients drop it), but a namespace and a UID.
func newFleet(name, namespace, uid string) *v1alpha1.CelldFleet {
	return &v1alpha1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{
			Name:       name,
			Namespace:  namespace,
			UID:        types.UID(uid),
			Generation: 1,
		},
		Spec: v1alpha1.CelldFleetSpec{
			Replicas: ptr.To[int32](3),
			Image:    "registry.example.com/celld:1.4.2",
		},
	}
}

// goldenFleets are representative fleets. Networking depends only on the
// fleet's name, namespace and UID, so the spec differences (storage, user Pod
// labels) are there to show that nothing else leaks into these objects.
func goldenFleets() map[string]*v1alpha1.CelldFleet {
	ephemeral := newFleet("my-fleet", "fleets", "0f5c8a1e-2b7d-4c3a-9e61-7d2f0b9a4c11")

	persistent := newFleet("orders", "payments", "6a1d93b2-4e0f-4f7a-8c25-b3e9d07f5a62")
	persistent.Spec.Storage = &v1alpha1.Storage{Size: resource.MustParse("20Gi")}
	persistent.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"team": "payments"}

	// The longest name the API admits (47 characters): names derived from
	// it, such as NAME-peers, must still be valid.
	long := newFleet(strings.Repeat("a", 39)+"-longest", "celld-system", "c4e7f1a0-9b3d-4e2c-8f16-5a0d2b7e9c33")

	return map[string]*v1alpha1.CelldFleet{
		"my-fleet": ephemeral,
		"orders":   persistent,
		"longest":  long,
	}
}

func TestGoldenServices(t *testing.T) {
	for name, fleet := range goldenFleets() {
		t.Run(name, func(t *testing.T) {
			app, peers := network.AppService(fleet), network.PeerService(fleet)
			golden.AssertYAML(t, "app-service-"+name, app)
			golden.AssertYAML(t, "peer-service-"+name, peers)
			// Service names must be DNS labels (RFC 1035) even for the
			// longest fleet name the API admits.
			for _, svc := range []string{app.Name, peers.Name} {
				if errs := validation.IsDNS1035Label(svc); len(errs) > 0 {
					t.Errorf("Service name %q: %v", svc, errs)
				}
			}
		})
	}
}

func TestGoldenNetworkPolicy(t *testing.T) {
	twoLabels := network.Params{
		OperatorNamespace: "platform-operators",
		OperatorPodLabels: map[string]string{
			labels.Name:     "fleet-operator",
			labels.Instance: "fleet-operator-prod",
		},
	}
	for name, fleet := range goldenFleets() {
		t.Run(name, func(t *testing.T) {
			np, err := network.NetworkPolicy(fleet, chartParams)
			if err != nil {
				t.Fatal(err)
			}
			golden.AssertYAML(t, "network-policy-"+name, np)
		})
	}
	t.Run("meshed", func(t *testing.T) {
		p := chartParams
		p.IstiodNamespaces = []string{"istio-system"}
		np, err := network.NetworkPolicy(goldenFleets()["my-fleet"], p)
		if err != nil {
			t.Fatal(err)
		}
		golden.AssertYAML(t, "network-policy-meshed", np)
	})
	t.Run("ambient", func(t *testing.T) {
		p := chartParams
		p.HBONE = true
		np, err := network.NetworkPolicy(goldenFleets()["my-fleet"], p)
		if err != nil {
			t.Fatal(err)
		}
		golden.AssertYAML(t, "network-policy-ambient", np)
	})
	t.Run("operator-two-labels", func(t *testing.T) {
		np, err := network.NetworkPolicy(goldenFleets()["my-fleet"], twoLabels)
		if err != nil {
			t.Fatal(err)
		}
		golden.AssertYAML(t, "network-policy-operator-two-labels", np)
	})
}

// TestOwnerReference pins what garbage collection and the ownership check
// rely on, independently of the golden files.
func TestOwnerReference(t *testing.T) {
	fleet := goldenFleets()["my-fleet"]
	np, err := network.NetworkPolicy(fleet, chartParams)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]metav1.Object{
		"app service":    network.AppService(fleet),
		"peer service":   network.PeerService(fleet),
		"network policy": np,
	}
	for what, obj := range objs {
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 {
			t.Fatalf("%s: want one owner reference, got %v", what, refs)
		}
		r := refs[0]
		if r.APIVersion != "celld.eric.dev/v1alpha1" || r.Kind != "CelldFleet" || r.Name != fleet.Name || r.UID != fleet.UID {
			t.Errorf("%s: owner reference %+v does not name the fleet", what, r)
		}
		if r.Controller == nil || !*r.Controller || r.BlockOwnerDeletion == nil || !*r.BlockOwnerDeletion {
			t.Errorf("%s: owner reference must be a blocking controller reference, got %+v", what, r)
		}
		if obj.GetNamespace() != fleet.Namespace {
			t.Errorf("%s: namespace %q, want the fleet's %q", what, obj.GetNamespace(), fleet.Namespace)
		}
	}
}

func TestNetworkPolicyRejectsUnsafeParams(t *testing.T) {
	fleet := goldenFleets()["my-fleet"]
	cases := map[string]network.Params{
		"no operator namespace": {OperatorPodLabels: chartParams.OperatorPodLabels},
		"no operator labels":    {OperatorNamespace: "celld-system"},
		"empty operator labels": {OperatorNamespace: "celld-system", OperatorPodLabels: map[string]string{}},
		"invalid namespace":     {OperatorNamespace: "Celld_System", OperatorPodLabels: chartParams.OperatorPodLabels},
		"invalid label key":     {OperatorNamespace: "celld-system", OperatorPodLabels: map[string]string{"not a key": "x"}},
		"invalid label value":   {OperatorNamespace: "celld-system", OperatorPodLabels: map[string]string{labels.Name: "no spaces allowed"}},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			np, err := network.NetworkPolicy(fleet, p)
			if err == nil {
				t.Fatalf("want an error, got a policy:\n%+v", np.Spec)
			}
			if np != nil {
				t.Errorf("an error must come without a policy, got %+v", np.Spec)
			}
		})
	}
}

// TestBuildersAreDeterministicAndUnaliased builds everything twice and checks
// the results are equal, and that changing a built object changes neither
// the caller's Params nor the next build.
func TestBuildersAreDeterministicAndUnaliased(t *testing.T) {
	fleet := goldenFleets()["orders"]
	params := network.Params{
		OperatorNamespace: "celld-system",
		OperatorPodLabels: map[string]string{labels.Name: "fleet-operator", labels.Instance: "a", labels.Component: "b"},
	}
	first, err := network.NetworkPolicy(fleet, params)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		again, err := network.NetworkPolicy(fleet, params)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("build %d differs from the first", i)
		}
	}
	if !reflect.DeepEqual(network.AppService(fleet), network.AppService(fleet)) ||
		!reflect.DeepEqual(network.PeerService(fleet), network.PeerService(fleet)) {
		t.Fatal("Service builds differ")
	}

	// Scribble over every label map of the built policy.
	for _, rule := range first.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.PodSelector != nil {
				peer.PodSelector.MatchLabels["scribbled"] = "yes"
			}
		}
	}
	first.Spec.PodSelector.MatchLabels["scribbled"] = "yes"
	if _, ok := params.OperatorPodLabels["scribbled"]; ok {
		t.Error("the policy shares its operator selector map with Params")
	}
	for _, rule := range first.Spec.Egress {
		for _, peer := range rule.To {
			if peer.PodSelector != nil {
				if _, ok := peer.PodSelector.MatchLabels["scribbled"]; ok {
					t.Error("the policy's selectors share maps with each other")
				}
			}
		}
	}
	fresh, err := network.NetworkPolicy(fleet, params)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fresh.Spec.PodSelector.MatchLabels["scribbled"]; ok {
		t.Error("a later build sees changes made to an earlier result")
	}
}
