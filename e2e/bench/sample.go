package main

// Sampling: the operators' request counters, CPU and memory, the machine's
// load, and what else runs on it.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ericdev/fleetmesh/e2e/harness"
)

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// otherAPIServers counts kube-apiserver processes on the host not started by this bed.
func otherAPIServers(bed *harness.Bed) int {
	mine := bed.Opts.WorkDir
	n := 0
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		c := string(cmd)
		if strings.Contains(c, "kube-apiserver") && strings.Contains(c, "--etcd-servers") && (mine == "" || !strings.Contains(c, mine)) {
			n++
		}
	}
	return n
}

// phase runs fn and records the fleet operator's requests and CPU over it.
func (b *bench) phase(p *Phase, fn func() error) error {
	return b.phaseOf(b.fleetMetrics, b.bed.Fleet, p, fn)
}

// reconcileErrors counts controller-runtime's "Reconciler error" log lines.
func reconcileErrors(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), `"Reconciler error"`)
}

func round(v float64, places int) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', places, 64), 64)
	return f
}

func (b *bench) waitMetrics(addr string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := scrapeAddr(b.http, addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("operator metrics on %s: %w", addr, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func parseRequests(r io.Reader) (Requests, error) {
	out := Requests{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		end := strings.LastIndex(line, "}")
		labels, value := line[len("rest_client_requests_total{"):end], strings.TrimSpace(line[end+1:])
		method := ""
		for _, kv := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(kv, `method="`); ok {
				method = strings.TrimSuffix(v, `"`)
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[method] += v
	}
	return out, sc.Err()
}

// cpuSeconds is utime+stime of pid from /proc/pid/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	// Fields after the command: state is [0], utime [11], stime [12].
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// peakRSS is VmHWM in KiB.
func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// uptime is the `uptime` line (load averages over 1, 5 and 15 minutes).
func uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "load average: " + loadAvg()
	}
	return strings.TrimSpace(string(out))
}
