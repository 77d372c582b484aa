package injector

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestInjectPatch(t *testing.T) {
	native := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Labels:      map[string]string{"sidecar.istio.io/inject": "true"},
		Annotations: map[string]string{"sidecar.istio.io/nativeSidecar": "true"},
	}}
	var ops []map[string]any
	require.NoError(t, json.Unmarshal(injectPatch(native), &ops))
	require.Len(t, ops, 1)
	assert.Equal(t, "/spec/initContainers", ops[0]["path"])
	c := ops[0]["value"].([]any)[0].(map[string]any)
	assert.Equal(t, "istio-proxy", c["name"])
	assert.Equal(t, "Always", c["restartPolicy"], "a native sidecar keeps running")

	classic := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"sidecar.istio.io/inject": "true"}}}
	require.NoError(t, json.Unmarshal(injectPatch(classic), &ops))
	assert.Equal(t, "/spec/containers/-", ops[0]["path"])

	optedOut := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"sidecar.istio.io/inject": "false"}}}
	assert.Nil(t, injectPatch(optedOut))
}
