package members

import (
	"fmt"
	"os"
	"strings"
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

// Without security contexts in the spec, members meet Pod Security
// "restricted" as the celld image's user; with them, the spec is used as
// written and only what restricted needs and the spec leaves unset is
// filled in.
func TestSecurityContexts(t *testing.T) {
	restrictedPod := &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	restrictedContainer := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	localhost := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("celld.json")}
	for name, c := range map[string]struct {
		pod           *corev1.PodSecurityContext
		container     *corev1.SecurityContext
		wantPod       *corev1.PodSecurityContext
		wantContainer *corev1.SecurityContext
	}{
		"defaults": {wantPod: restrictedPod, wantContainer: restrictedContainer},
		"empty: the platform picks the user": {
			pod: &corev1.PodSecurityContext{}, container: &corev1.SecurityContext{},
			wantPod:       &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			wantContainer: restrictedContainer,
		},
		"what the spec sets wins": {
			pod:           &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To[int64](0), FSGroup: ptr.To[int64](2000), SeccompProfile: localhost},
			container:     &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{}}},
			wantPod:       &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false), RunAsUser: ptr.To[int64](0), FSGroup: ptr.To[int64](2000), SeccompProfile: localhost},
			wantContainer: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{}}},
		},
		"an added capability keeps drop ALL": {
			container:     &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}},
			wantPod:       restrictedPod,
			wantContainer: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}}},
		},
		// The Pod API refuses allowPrivilegeEscalation false with either.
		"privileged: escalation not filled in": {
			container:     &corev1.SecurityContext{Privileged: ptr.To(true)},
			wantPod:       restrictedPod,
			wantContainer: &corev1.SecurityContext{Privileged: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		},
		"CAP_SYS_ADMIN: escalation not filled in": {
			container:     &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_ADMIN"}}},
			wantPod:       restrictedPod,
			wantContainer: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_ADMIN"}, Drop: []corev1.Capability{"ALL"}}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := minimal()
			f.Spec.PodTemplate.SecurityContext, f.Spec.PodTemplate.ContainerSecurityContext = c.pod, c.container
			before := f.DeepCopy()
			spec := StatefulSet(f).Spec.Template.Spec
			assert.Equal(t, c.wantPod, spec.SecurityContext)
			assert.Equal(t, c.wantContainer, spec.Containers[0].SecurityContext)
			assert.Equal(t, before, f, "the fleet is not changed")
		})
	}
}

// The image members run in the e2e tiers (the celld stand-in) keeps the
// UID contract the member template relies on: a numeric non-root USER,
// RuntimeUID:RuntimeGID, in its final stage.
func TestStandInImageRunsAsTheContractUser(t *testing.T) {
	raw, err := os.ReadFile("../../../e2e/cmd/celld-standin/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "USER" {
			user = f[1]
		}
		if strings.HasPrefix(line, "FROM ") {
			user = "" // a new stage starts as its base image's user
		}
	}
	assert.Equal(t, fmt.Sprintf("%d:%d", RuntimeUID, RuntimeGID), user)
}
