package controller

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestPodsSinceLabelsFallsBack: when the API server's cache does not reach
// the namespace's resourceVersion in time (it answers 504 "Too large
// resource version"), the Pods are listed once more as a consistent read
// instead of failing the pass; other errors are returned.
func TestPodsSinceLabelsFallsBack(t *testing.T) {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", ResourceVersion: "42"}}
	for _, tc := range []struct {
		name     string
		bounded  error // what the bounded list answers
		wantErr  bool
		wantRaws []string // resourceVersion/match of each list sent
	}{
		{name: "served", wantRaws: []string{"42/NotOlderThan"}},
		{name: "cache behind: consistent read", bounded: apierrors.NewTimeoutError("Too large resource version: 42, current: 40", 1),
			wantRaws: []string{"42/NotOlderThan", "/"}},
		{name: "other error", bounded: apierrors.NewForbidden(corev1.Resource("pods"), "", nil), wantErr: true,
			wantRaws: []string{"42/NotOlderThan"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []string
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(pod).WithInterceptorFuncs(interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					o := (&client.ListOptions{}).ApplyOptions(opts).AsListOptions()
					sent = append(sent, o.ResourceVersion+"/"+string(o.ResourceVersionMatch))
					if o.ResourceVersionMatch != "" && tc.bounded != nil {
						return tc.bounded
					}
					return c.List(ctx, list, opts...)
				}}).Build()
			r := &ServiceMeshReconciler{Reader: c}
			pods, err := r.podsSinceLabels(context.Background(), ns)
			assert.Equal(t, tc.wantRaws, sent)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Len(t, pods, 1)
			assert.Equal(t, "app", pods[0].Name)
		})
	}
}
