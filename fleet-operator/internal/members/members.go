// Package members builds the workload objects of a fleet: the StatefulSet
// that runs the members with their disks, and their default ServiceAccount.
//
// The StatefulSet uses the OnDelete update strategy: the Kubernetes
// controller creates Pods and claims, while the operator decides when each
// member is replaced, one at a time and only after its predecessor reports
// healthy on /state (see package roll).
package members

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/names"
	"github.com/ericdev/fleetmesh/shared/labels"
)

const (
	// ContainerName is the celld container in every member Pod.
	ContainerName = "celld"
	// DataVolume is the member's disk (a claim for persistent fleets, an
	// emptyDir otherwise), mounted at DataPath.
	DataVolume = "data"
	DataPath   = "/var/lib/celld"
)

// Environment handed to celld. The CELLD_ prefix is reserved by the API.
const (
	EnvPodName          = "CELLD_POD_NAME"
	EnvNamespace        = "CELLD_NAMESPACE"
	EnvFleet            = "CELLD_FLEET"
	EnvAdvertiseAddress = "CELLD_ADVERTISE_ADDRESS"
	EnvPeerService      = "CELLD_PEER_SERVICE"
	EnvAppPort          = "CELLD_APP_PORT"
	EnvPeerPort         = "CELLD_PEER_PORT"
	EnvDataDir          = "CELLD_DATA_DIR"
	EnvS3Bucket         = "CELLD_S3_BUCKET"
	EnvS3Region         = "CELLD_S3_REGION"
	EnvS3Prefix         = "CELLD_S3_PREFIX"
)

// ServiceAccountName is the identity members run as.
func ServiceAccountName(f *v1alpha1.CelldFleet) string {
	if f.Spec.ServiceAccountName != "" {
		return f.Spec.ServiceAccountName
	}
	return names.ServiceAccount(f.Name)
}

// ServiceAccount is the default identity, built whenever the members run as
// it: when the spec names no account, and when it names this very one (the
// fleet's own name).
func ServiceAccount(f *v1alpha1.CelldFleet) *corev1.ServiceAccount {
	if ServiceAccountName(f) != names.ServiceAccount(f.Name) {
		return nil
	}
	return &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: objectMeta(f, names.ServiceAccount(f.Name)),
		// Members do not call the Kubernetes API.
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// StatefulSet runs the members.
func StatefulSet(f *v1alpha1.CelldFleet) *appsv1.StatefulSet {
	replicas := ptr.Deref(f.Spec.Replicas, 3)
	sts := &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: objectMeta(f, names.StatefulSet(f.Name)),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			Selector:    &metav1.LabelSelector{MatchLabels: names.Selector(f.Name)},
			ServiceName: names.PeerService(f.Name),
			// Members start together: a member may need its peers' follower
			// service before it becomes ready, which OrderedReady would deadlock.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			// The operator replaces members itself, gated on /state health.
			UpdateStrategy:       appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			RevisionHistoryLimit: ptr.To[int32](10),
			Template:             podTemplate(f),
		},
	}
	if s := f.Spec.Storage; s != nil {
		// Written as the API server stores it (volumeMode and status are
		// its defaults): the claim template is immutable, so the operator
		// applies the live one once the StatefulSet exists, and a template
		// that differed from it only in those defaults made every new
		// fleet's second pass write the StatefulSet again.
		sts.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: DataVolume, Labels: names.CommonLabels(f.Name)},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: s.StorageClassName,
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: s.Size},
				},
				VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem),
			},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
		}}
		sts.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: retention(s.WhenDeleted),
			WhenScaled:  retention(s.WhenScaledDown),
		}
	}
	return sts
}

func retention(p v1alpha1.RetentionPolicy) appsv1.PersistentVolumeClaimRetentionPolicyType {
	if p == v1alpha1.Delete {
		return appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	}
	return appsv1.RetainPersistentVolumeClaimRetentionPolicyType
}

// nodeSelector is spec.scheduling.nodeSelector as the Pod takes it; nil
// when the spec has none.
func nodeSelector(in map[string]v1alpha1.LabelValue) map[string]string {
	if in == nil {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = string(v)
	}
	return out
}

// tolerations is spec.scheduling.tolerations as the Pod takes them; nil
// when the spec has none.
func tolerations(in []v1alpha1.Toleration) []corev1.Toleration {
	if in == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(in))
	for i, t := range in {
		out[i] = corev1.Toleration{Key: t.Key, Operator: t.Operator, Value: t.Value, Effect: t.Effect, TolerationSeconds: t.TolerationSeconds}
	}
	return out
}

func podTemplate(f *v1alpha1.CelldFleet) corev1.PodTemplateSpec {
	podLabels := map[string]string{}
	for k, v := range f.Spec.PodTemplate.Labels {
		podLabels[k] = string(v)
	}
	for k, v := range names.CommonLabels(f.Name) {
		podLabels[k] = v
	}
	// Every member carries its fleet's name, meshed or not: the fleet's
	// Istio policies select members by it, and users are told to select
	// them by it in their own. An ambient mesh captures members without a
	// roll, so the label must already be there from the start.
	podLabels[labels.Fleet] = f.Name
	var annotations map[string]string
	if len(f.Spec.PodTemplate.Annotations) > 0 {
		annotations = map[string]string{}
		for k, v := range f.Spec.PodTemplate.Annotations {
			annotations[k] = v
		}
	}
	sched := f.Spec.Scheduling
	spec := corev1.PodSpec{
		ServiceAccountName:            ServiceAccountName(f),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(ptr.Deref(sched.TerminationGracePeriodSeconds, 60)),
		NodeSelector:                  nodeSelector(sched.NodeSelector),
		Tolerations:                   tolerations(sched.Tolerations),
		Affinity:                      sched.Affinity,
		TopologySpreadConstraints:     sched.TopologySpreadConstraints,
		PriorityClassName:             sched.PriorityClassName,
		SecurityContext:               podSecurityContext(f.Spec.PodTemplate.SecurityContext),
		Containers:                    []corev1.Container{container(f)},
	}
	if f.Spec.Storage == nil {
		spec.Volumes = []corev1.Volume{{Name: DataVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: annotations},
		Spec:       spec,
	}
}

func container(f *v1alpha1.CelldFleet) corev1.Container {
	return corev1.Container{
		Name:            ContainerName,
		Image:           f.Spec.Image,
		ImagePullPolicy: f.Spec.ImagePullPolicy,
		Ports: []corev1.ContainerPort{
			{Name: names.AppPortName, ContainerPort: names.AppPort, Protocol: corev1.ProtocolTCP},
			{Name: names.PeerPortName, ContainerPort: names.PeerPort, Protocol: corev1.ProtocolTCP},
		},
		Env:       append(operatorEnv(f), f.Spec.Env...),
		Resources: f.Spec.Resources,
		VolumeMounts: []corev1.VolumeMount{
			{Name: DataVolume, MountPath: DataPath},
		},
		// /state answers 200 only while the member serves; see docs/state-contract.md.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/state", Port: intstr.FromString(names.PeerPortName),
			}},
			PeriodSeconds:    5,
			TimeoutSeconds:   2,
			FailureThreshold: 3,
		},
		SecurityContext: containerSecurityContext(f.Spec.PodTemplate.ContainerSecurityContext),
	}
}

// The celld image's user, by contract (docs/fleet.md "Security context"):
// a numeric non-root UID, so the kubelet can verify runAsNonRoot, and its
// group, which owns the data directory.
const (
	RuntimeUID int64 = 65532
	RuntimeGID int64 = 65532
)

// podSecurityContext is what Pod Security "restricted" asks of a Pod,
// unless the spec sets a securityContext: that one is used as written, and
// only the two settings restricted needs at Pod level are filled in where
// it leaves them unset. Members run as the image's user with their disk's
// group set to its group, so the data directory is writable on a claim
// whose volume a root-owned filesystem backs.
func podSecurityContext(spec *corev1.PodSecurityContext) *corev1.PodSecurityContext {
	if spec == nil {
		return &corev1.PodSecurityContext{
			RunAsNonRoot:        ptr.To(true),
			RunAsUser:           ptr.To(RuntimeUID),
			RunAsGroup:          ptr.To(RuntimeGID),
			FSGroup:             ptr.To(RuntimeGID),
			FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
			SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}
	}
	sc := spec.DeepCopy()
	if sc.RunAsNonRoot == nil {
		sc.RunAsNonRoot = ptr.To(true)
	}
	if sc.SeccompProfile == nil {
		sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	return sc
}

// containerSecurityContext is what Pod Security "restricted" asks of a
// container, with the spec's containerSecurityContext used as written
// where it sets something (capabilities.drop included: an empty list drops
// nothing). allowPrivilegeEscalation is not filled in for a
// privileged container or one adding CAP_SYS_ADMIN: the Pod API refuses
// either together with allowPrivilegeEscalation false.
func containerSecurityContext(spec *corev1.SecurityContext) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{}
	if spec != nil {
		sc = spec.DeepCopy()
	}
	if sc.AllowPrivilegeEscalation == nil && !ptr.Deref(sc.Privileged, false) && !addsSysAdmin(sc.Capabilities) {
		sc.AllowPrivilegeEscalation = ptr.To(false)
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{}
	}
	if sc.Capabilities.Drop == nil {
		// Restricted allows adding NET_BIND_SERVICE back, on top of this.
		sc.Capabilities.Drop = []corev1.Capability{"ALL"}
	}
	return sc
}

func addsSysAdmin(c *corev1.Capabilities) bool {
	if c == nil {
		return false
	}
	for _, a := range c.Add {
		// Exactly the spelling the Pod API checks.
		if a == "CAP_SYS_ADMIN" {
			return true
		}
	}
	return false
}

// operatorEnv is the configuration the operator hands to every member.
func operatorEnv(f *v1alpha1.CelldFleet) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: EnvNamespace, Value: f.Namespace},
		{Name: EnvFleet, Value: f.Name},
		// A DNS name through the headless peer Service, never the Pod IP, so a
		// retained peer stays resolvable after its IP changes.
		{Name: EnvAdvertiseAddress, Value: names.PeerAddress(f.Name, f.Namespace, "$("+EnvPodName+")")},
		// The peer Service, not a list of members: a list would change the
		// template, and so restart every member, on each scale.
		{Name: EnvPeerService, Value: fmt.Sprintf("%s.%s.svc", names.PeerService(f.Name), f.Namespace)},
		{Name: EnvAppPort, Value: fmt.Sprint(names.AppPort)},
		{Name: EnvPeerPort, Value: fmt.Sprint(names.PeerPort)},
		{Name: EnvDataDir, Value: DataPath},
	}
	if o := f.Spec.ObjectStorage; o != nil {
		env = append(env,
			corev1.EnvVar{Name: EnvS3Bucket, Value: o.Bucket},
			corev1.EnvVar{Name: EnvS3Region, Value: o.Region},
			corev1.EnvVar{Name: EnvS3Prefix, Value: o.Prefix},
		)
	}
	return env
}

func objectMeta(f *v1alpha1.CelldFleet, name string) metav1.ObjectMeta {
	return names.ObjectMeta(f, name)
}
