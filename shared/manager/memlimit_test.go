package manager

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSoftMemoryLimit: the Go runtime's soft memory limit is 90 % of the
// container's memory limit, which the charts pass in MiB through the
// downward API; an explicit GOMEMLIMIT wins (the runtime applied it at
// start), and anything unreadable leaves the runtime's default.
func TestSoftMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name      string
		env       map[string]string
		want      int64
		wantError bool
	}{
		{"no limit passed", map[string]string{}, 0, false},
		{"the chart's default 512Mi", map[string]string{MemoryLimitEnv: "512"}, 512 * mib * 9 / 10, false},
		{"256Mi", map[string]string{MemoryLimitEnv: "256"}, 256 * mib * 9 / 10, false},
		{"explicit GOMEMLIMIT wins", map[string]string{MemoryLimitEnv: "512", "GOMEMLIMIT": "300MiB"}, 0, false},
		{"GOMEMLIMIT=off wins too", map[string]string{MemoryLimitEnv: "512", "GOMEMLIMIT": "off"}, 0, false},
		{"empty", map[string]string{MemoryLimitEnv: ""}, 0, false},
		{"not a number", map[string]string{MemoryLimitEnv: "512Mi"}, 0, true},
		{"zero", map[string]string{MemoryLimitEnv: "0"}, 0, true},
		{"negative", map[string]string{MemoryLimitEnv: "-1"}, 0, true},
		{"no limit on the container: the node's allocatable memory", map[string]string{MemoryLimitEnv: "15731"}, 15731 * mib * 9 / 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := softMemoryLimit(func(k string) string { return tc.env[k] })
			assert.Equal(t, tc.want, got)
			if tc.wantError {
				assert.Error(t, err)
			} else {
				assert.NoError(t, err)
			}
		})
	}
}
