package controller

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

// Fleet metrics, served on the manager's metrics endpoint.
var (
	membersDesc = prometheus.NewDesc("celld_fleet_members",
		"Member Pods of a fleet by state: desired, present, ready (Pod Ready), updated (on the target revision).",
		[]string{"namespace", "fleet", "state"}, nil)
	conditionDesc = prometheus.NewDesc("celld_fleet_condition",
		"1 when the fleet's condition has the given status.",
		[]string{"namespace", "fleet", "type", "status"}, nil)
	replacementsMetric = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "celld_fleet_member_replacements_total",
		Help: "Members the operator replaced to roll a fleet to a new revision.",
	}, []string{"namespace", "fleet"})
	// failedPassesMetric counts the passes that failed a step; they are
	// retried by outcome rather than returned as errors, so controller-
	// runtime's error counter does not see them. Which fleets fail is in
	// celld_fleet_condition (Reconciled=False).
	failedPassesMetric = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "celld_fleet_failed_passes_total",
		Help: "Fleet reconciles that failed a step (the fleet's Reconciled condition says which); retried within the fleet's poll.",
	})
	// fleetSeries is the collector of the per-fleet gauges.
	fleetSeries = &fleetCollector{}
)

func init() {
	metrics.Registry.MustRegister(fleetSeries, replacementsMetric, failedPassesMetric)
}

// fleetCollector publishes each fleet's member counts and conditions as
// its status in the cache says, computed at scrape time. Kept as series
// between scrapes they were 25 per fleet, about an eighth of the
// operator's live heap at 300 fleets (issue #20's memory target); and read
// from status they are what kubectl shows, and a deleted fleet's series go
// with it. Only the elected leader publishes them: a standby's cache holds
// the same fleets, and two copies would double every sum.
type fleetCollector struct {
	mu sync.Mutex
	// fleets lists the fleets (read-only); nil publishes nothing.
	fleets func(context.Context) ([]v1alpha1.CelldFleet, error)
	// leading is closed once this replica leads.
	leading <-chan struct{}
}

// use points the collector at a manager's cache and election (the last
// manager set up wins: tests start several in one process).
func (c *fleetCollector) use(fleetCache cache.Cache, leading <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leading = leading
	c.fleets = func(ctx context.Context) ([]v1alpha1.CelldFleet, error) {
		// Until the fleets are listed a scrape gets none: it must not wait
		// for the cache (a scrape at start-up would hang), and every other
		// metric of the page is still served.
		inf, err := fleetCache.GetInformer(ctx, &v1alpha1.CelldFleet{}, cache.BlockUntilSynced(false))
		if err != nil || !inf.HasSynced() {
			return nil, err
		}
		list := &v1alpha1.CelldFleetList{}
		// Read-only: the cache's own objects, not a copy of 1,000 fleets per scrape.
		if err := fleetCache.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		return list.Items, nil
	}
}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- membersDesc
	ch <- conditionDesc
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	fleets, leading := c.fleets, c.leading
	c.mu.Unlock()
	if fleets == nil || leading == nil {
		return
	}
	select {
	case <-leading:
	default:
		return
	}
	// A failed read leaves the fleets' series out of this scrape; an
	// invalid metric would fail the whole page (controller-runtime serves
	// it with HTTPErrorOnError), the operator's own health included.
	items, err := fleets(context.Background())
	if err != nil {
		return
	}
	for i := range items {
		for _, m := range fleetMetrics(&items[i]) {
			ch <- m
		}
	}
}

// fleetMetrics are one fleet's gauges, from its spec and status.
func fleetMetrics(f *v1alpha1.CelldFleet) []prometheus.Metric {
	ns, name, st := f.Namespace, f.Name, f.Status
	gauge := func(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
		return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{ns, name}, labels...)...)
	}
	out := []prometheus.Metric{
		gauge(membersDesc, float64(derefReplicas(f)), "desired"),
		gauge(membersDesc, float64(st.Replicas), "present"),
		gauge(membersDesc, float64(st.ReadyReplicas), "ready"),
		gauge(membersDesc, float64(st.UpdatedReplicas), "updated"),
	}
	for _, c := range st.Conditions {
		for _, s := range []string{"True", "False", "Unknown"} {
			v := 0.0
			if string(c.Status) == s {
				v = 1
			}
			out = append(out, gauge(conditionDesc, v, c.Type, s))
		}
	}
	return out
}

// forgetMetrics drops a deleted fleet's replacement counter.
func forgetMetrics(namespace, name string) {
	replacementsMetric.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "fleet": name})
}
