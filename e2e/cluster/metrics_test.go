package cluster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAPIServerWrites(t *testing.T) {
	in := `# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="namespaces",scope="resource",subresource="",verb="APPLY",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="namespaces",scope="resource",subresource="",verb="GET",version="v1"} 70
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="namespaces",scope="resource",subresource="",verb="APPLY",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="core.navique.com",resource="servicemeshes",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 99
`
	got, err := ParseAPIServerWrites(strings.NewReader(in), []string{"namespaces", "servicemeshes", "peerauthentications"})
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{"APPLY namespaces": 8, "PATCH servicemeshes/status": 3}, got)
}

func TestParseAPIServerRefusedWrites(t *testing.T) {
	in := `apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="statefulsets",scope="resource",subresource="",verb="APPLY",version="v1"} 7
apiserver_request_total{code="422",component="apiserver",dry_run="",group="apps",resource="statefulsets",scope="resource",subresource="",verb="APPLY",version="v1"} 2
apiserver_request_total{code="403",component="apiserver",dry_run="",group="",resource="namespaces",scope="resource",subresource="",verb="PATCH",version="v1"} 4
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="namespaces",scope="resource",subresource="",verb="APPLY",version="v1"} 1
apiserver_request_total{code="403",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 5
`
	got, err := ParseAPIServerRefusedWrites(strings.NewReader(in), []string{"namespaces", "statefulsets"})
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{"APPLY statefulsets": 2, "PATCH namespaces": 4}, got)
}
