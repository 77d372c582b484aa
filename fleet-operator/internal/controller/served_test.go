package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
)

// countingMapper counts the lookups that reach the REST mapper: with the
// real (lazy) mapper each lookup of a group the API server does not serve
// is a discovery request.
type countingMapper struct {
	meta.RESTMapper
	lookups int
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.lookups++
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// TestServedRemembersAMissingAPI: a fleet outside the mesh asks every
// reconcile whether Istio's API is served; where it is not, the answer is
// kept for notServedFor so a cluster without Istio (or the Gateway API) is
// not rediscovered on every reconcile of every fleet, and a later install
// is still found without a restart.
func TestServedRemembersAMissingAPI(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := &countingMapper{RESTMapper: meta.NewDefaultRESTMapper(nil)}
	r := &FleetReconciler{Client: fake.NewClientBuilder().WithRESTMapper(m).Build(), Now: func() time.Time { return now }}
	for i := 0; i < 3; i++ {
		ok, err := r.served(mesh.AuthorizationPolicyKind)
		require.NoError(t, err)
		assert.False(t, ok)
	}
	assert.Equal(t, 1, m.lookups, "asked once within the window")
	now = now.Add(notServedFor)
	ok, err := r.served(mesh.AuthorizationPolicyKind)
	require.NoError(t, err)
	assert.False(t, ok)
	assert.Equal(t, 2, m.lookups, "asked again after it")
}
