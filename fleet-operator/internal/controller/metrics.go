package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

// Fleet metrics, served on the manager's metrics endpoint.
var (
	membersMetric = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "celld_fleet_members",
		Help: "Member Pods of a fleet by state: desired, present, ready (Pod Ready), updated (on the target revision).",
	}, []string{"namespace", "fleet", "state"})
	replacementsMetric = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "celld_fleet_member_replacements_total",
		Help: "Members the operator replaced to roll a fleet to a new revision.",
	}, []string{"namespace", "fleet"})
	conditionMetric = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "celld_fleet_condition",
		Help: "1 when the fleet's condition has the given status.",
	}, []string{"namespace", "fleet", "type", "status"})
)

func init() {
	metrics.Registry.MustRegister(membersMetric, replacementsMetric, conditionMetric)
}

// recordMetrics publishes the status the reconcile just computed.
func recordMetrics(f *v1alpha1.CelldFleet, st v1alpha1.CelldFleetStatus) {
	ns, name := f.Namespace, f.Name
	membersMetric.WithLabelValues(ns, name, "desired").Set(float64(derefReplicas(f)))
	membersMetric.WithLabelValues(ns, name, "present").Set(float64(st.Replicas))
	membersMetric.WithLabelValues(ns, name, "ready").Set(float64(st.ReadyReplicas))
	membersMetric.WithLabelValues(ns, name, "updated").Set(float64(st.UpdatedReplicas))
	for _, c := range st.Conditions {
		for _, s := range []string{"True", "False", "Unknown"} {
			v := 0.0
			if string(c.Status) == s {
				v = 1
			}
			conditionMetric.WithLabelValues(ns, name, c.Type, s).Set(v)
		}
	}
}

// forgetMetrics drops a deleted fleet's series.
func forgetMetrics(namespace, name string) {
	labels := prometheus.Labels{"namespace": namespace, "fleet": name}
	membersMetric.DeletePartialMatch(labels)
	replacementsMetric.DeletePartialMatch(labels)
	conditionMetric.DeletePartialMatch(labels)
}
