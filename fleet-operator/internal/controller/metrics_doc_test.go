package controller

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ericdev/fleetmesh/shared/pacing"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestMetricsDocumented: every metric the fleet operator registers has a
// row in docs/monitoring.md's table.
func TestMetricsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "docs", "monitoring.md"))
	if err != nil {
		t.Fatalf("docs/monitoring.md documents every metric: %v", err)
	}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 10)
	for _, c := range append([]prometheus.Collector{fleetSeries, replacementsMetric, failedPassesMetric}, pacing.Collectors...) {
		c.Describe(ch)
	}
	close(ch)
	n := 0
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		n++
		if !strings.Contains(string(b), "| `"+m[1]+"` |") {
			t.Errorf("docs/monitoring.md has no row for %s", m[1])
		}
	}
	if n != 7 {
		t.Fatalf("described %d metrics, want 7", n)
	}
}
