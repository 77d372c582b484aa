package podmesh

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/shared/labels"
)

func TestMeshed(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	app := corev1.Container{Name: "app"}
	native := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: ProxyContainer, RestartPolicy: &always}}, Containers: []corev1.Container{app}}}
	classic := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app, {Name: ProxyContainer}}}}
	initOnly := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: ProxyContainer}}, Containers: []corev1.Container{app}}}
	redirected := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{labels.IstioAmbientRedirection: "enabled"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{app}}}
	disabledMark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{labels.IstioAmbientRedirection: "disabled"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{app}}}
	plain := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{app}}}
	sidecarAndMark := native.DeepCopy()
	sidecarAndMark.Annotations = redirected.Annotations

	for _, tc := range []struct {
		name             string
		pod              *corev1.Pod
		how              How
		ambient, sidecar bool
	}{
		{"native sidecar", native, Sidecar, true, true},
		{"classic sidecar", classic, Sidecar, true, true},
		{"an init container that exits is no proxy", initOnly, None, false, false},
		{"ambient redirection", redirected, Ambient, true, false},
		{"redirection disabled", disabledMark, None, false, false},
		{"plaintext", plain, None, false, false},
		{"a proxy wins over a stale mark", sidecarAndMark, Sidecar, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.how, Of(tc.pod))
			assert.Equal(t, tc.ambient, MeshedIn(DataPlaneAmbient, tc.pod), "in ambient")
			assert.Equal(t, tc.sidecar, MeshedIn(DataPlaneSidecar, tc.pod), "in sidecar")
		})
	}
}

func TestRunning(t *testing.T) {
	now := metav1.Now()
	assert.True(t, Running(&corev1.Pod{}))
	assert.True(t, Running(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}))
	assert.False(t, Running(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}))
	assert.False(t, Running(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}))
	assert.False(t, Running(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}))
}

// TestRedirectedFromMetadata: the redirection mark is read alike from a
// Pod and from its metadata alone (the mesh operator's CNI-release check
// lists metadata only).
func TestRedirectedFromMetadata(t *testing.T) {
	marked := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{labels.IstioAmbientRedirection: "enabled"}}}
	assert.True(t, Redirected(marked))
	assert.False(t, Redirected(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{labels.IstioAmbientRedirection: "disabled"}}}))
	assert.True(t, Redirected(&corev1.Pod{ObjectMeta: marked.ObjectMeta}))
}

func TestProxyControlPlanes(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	proxy := func(env ...corev1.EnvVar) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: ProxyContainer, RestartPolicy: &always, Env: env}},
			Containers: []corev1.Container{{Name: "app"}}}}
	}
	config := func(address string) corev1.EnvVar {
		return corev1.EnvVar{Name: "PROXY_CONFIG", Value: fmt.Sprintf(`{"discoveryAddress":%q,"proxyMetadata":{}}`, address)}
	}
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		want  []string
		known bool
	}{
		{"no proxy: no control plane", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}, nil, true},
		{"default revision", proxy(config("istiod.istio-system.svc:15012")), []string{"istio-system"}, true},
		{"a revision, full domain", proxy(config("istiod-canary.istio-prod.svc.cluster.local:15012")), []string{"istio-prod"}, true},
		{"certificates from another istiod", proxy(config("istiod.istio-a.svc:15012"), corev1.EnvVar{Name: "CA_ADDR", Value: "istiod.istio-b.svc:15012"}), []string{"istio-a", "istio-b"}, true},
		{"a proxy that does not say", proxy(), nil, false},
		{"an address outside the cluster", proxy(config("istiod.example.com:15012")), nil, false},
		{"unreadable PROXY_CONFIG", proxy(corev1.EnvVar{Name: "PROXY_CONFIG", Value: "discoveryAddress: x"}), nil, false},
		{"a classic sidecar", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"},
			{Name: ProxyContainer, Env: []corev1.EnvVar{config("istiod.istio-system.svc:15012")}}}}}, []string{"istio-system"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, known := ProxyControlPlanes(tc.pod)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.known, known)
		})
	}
}
