//go:build e2e

package specs

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"

	"github.com/ericdev/fleetmesh/fleet-operator/access"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/served"
)

// checkAccessReport produces the access table of `kubectl celld access`
// for dst from the live cluster, through the plugin's library, with the
// rows' callers added, and holds each row's verdict in it against the
// spec's independent judgement (judge) and the row's expectation: the
// plugin and the spec must never disagree about a connection.
func checkAccessReport(t *testing.T, f *fleetv1.CelldFleet, dst *corev1.Pod, rows []flowRow) {
	t.Helper()
	ctx := context.Background()
	opts := access.Options{OperatorServiceAccount: argValue(bed.Fleet.Args, "--operator-service-account")}
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.src.String()] {
			seen[r.src.String()] = true
			opts.Callers = append(opts.Callers, access.Caller{Name: r.src.String(), Namespace: r.src.namespace, Labels: r.src.labels,
				ServiceAccount: r.src.serviceAccount, Meshed: r.src.meshed})
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(bed.Cluster.REST)
	require.NoError(t, err)
	snap, err := access.Read(ctx, k8s, &served.Catalog{Discovery: dc, MaxAge: served.Fresh}, f.Namespace, f.Name, access.ReadOptions{Options: opts})
	require.NoError(t, err)
	require.Empty(t, snap.Unreadable, "the spec reads with full rights")
	full, err := access.Compute(snap, opts)
	require.NoError(t, err)
	report, err := full.Filter("", dst.Name)
	require.NoError(t, err)
	var table bytes.Buffer
	require.NoError(t, report.Table(&table))

	failed := false
	for _, r := range rows {
		var entry *access.Entry
		for i, e := range report.Ingress {
			if e.Caller.Name == r.src.String() && e.Port == r.port {
				entry = &report.Ingress[i]
			}
		}
		if entry == nil {
			t.Errorf("the access report has no row for %s -> :%d", r.src, r.port)
			failed = true
			continue
		}
		independent := judge(t, r.src, dst, r.port, true).allowed()
		if entry.Allowed != independent || entry.Allowed != r.want {
			t.Errorf("%s -> %s:%d: access report says allowed=%t (network: %s; istio: %s), the spec's judge %t, the row wants %t (%s)",
				r.src, dst.Name, r.port, entry.Allowed, entry.Network.Ingress.Rule, entry.Istio.Rule, independent, r.want, r.why)
			failed = true
		}
	}
	if failed {
		t.Errorf("kubectl celld access for %s:\n%s", dst.Name, table.String())
	} else {
		t.Logf("kubectl celld access for %s (%d rows checked against the spec's):\n%s", dst.Name, len(rows), strings.TrimSpace(table.String()))
	}
}
