// Package standin is a small stand-in for the celld runtime, for the local
// test bed where member Pods are kwok fakes with loopback IPs. For every
// running member Pod it listens on PODIP:8080 (application) and PODIP:8081
// (peer port, /state) and implements the /state contract of
// docs/state-contract.md, so the operator's real /state reads run end to end.
package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Member is one stand-in celld process.
type Member struct {
	Pod     string
	IP      string
	Version string
	// StartupDelay is how long /state reports Starting (503) after start.
	StartupDelay time.Duration

	mu        sync.Mutex
	started   time.Time
	unhealthy bool
	servers   []*http.Server
	listeners []net.Listener
	// firstRead is when /state was first read since the pool's last
	// ResetStateReads, in Unix nanoseconds (0: not yet).
	firstRead atomic.Int64
}

// Start binds both ports on the member's IP. The IP must be loopback: the
// stand-in never serves, and the operator never reads, anything else here.
func (m *Member) Start() error {
	ip := net.ParseIP(m.IP)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("stand-in for %s: refusing non-loopback Pod IP %q", m.Pod, m.IP)
	}
	m.mu.Lock()
	m.started = time.Now()
	m.mu.Unlock()
	for port, h := range map[int]http.Handler{8080: http.HandlerFunc(m.app), 8081: m.peerMux()} {
		l, err := net.Listen("tcp", net.JoinHostPort(m.IP, fmt.Sprint(port)))
		if err != nil {
			m.Stop()
			return fmt.Errorf("stand-in for %s: %w", m.Pod, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		m.servers = append(m.servers, srv)
		m.listeners = append(m.listeners, l)
		go func() { _ = srv.Serve(l) }()
	}
	return nil
}

// Serve runs the member on addresses of the caller's choosing, for the
// container image of the stand-in (cmd/celld-standin), where the Pod's own
// network namespace makes any local address the member's. It blocks until
// one listener fails.
func (m *Member) Serve(appAddr, peerAddr string) error {
	m.mu.Lock()
	m.started = time.Now()
	m.mu.Unlock()
	errs := make(chan error, 2)
	for addr, h := range map[string]http.Handler{appAddr: http.HandlerFunc(m.app), peerAddr: m.peerMux()} {
		srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { errs <- srv.ListenAndServe() }()
	}
	return <-errs
}

// Stop closes both listeners. It closes them itself too: a server closed
// before its Serve goroutine has run releases the port only when that
// goroutine gets to it, and the Pod that takes the IP over needs it now.
func (m *Member) Stop() {
	for _, s := range m.servers {
		_ = s.Close()
	}
	for _, l := range m.listeners {
		_ = l.Close()
	}
	m.servers, m.listeners = nil, nil
}

// SetUnhealthy makes /state report healthy=false (fault injection).
func (m *Member) SetUnhealthy(v bool) {
	m.mu.Lock()
	m.unhealthy = v
	m.mu.Unlock()
}

func (m *Member) app(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintf(w, "celld stand-in %s %s\n", m.Pod, m.Version)
}

func (m *Member) peerMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/state", m.state)
	return mux
}

// stateReport is the documented /state body.
type stateReport struct {
	Healthy  bool   `json:"healthy"`
	Phase    string `json:"phase"`
	Version  string `json:"version"`
	Capacity struct {
		CellsUsed  int64 `json:"cellsUsed"`
		CellsTotal int64 `json:"cellsTotal"`
	} `json:"capacity"`
}

func (m *Member) state(w http.ResponseWriter, _ *http.Request) {
	m.firstRead.CompareAndSwap(0, time.Now().UnixNano())
	m.mu.Lock()
	starting := time.Since(m.started) < m.StartupDelay
	unhealthy := m.unhealthy
	m.mu.Unlock()
	rep := stateReport{Healthy: !starting && !unhealthy, Phase: "Serving", Version: m.Version}
	switch {
	case starting:
		rep.Phase = "Starting"
	case unhealthy:
		rep.Phase = "Degraded"
	}
	rep.Capacity.CellsTotal = 64
	rep.Capacity.CellsUsed = int64(stableNumber(m.Pod) % 64)
	w.Header().Set("Content-Type", "application/json")
	if starting {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rep)
}

// VersionFromImage is the tag of an image reference ("latest" without one).
func VersionFromImage(image string) string {
	if i := strings.LastIndex(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[i+1:]
	}
	return "latest"
}

func stableNumber(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// ErrNotLoopback is returned for Pods whose IP is outside 127.0.0.0/8.
var ErrNotLoopback = errors.New("not a loopback address")

// Pool keeps one Member per running member Pod.
type Pool struct {
	StartupDelay time.Duration

	mu      sync.Mutex
	members map[string]*Member // by Pod UID
	// retry holds the Pods whose stand-in could not start (its port was
	// still taken), by UID; every Update tries them again.
	retry map[string]PodInfo
}

// Sync makes the running stand-ins match pods exactly: it stops those of
// every other Pod.
func (p *Pool) Sync(ctx context.Context, pods []PodInfo) []error {
	want := make(map[string]bool, len(pods))
	for _, pod := range pods {
		want[pod.UID] = true
	}
	var gone []string
	p.mu.Lock()
	for uid := range p.members {
		if !want[uid] {
			gone = append(gone, uid)
		}
	}
	for uid := range p.retry {
		if !want[uid] {
			gone = append(gone, uid)
		}
	}
	p.mu.Unlock()
	return p.Update(ctx, gone, pods)
}

// Update stops the stand-ins of the Pods in gone (by UID) and makes one run
// for each of pods, retrying those that could not start before; it leaves
// every other stand-in alone, so a caller that follows a Pod watch does work
// for what changed, not for every member there is.
func (p *Pool) Update(_ context.Context, gone []string, pods []PodInfo) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.members == nil {
		p.members = map[string]*Member{}
		p.retry = map[string]PodInfo{}
	}
	for _, uid := range gone {
		if m, ok := p.members[uid]; ok {
			m.Stop()
			delete(p.members, uid)
		}
		delete(p.retry, uid)
	}
	for _, pod := range pods {
		delete(p.retry, pod.UID) // superseded by what the caller saw now
	}
	for _, pod := range p.retry {
		pods = append(pods, pod)
	}
	clear(p.retry)
	// Stop stand-ins of Pods that moved before starting any: kwok may hand
	// a departed Pod's IP straight to its replacement.
	for _, pod := range pods {
		if m, ok := p.members[pod.UID]; ok && m.IP != pod.IP {
			m.Stop()
			delete(p.members, pod.UID)
		}
	}
	var errs []error
	for _, pod := range pods {
		m, ok := p.members[pod.UID]
		if !ok {
			m = &Member{Pod: pod.Name, IP: pod.IP, Version: VersionFromImage(pod.Image), StartupDelay: p.StartupDelay}
			if err := m.Start(); err != nil {
				errs = append(errs, err)
				p.retry[pod.UID] = pod
				continue
			}
			p.members[pod.UID] = m
		}
		m.SetUnhealthy(pod.Unhealthy)
	}
	return errs
}

// ResetStateReads forgets when each member's /state was read, so that
// FirstStateReads reports the reads from now on.
func (p *Pool) ResetStateReads() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.members {
		m.firstRead.Store(0)
	}
}

// FirstStateReads is, by member IP, when its /state was first read since
// ResetStateReads (or since it started); members not read since are left
// out. It lets a caller see a reader's progress from the members' side,
// without asking the reader.
func (p *Pool) FirstStateReads() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]time.Time, len(p.members))
	for _, m := range p.members {
		if ns := m.firstRead.Load(); ns != 0 {
			out[m.IP] = time.Unix(0, ns)
		}
	}
	return out
}

// StopAll stops every stand-in.
func (p *Pool) StopAll() {
	_ = p.Sync(context.Background(), nil)
}

// PodInfo is what the pool needs of a member Pod.
type PodInfo struct {
	UID, Name, IP, Image string
	Unhealthy            bool
}
