package benchmark

// Sampling: the operators' request counters, CPU and memory, the machine's
// load, and what else runs on it.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ericdev/fleetmesh/e2e/cluster/local"
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

// reconcileErrors counts the failed reconciles an operator logged.
func reconcileErrors(path string) int {
	return reconcileErrorsFrom(path, 0)
}

func round(v float64, places int) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', places, 64), 64)
	return f
}

func (b *bench) waitMetrics(addr string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := scrapeAddr(b.metrics, addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("operator metrics on %s: %w", addr, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// scraped is what the bench reads from an operator's metrics: its requests to
// the API server by method, and the reconciles its controllers ran.
type scraped struct {
	requests   Requests
	reconciles float64
}

func parseMetrics(r io.Reader) (scraped, error) {
	out := scraped{requests: Requests{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "rest_client_requests_total" && name != "controller_runtime_reconcile_total") {
			continue
		}
		end := strings.LastIndex(rest, "}")
		labels, value := rest[:end], strings.TrimSpace(rest[end+1:])
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return scraped{}, fmt.Errorf("metrics line %q: %w", line, err)
		}
		if name == "controller_runtime_reconcile_total" {
			out.reconciles += v
			continue
		}
		method := ""
		for _, kv := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(kv, `method="`); ok {
				method = strings.TrimSuffix(v, `"`)
			}
		}
		out.requests[method] += v
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

// machineBusySeconds is the CPU time every core of the machine spent on
// anything but idling or waiting for I/O since boot (/proc/stat).
func machineBusySeconds() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat starts with %q", line)
	}
	var busy float64
	// user nice system idle iowait irq softirq steal; guest time is
	// counted in user and nice already.
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy / 100, nil // USER_HZ
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

// auditPolicy logs every request of the two operators' ServiceAccounts at
// Metadata level (who, verb, resource; no bodies) and nothing else, so the
// benchmark can break their API cost down by resource: the operators' own
// rest_client_requests_total counts by method only.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:` + harness.FleetNamespace + `", "system:serviceaccounts:` + harness.MeshNamespace + `"]
- level: None
`

// auditArgs write the policy into dir and return kube-apiserver's flags.
func auditArgs(dir string) ([]string, string, error) {
	policy, log := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, "", err
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + log, "--audit-log-format=json",
		"--audit-log-mode=blocking", "--audit-log-maxsize=0"}, log, nil
}

// auditOffset is the audit log's size: the start of the next phase.
func auditOffset(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// auditByResource counts the audit events between two offsets of the log
// whose user is in namespace ns's ServiceAccounts, by "verb resource"
// ("verb resource/subresource"; non-resource URLs as "verb nonResource").
func auditByResource(path string, from, to int64, ns string) (map[string]float64, error) {
	out := map[string]float64{}
	if path == "" || to <= from {
		return out, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.NewSectionReader(f, from, to-from))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	prefix := "system:serviceaccount:" + ns + ":"
	for sc.Scan() {
		var ev struct {
			Verb string `json:"verb"`
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !strings.HasPrefix(ev.User.Username, prefix) {
			continue
		}
		res := "nonResource"
		if ev.ObjectRef != nil {
			res = ev.ObjectRef.Resource
			if ev.ObjectRef.Subresource != "" {
				res += "/" + ev.ObjectRef.Subresource
			}
		}
		out[ev.Verb+" "+res]++
	}
	return out, sc.Err()
}

// auditWrites sums the write verbs of a by-resource count.
func auditWrites(by map[string]float64) float64 {
	w := 0.0
	for k, v := range by {
		switch verb, _, _ := strings.Cut(k, " "); verb {
		case "create", "update", "patch", "delete", "deletecollection":
			w += v
		}
	}
	return w
}

// series names a metric and the labels (`k="v"` strings) its series must
// all carry to count.
type series struct {
	name  string
	match []string
}

// scrapeSeries reads the metrics endpoint once and returns, for each of
// want, the sum of the matching series. One read for all, of the families
// asked for only: each scrape costs the scraped process CPU (about 0.3 s
// for the fleet operator's 2.3 MB page at 1,000 fleets, most of it the
// fleets' own series, which it still builds), and the bench's own transfer
// and parsing shrink with the page.
func scrapeSeries(c *http.Client, addr string, want ...series) ([]float64, error) {
	q := url.Values{}
	for _, w := range want {
		q.Add("name[]", w.name)
	}
	resp, err := c.Get("http://" + addr + "/metrics?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: %s", addr, resp.Status)
	}
	sums := make([]float64, len(want))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for i, w := range want {
			if !strings.HasPrefix(line, w.name+"{") && !strings.HasPrefix(line, w.name+" ") {
				continue
			}
			ok := true
			for _, m := range w.match {
				ok = ok && strings.Contains(line, m)
			}
			if !ok {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				sums[i] += v
			}
		}
	}
	return sums, sc.Err()
}

// percentile of sorted values (nearest rank).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// reconcileErrorsFrom counts the failed reconciles logged after offset:
// controller-runtime's "Reconciler error" lines, and the mesh operator's
// "Reconcile failed" (it reports a failed pass itself, to keep its timers).
func reconcileErrorsFrom(path string, offset int64) int {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return 0
	}
	return strings.Count(string(b[offset:]), `"Reconciler error"`) + strings.Count(string(b[offset:]), `"Reconcile failed; status says which step"`)
}

// CPUSplit is where the machine's CPU went over one timed window: how many
// cores were busy on average (every process on the host, from /proc/stat),
// and the CPU seconds of the bed's API server and etcd and of the client
// whose writes were timed. Both the mesh pass and its floor run with every
// core busy on the 2-core host, so their times compare the CPU each spends
// per namespace more than any latency; this says whose CPU it was.
type CPUSplit struct {
	Seconds          float64 `json:"seconds"`
	BusyCores        float64 `json:"busyCores"`
	APIServerSeconds float64 `json:"apiServerCPUSeconds"`
	EtcdSeconds      float64 `json:"etcdCPUSeconds"`
	ClientSeconds    float64 `json:"clientCPUSeconds"`
}

// cpuWindow is a CPUSplit being measured.
type cpuWindow struct {
	pids  [3]int // API server, etcd, client
	start time.Time
	busy  float64
	cpu   [3]float64
}

// startCPUWindow starts measuring the machine, the bed's API server and
// etcd, and client (a pid) from now.
func (b *bench) startCPUWindow(client int) (*cpuWindow, error) {
	apiserver, etcd, err := controlPlanePIDs(b.bed)
	if err != nil {
		return nil, err
	}
	w := &cpuWindow{pids: [3]int{apiserver, etcd, client}, start: time.Now()}
	if w.busy, err = machineBusySeconds(); err != nil {
		return nil, err
	}
	for i, pid := range w.pids {
		if w.cpu[i], err = cpuSeconds(pid); err != nil {
			return nil, fmt.Errorf("CPU of pid %d: %w", pid, err)
		}
	}
	return w, nil
}

// stop ends the window.
func (w *cpuWindow) stop() (CPUSplit, error) {
	elapsed := time.Since(w.start).Seconds()
	busy, err := machineBusySeconds()
	if err != nil {
		return CPUSplit{}, err
	}
	var cpu [3]float64
	for i, pid := range w.pids {
		c, err := cpuSeconds(pid)
		if err != nil {
			return CPUSplit{}, fmt.Errorf("CPU of pid %d: %w", pid, err)
		}
		cpu[i] = round(c-w.cpu[i], 2)
	}
	return CPUSplit{Seconds: round(elapsed, 2), BusyCores: round((busy-w.busy)/elapsed, 2),
		APIServerSeconds: cpu[0], EtcdSeconds: cpu[1], ClientSeconds: cpu[2]}, nil
}

// controlPlanePIDs finds the bed's kube-apiserver and etcd in the local
// provider's process records: each is the leader of its own process group.
func controlPlanePIDs(bed *harness.Bed) (apiserver, etcd int, err error) {
	dir := bed.Opts.Cluster.WorkDir
	if dir == "" {
		dir = filepath.Join(bed.Opts.WorkDir, "cluster")
	}
	recs, err := local.ReadProcessRecords(dir)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range recs {
		switch r.Name {
		case "kube-apiserver":
			apiserver = r.PGID
		case "etcd":
			etcd = r.PGID
		}
	}
	if apiserver == 0 || etcd == 0 {
		return 0, 0, fmt.Errorf("no kube-apiserver or etcd in %s's process records", dir)
	}
	return apiserver, etcd, nil
}
