// Command celld-standin is the celld stand-in as a container, for the kind
// end-to-end tier: it serves 8080 (application) and 8081 (/state, per
// docs/state-contract.md) in a real Pod, so fleets become Ready on a real
// cluster without the celld runtime image.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ericdev/fleetmesh/e2e/standin"
)

func main() {
	version := flag.String("version", envOr("CELLD_STANDIN_VERSION", "kind"), "version reported on /state")
	delay := flag.Duration("startup-delay", envDuration("STANDIN_STARTUP_DELAY", time.Second), "how long /state reports Starting (default from $STANDIN_STARTUP_DELAY: a fleet's spec.env sets it, the member's readiness held back)")
	probe := flag.String("probe", "", "instead of serving, GET this URL once and exit 0 on a 2xx answer (a client for NetworkPolicy checks)")
	dial := flag.String("dial", "", "instead of serving, open a TCP connection to each HOST:PORT of this comma-separated list once and print one JSON line per address with the outcome (the real-node tier's packet-level access table)")
	dialTimeout := flag.Duration("dial-timeout", 2*time.Second, "how long -dial waits for each connection")
	dialDelay := flag.Duration("dial-delay", 0, "how long -dial waits before dialing (for the NetworkPolicy enforcer to learn this Pod's address)")
	dialHold := flag.Bool("dial-hold", false, "after -dial, keep running (the Pod stays a live caller that `kubectl celld access --from` can read)")
	writeFile := flag.String("write-file", "", "instead of serving, write -content to this file and exit (data on a member's volume, for roll tests)")
	content := flag.String("content", "", "what -write-file writes")
	readFile := flag.String("read-file", "", "instead of serving, print this file's content and exit")
	flag.Parse()
	if *writeFile != "" {
		if err := os.WriteFile(*writeFile, []byte(*content), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(1)
		}
		fmt.Printf("wrote %d bytes to %s\n", len(*content), *writeFile)
		return
	}
	if *readFile != "" {
		b, err := os.ReadFile(*readFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "read:", err)
			os.Exit(1)
		}
		fmt.Printf("content: %s\n", b)
		return
	}
	if *probe != "" {
		os.Exit(probeOnce(*probe))
	}
	if *dial != "" {
		time.Sleep(*dialDelay)
		dialAll(strings.Split(*dial, ","), *dialTimeout)
		for *dialHold {
			time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock
		}
		return
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

// dialResult is one line of -dial's output.
type dialResult struct {
	Addr string `json:"addr"`
	// Open: the TCP handshake completed (nothing dropped or rejected it).
	Open  bool   `json:"open"`
	Error string `json:"error,omitempty"`
	// Millis is how long the attempt took.
	Millis int64 `json:"millis"`
}

// dialAll dials every address concurrently (a dropped one costs the
// timeout, not a timeout per address) and prints the results in order.
func dialAll(addrs []string, timeout time.Duration) {
	results := make([]dialResult, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			start := time.Now()
			c, err := net.DialTimeout("tcp", a, timeout)
			r := dialResult{Addr: a, Open: err == nil, Millis: time.Since(start).Milliseconds()}
			if err != nil {
				r.Error = err.Error()
			} else {
				_ = c.Close()
			}
			results[i] = r
		})
	}
	wg.Wait()
	enc := json.NewEncoder(os.Stdout)
	for _, r := range results {
		_ = enc.Encode(r)
	}
}

// envDuration is $k as a duration, or def when unset or unparsable.
func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return d
	}
	return def
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
