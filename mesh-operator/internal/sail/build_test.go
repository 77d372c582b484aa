package sail

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/golden"
)

var owner = &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: "0b7a3c3e-7d7e-4d47-9a53-8d1b1f3f0001"}}

func TestBuildGolden(t *testing.T) {
	for name, p := range map[string]Params{
		"ambient":           {Owner: owner, Version: "1.30", DataPlane: v1alpha1.DataPlaneAmbient},
		"sidecar":           {Owner: owner, Version: "1.30.2", DataPlane: v1alpha1.DataPlaneSidecar},
		"ambient-openshift": {Owner: owner, Version: "v1.30", DataPlane: v1alpha1.DataPlaneAmbient, OpenShift: true},
		"sidecar-openshift": {Owner: owner, DataPlane: v1alpha1.DataPlaneSidecar, OpenShift: true},
	} {
		t.Run(name, func(t *testing.T) {
			d := Build(p)
			objs := []any{}
			for _, o := range d.Objects() {
				objs = append(objs, o)
			}
			objs = append(objs, map[string]any{"namespaces": d.Namespaces})
			golden.AssertYAML(t, "build-"+name, objs...)
		})
	}
}

func TestBuildShape(t *testing.T) {
	amb := Build(Params{Owner: owner, DataPlane: v1alpha1.DataPlaneAmbient})
	assert.Len(t, amb.Objects(), 3, "ambient needs Istio, IstioCNI and ZTunnel")
	assert.Equal(t, []string{IstioNamespace, CNINamespace, ZTunnelNamespace}, amb.Namespaces)
	side := Build(Params{Owner: owner, DataPlane: v1alpha1.DataPlaneSidecar})
	assert.Len(t, side.Objects(), 1, "sidecars on Kubernetes need only istiod")
	assert.Nil(t, side.CNI)
	assert.Nil(t, side.ZTunnel)
	for _, o := range amb.Objects() {
		ref := metav1.GetControllerOf(o)
		if assert.NotNil(t, ref, o.GetObjectKind().GroupVersionKind().Kind) {
			assert.Equal(t, owner.UID, ref.UID)
			assert.Equal(t, "ServiceMesh", ref.Kind)
		}
	}
}

func TestSailVersion(t *testing.T) {
	for in, want := range map[string]string{
		"":        "",
		"1.30":    "v1.30-latest",
		"v1.30":   "v1.30-latest",
		"1.30.2":  "v1.30.2",
		"v1.28.0": "v1.28.0",
	} {
		assert.Equal(t, want, SailVersion(in), in)
	}
}

func TestReadinessOf(t *testing.T) {
	obj := func(gen, observed int64, deleting bool, conds ...Condition) Object {
		i := &Istio{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: gen}, Status: Status{ObservedGeneration: observed, Conditions: conds}}
		if deleting {
			now := metav1.Now()
			i.DeletionTimestamp = &now
		}
		return i
	}
	ready := Condition{Type: ConditionReady, Status: metav1.ConditionTrue}
	for name, tc := range map[string]struct {
		obj    Object
		ready  bool
		reason v1alpha1.ConditionReason
	}{
		"missing":              {nil, false, v1alpha1.ReasonIstioMissing},
		"no status yet":        {obj(1, 0, false), false, v1alpha1.ReasonIstioProgressing},
		"stale ready":          {obj(2, 1, false, ready), false, v1alpha1.ReasonIstioProgressing},
		"no ready condition":   {obj(1, 1, false, Condition{Type: ConditionReconciled, Status: "True"}), false, v1alpha1.ReasonIstioNotReady},
		"not ready":            {obj(1, 1, false, Condition{Type: ConditionReady, Status: "False", Reason: "IstiodNotReady", Message: "istiod is starting"}), false, v1alpha1.ReasonIstioNotReady},
		"ready":                {obj(3, 3, false, ready), true, v1alpha1.ReasonIstioReady},
		"deleting while ready": {obj(1, 1, true, ready), false, v1alpha1.ReasonIstioDeleting},
	} {
		t.Run(name, func(t *testing.T) {
			r := ReadinessOf(KindIstio, "default", tc.obj)
			assert.Equal(t, tc.ready, r.Ready)
			assert.Equal(t, tc.reason, r.Reason)
			assert.NotEmpty(t, r.Message)
		})
	}
	// The other kinds are named from the API's vocabulary too.
	assert.Equal(t, v1alpha1.ReasonIstioCNINotReady, ReadinessOf(KindIstioCNI, "default", obj(1, 1, false)).Reason)
	assert.Equal(t, v1alpha1.ReasonZTunnelMissing, ReadinessOf(KindZTunnel, "default", nil).Reason)
}

func TestFromUnstructuredRoundTrip(t *testing.T) {
	d := Build(Params{Owner: owner, Version: "1.30", DataPlane: v1alpha1.DataPlaneAmbient})
	for _, o := range d.Objects() {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		assert.NoError(t, err)
		back, err := FromUnstructured(&unstructured.Unstructured{Object: m})
		assert.NoError(t, err)
		assert.Equal(t, o, back)
		assert.Equal(t, o, o.DeepCopyObject())
	}
	_, err := FromUnstructured(&unstructured.Unstructured{Object: map[string]any{"kind": "Gateway"}})
	assert.Error(t, err)
}
