// Package metrics holds the mesh operator's Prometheus metrics, registered
// in controller-runtime's registry so they are served on the manager's
// metrics endpoint.
package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	LicenseExpiryDays      = "mesh_operator_license_expiry_days"
	LicenseExpiryTimestamp = "mesh_operator_license_expiry_timestamp_seconds"
)

// License exports the license's expiry. The days are computed when
// Prometheus scrapes, so the gauge counts down between license checks, and
// it is absent while there is no signed license at all: "no license" must not
// look like "expires in 0 days" on a dashboard or in an alert.
type License struct {
	now func() time.Time

	mu       sync.Mutex
	notAfter time.Time // zero: no signed license

	days *prometheus.Desc
	ts   *prometheus.Desc
}

// NewLicense returns the collector; now is the clock (time.Now in production).
func NewLicense(now func() time.Time) *License {
	return &License{
		now: now,
		days: prometheus.NewDesc(LicenseExpiryDays,
			"Days until the mesh license expires (negative once expired). Absent when no signed license is configured.", nil, nil),
		ts: prometheus.NewDesc(LicenseExpiryTimestamp,
			"Unix time at which the mesh license expires; 0 when no signed license is configured.", nil, nil),
	}
}

// Observe records the signed license's notAfter; the zero time means there
// is no signed license (missing, malformed or badly signed).
func (l *License) Observe(notAfter time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notAfter = notAfter
}

// Describe implements prometheus.Collector.
func (l *License) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.days
	ch <- l.ts
}

// Collect implements prometheus.Collector.
func (l *License) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	notAfter := l.notAfter
	l.mu.Unlock()
	if notAfter.IsZero() {
		ch <- prometheus.MustNewConstMetric(l.ts, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(l.ts, prometheus.GaugeValue, float64(notAfter.Unix()))
	days := notAfter.Sub(l.now()).Hours() / 24
	ch <- prometheus.MustNewConstMetric(l.days, prometheus.GaugeValue, days)
}
