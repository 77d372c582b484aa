//go:build integration

package controller

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/enroll"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// TestAdminIstioOptOutRelaxesStrictFirst (issue 43, random seed 7039): an
// admin labels an enrolled, STRICT ambient namespace
// istio.io/dataplane-mode=none. Istio acts on that label at once: istio-cni
// releases the namespace's Pods one by one, and while some are released
// and others still captured, STRICT refuses the released ones' plaintext
// (peers lost 8081 in the explorer). The operator cannot come before the
// admin's label, so it must relax the namespace's mTLS before anything
// else it does there: its first write in the namespace takes STRICT away
// (the PeerAuthentication), before the state labels and the other
// policies of an ordinary leave; the admin's label stands.
func TestAdminIstioOptOutRelaxesStrictFirst(t *testing.T) {
	for _, isolation := range []v1alpha1.Isolation{v1alpha1.IsolationNamespace, v1alpha1.IsolationStrict} {
		t.Run(string(isolation), func(t *testing.T) {
			b := startEnrollmentBed(t, "lic-optout-strict-"+string(isolation), events.NewFakeRecorder(1000))
			ctx, admin := context.Background(), b.admin
			readyIstiod(t, admin)
			require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{labels.Mesh: labels.MeshEnabled}}}))
			captured := map[string]string{labels.IstioAmbientRedirection: "enabled"}
			for _, name := range []string{"cache-0", "cache-1"} {
				require.NoError(t, admin.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: captured},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}}))
			}
			require.NoError(t, admin.Create(ctx, &v1alpha1.ServiceMesh{ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
				Spec: v1alpha1.ServiceMeshSpec{Mode: v1alpha1.ModeAdopt, Provider: v1alpha1.ProviderIstio, DataPlane: v1alpha1.DataPlaneAmbient, Isolation: isolation}}))
			_, m := b.reconcile(t)
			require.Equal(t, PhaseReady, m.Status.Phase, "%+v", m.Status.Conditions)
			require.Equal(t, "strict", meshMTLSMode(t, admin, "shop"), "the captured namespace cut over")

			// What the operator writes from now on, in order.
			var mu sync.Mutex
			var writes []string
			b.operatorThrough(t, func(rt http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(req *http.Request) (*http.Response, error) {
					if req.Method != http.MethodGet && strings.Contains(req.URL.Path, "/namespaces/shop") {
						mu.Lock()
						writes = append(writes, req.Method+" "+req.URL.Path)
						mu.Unlock()
					}
					return rt.RoundTrip(req)
				})
			})

			// The admin's Istio opt-out (kubectl label --overwrite).
			require.NoError(t, admin.Patch(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+labels.IstioDataPlaneMode+`":"none"}}}`)), client.FieldOwner("kubectl-label")))
			_, m = b.reconcile(t)

			require.NotEmpty(t, writes, "the operator wrote nothing in the opted-out namespace")
			relax := "DELETE /apis/security.istio.io/v1/namespaces/shop/peerauthentications/" + enroll.PeerAuthenticationName
			first := writes[0]
			if isolation == v1alpha1.IsolationStrict {
				// The allow-nothing baseline drops plaintext too: it goes
				// with STRICT, just before it.
				require.Equal(t, "DELETE /apis/security.istio.io/v1/namespaces/shop/authorizationpolicies/"+enroll.BaselinePolicyName, first,
					"the baseline goes first; every write: %v", writes)
				require.Greater(t, len(writes), 1, "every write: %v", writes)
				first = writes[1]
			}
			assert.Equal(t, relax, first, "STRICT must go before anything else in the namespace; every write in order: %v", writes)
			assert.False(t, meshPolicyExists(t, admin, "shop", enroll.KindPeerAuthentication, enroll.PeerAuthenticationName), "the namespace left the mesh")
			ns := &corev1.Namespace{}
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Name: "shop"}, ns))
			assert.Equal(t, "none", ns.Labels[labels.IstioDataPlaneMode], "the admin's label stands")
			assert.NotContains(t, m.Status.EnrolledNamespaces, "shop")
		})
	}
}
