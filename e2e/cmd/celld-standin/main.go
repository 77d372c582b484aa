// Command celld-standin is the celld stand-in as a container, for the kind
// end-to-end tier: it serves 8080 (application) and 8081 (/state, per
// docs/state-contract.md) in a real Pod, so fleets become Ready on a real
// cluster without the celld runtime image.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/ericdev/fleetmesh/e2e/standin"
)

func main() {
	version := flag.String("version", envOr("CELLD_STANDIN_VERSION", "kind"), "version reported on /state")
	delay := flag.Duration("startup-delay", time.Second, "how long /state reports Starting")
	probe := flag.String("probe", "", "instead of serving, GET this URL once and exit 0 on a 2xx answer (a client for NetworkPolicy checks)")
	flag.Parse()
	if *probe != "" {
		os.Exit(probeOnce(*probe))
	}
	m := &standin.Member{Pod: os.Getenv("CELLD_POD_NAME"), Version: *version, StartupDelay: *delay}
	fmt.Fprintf(os.Stderr, "celld-standin %s for %s serving :8080 and :8081\n", m.Version, m.Pod)
	if err := m.Serve(":8080", ":8081"); err != nil {
		fmt.Fprintln(os.Stderr, "celld-standin:", err)
		os.Exit(1)
	}
}

func probeOnce(url string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	defer resp.Body.Close()
	fmt.Fprintln(os.Stderr, "probe:", resp.Status)
	if resp.StatusCode/100 != 2 {
		return 1
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
