//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestCELRejectsWhatTheStatefulSetWould: what the members' StatefulSet
// would be refused for (label and annotation syntax, node selectors,
// tolerations, quantities) is refused at admission of the fleet, with a
// message naming the field, instead of a fleet that is accepted and then
// never gets (or never changes) its StatefulSet. Each row also shows that
// the API server does refuse the StatefulSet built from that spec, so the
// rule is no stricter than the Pod's own validation; and a fleet using
// every field validly is accepted.
func TestCELRejectsWhatTheStatefulSetWould(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	createNamespace(t, env.Client, "cel-sts")
	limits := func(rl corev1.ResourceList) func(f *v1alpha1.CelldFleet) {
		return func(f *v1alpha1.CelldFleet) { f.Spec.Resources.Limits = rl }
	}
	toleration := func(tol v1alpha1.Toleration) func(f *v1alpha1.CelldFleet) {
		return func(f *v1alpha1.CelldFleet) { f.Spec.Scheduling.Tolerations = []v1alpha1.Toleration{tol} }
	}
	for i, tc := range []struct {
		name    string
		mutate  func(f *v1alpha1.CelldFleet)
		message string
	}{
		{"pod label key with a space", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"team name": "a"}
		},
			"spec.podTemplate.labels keys must be label keys"},
		{"pod label key name longer than 63", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"example.com/" + strings.Repeat("a", 64): "a"}
		}, "spec.podTemplate.labels keys must be label keys"},
		{"pod label key prefix not a DNS name", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"Example_Com/team": "a"}
		},
			"spec.podTemplate.labels keys must be label keys"},
		{"pod label value with a slash", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"team": "a/b"}
		},
			"spec.podTemplate.labels values must be label values"},
		{"pod label value longer than 63", func(f *v1alpha1.CelldFleet) {
			f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"team": v1alpha1.LabelValue(strings.Repeat("a", 64))}
		},
			"spec.podTemplate.labels.team: Too long"},
		{"pod annotation key with two slashes", func(f *v1alpha1.CelldFleet) { f.Spec.PodTemplate.Annotations = map[string]string{"a.io/b/c": "x"} },
			"spec.podTemplate.annotations keys must be"},
		{"node selector key starting with a dash", func(f *v1alpha1.CelldFleet) {
			f.Spec.Scheduling.NodeSelector = map[string]v1alpha1.LabelValue{"-zone": "a"}
		},
			"spec.scheduling.nodeSelector keys must be label keys"},
		{"node selector value with a space", func(f *v1alpha1.CelldFleet) {
			f.Spec.Scheduling.NodeSelector = map[string]v1alpha1.LabelValue{"zone": "eu west"}
		},
			"spec.scheduling.nodeSelector values must be label values"},
		{"toleration key with a space", toleration(v1alpha1.Toleration{Key: "dedicated to", Operator: corev1.TolerationOpExists}),
			"spec.scheduling.tolerations[].key must be a label key"},
		{"toleration without key that is not Exists", toleration(v1alpha1.Toleration{Operator: corev1.TolerationOpEqual, Value: "a"}),
			"spec.scheduling.tolerations[] without a key must have operator Exists"},
		{"toleration Exists with a value", toleration(v1alpha1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Value: "celld"}),
			"spec.scheduling.tolerations[] with operator Exists must have no value"},
		{"toleration value not a label value", toleration(v1alpha1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "cell d"}),
			"spec.scheduling.tolerations[].value must be a label value"},
		{"toleration effect unknown", toleration(v1alpha1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: "NoEntry"}),
			"spec.scheduling.tolerations[].effect must be"},
		{"tolerationSeconds without NoExecute", toleration(v1alpha1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr.To[int64](30)}),
			"spec.scheduling.tolerations[].tolerationSeconds needs effect NoExecute"},
		{"negative CPU limit", limits(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}),
			"spec.resources quantities must not be negative"},
		{"negative memory request", func(f *v1alpha1.CelldFleet) {
			f.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("-1Gi")}
		}, "spec.resources quantities must not be negative"},
		{"request above its limit", func(f *v1alpha1.CelldFleet) {
			f.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
			f.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}, "spec.resources.requests must not exceed spec.resources.limits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fleet("cel-sts", fmt.Sprintf("f%d", i))
			tc.mutate(f)
			stsErr := env.Client.Create(ctx, statefulSetOf(f), client.DryRunAll)
			require.Error(t, stsErr, "the API server refuses the StatefulSet built from this spec")
			assert.Contains(t, stsErr.Error(), "spec.template", "refused for the member template")
			err := env.Client.Create(ctx, f)
			if err == nil {
				_ = env.Client.Delete(ctx, f)
			}
			require.Error(t, err, "the fleet must be refused at admission")
			t.Log(err)
			assert.Contains(t, err.Error(), tc.message)
		})
	}

	t.Run("every field used validly is accepted", func(t *testing.T) {
		f := fleet("cel-sts", "valid")
		f.Spec.PodTemplate.Labels = map[string]v1alpha1.LabelValue{"team": "a-b_c.D", "example.com/cost-center": "", "x": v1alpha1.LabelValue(strings.Repeat("v", 63))}
		f.Spec.PodTemplate.Annotations = map[string]string{"Example.com/Note": "anything / goes here", "prometheus.io/scrape": "true"}
		f.Spec.Scheduling.NodeSelector = map[string]v1alpha1.LabelValue{"topology.kubernetes.io/zone": "eu-west-1a", "kubernetes.io/os": "linux"}
		f.Spec.Scheduling.Tolerations = []v1alpha1.Toleration{
			{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "celld", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)},
			{Operator: corev1.TolerationOpExists},
			{Key: "spot", Value: "true"},
		}
		f.Spec.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("2Gi")},
		}
		require.NoError(t, env.Client.Create(ctx, statefulSetOf(f), client.DryRunAll), "the StatefulSet is valid")
		require.NoError(t, env.Client.Create(ctx, f))
	})
}

// statefulSetOf is the members' StatefulSet the operator would apply for f
// (outside the mesh), owned by f as if it existed.
func statefulSetOf(f *v1alpha1.CelldFleet) *appsv1.StatefulSet {
	owner := f.DeepCopy()
	owner.UID = "00000000-0000-0000-0000-000000000042"
	return memberStatefulSet(owner, mesh.Intent{})
}
