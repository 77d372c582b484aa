package members

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/golden"
)

func minimal() *v1alpha1.CelldFleet {
	return &v1alpha1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "fleets", UID: "11111111-2222-3333-4444-555555555555"},
		Spec:       v1alpha1.CelldFleetSpec{Replicas: ptr.To[int32](1), Image: "registry.example/celld:1.0.0"},
	}
}

func persistent() *v1alpha1.CelldFleet {
	f := minimal()
	f.Name = "orders"
	f.Spec.Replicas = ptr.To[int32](3)
	f.Spec.ServiceAccountName = "orders-runtime"
	f.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
	f.Spec.Env = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}}
	f.Spec.PodTemplate = v1alpha1.PodTemplateMetadata{Labels: map[string]v1alpha1.LabelValue{"team": "payments"}, Annotations: map[string]string{"example.com/owner": "payments"}}
	f.Spec.Scheduling = v1alpha1.Scheduling{
		NodeSelector:                  map[string]v1alpha1.LabelValue{"pool": "stateful"},
		Tolerations:                   []v1alpha1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "celld", Effect: corev1.TaintEffectNoSchedule}},
		PriorityClassName:             "high",
		TerminationGracePeriodSeconds: ptr.To[int64](120),
	}
	f.Spec.Storage = &v1alpha1.Storage{Size: resource.MustParse("10Gi"), StorageClassName: ptr.To("gp3"), WhenScaledDown: v1alpha1.Retain, WhenDeleted: v1alpha1.Delete}
	f.Spec.ObjectStorage = &v1alpha1.ObjectStorage{Bucket: "orders-snapshots", Region: "eu-west-1", Prefix: "prod/orders"}
	return f
}

func TestGolden(t *testing.T) {
	golden.AssertYAML(t, "minimal", ServiceAccount(minimal()), StatefulSet(minimal()))
	golden.AssertYAML(t, "persistent", StatefulSet(persistent()))
}

func TestServiceAccountOnlyWhenSpecNamesNone(t *testing.T) {
	assert.NotNil(t, ServiceAccount(minimal()))
	assert.Nil(t, ServiceAccount(persistent()))
	assert.Equal(t, "orders-runtime", ServiceAccountName(persistent()))
	assert.Equal(t, "cache", ServiceAccountName(minimal()))
}

func TestDisksFollowRetentionPolicy(t *testing.T) {
	sts := StatefulSet(persistent())
	assert.Equal(t, appsv1.DeletePersistentVolumeClaimRetentionPolicyType, sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted)
	assert.Equal(t, appsv1.RetainPersistentVolumeClaimRetentionPolicyType, sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenScaled)
	assert.Empty(t, StatefulSet(minimal()).Spec.VolumeClaimTemplates, "no storage: no claims")
}

// Scaling must not change the Pod template: that would restart every member.
func TestScalingDoesNotChangeTheTemplate(t *testing.T) {
	a, b := persistent(), persistent()
	b.Spec.Replicas = ptr.To[int32](7)
	assert.Equal(t, StatefulSet(a).Spec.Template, StatefulSet(b).Spec.Template)
}

func TestOperatorOwnsTheUpdates(t *testing.T) {
	sts := StatefulSet(minimal())
	assert.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, sts.Spec.UpdateStrategy.Type, "the operator, not the StatefulSet controller, decides when a member is replaced")
	assert.Equal(t, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy)
	assert.Equal(t, "cache-peers", sts.Spec.ServiceName)
}
