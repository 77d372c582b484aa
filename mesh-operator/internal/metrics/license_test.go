package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLicenseExpiry(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	l := NewLicense(func() time.Time { return now })
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(l))

	// No license: no days series, timestamp 0.
	n, err := testutil.GatherAndCount(reg, LicenseExpiryDays)
	require.NoError(t, err)
	assert.Zero(t, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP mesh_operator_license_expiry_timestamp_seconds Unix time at which the mesh license expires; 0 when no signed license is configured.
# TYPE mesh_operator_license_expiry_timestamp_seconds gauge
mesh_operator_license_expiry_timestamp_seconds 0
`), LicenseExpiryTimestamp))

	l.Observe(now.Add(36 * time.Hour))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP mesh_operator_license_expiry_days Days until the mesh license expires (negative once expired). Absent when no signed license is configured.
# TYPE mesh_operator_license_expiry_days gauge
mesh_operator_license_expiry_days 1.5
`), LicenseExpiryDays))

	// The clock moves on without a new Observe: the gauge counts down.
	now = now.Add(48 * time.Hour)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP mesh_operator_license_expiry_days Days until the mesh license expires (negative once expired). Absent when no signed license is configured.
# TYPE mesh_operator_license_expiry_days gauge
mesh_operator_license_expiry_days -0.5
`), LicenseExpiryDays))

	l.Observe(time.Time{})
	n, err = testutil.GatherAndCount(reg, LicenseExpiryDays)
	require.NoError(t, err)
	assert.Zero(t, n)

	var nilL *License
	nilL.Observe(now) // a reconciler without metrics must not panic
}
