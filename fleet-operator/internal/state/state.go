// Package state reads members' /state endpoint on the peer port. The
// response contract is documented in docs/state-contract.md.
package state

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Report is the part of a /state response the operator reads.
type Report struct {
	Healthy  bool      `json:"healthy"`
	Phase    string    `json:"phase"`
	Version  string    `json:"version"`
	Capacity *Capacity `json:"capacity,omitempty"`
}

// Starting is a report by which the runtime says it is still coming up
// (not healthy, phase Starting; the stand-in and celld answer 503 so for
// a moment after start): the member is on its way, not lost
// (docs/state-contract.md).
func (r *Report) Starting() bool {
	return r != nil && !r.Healthy && strings.EqualFold(r.Phase, "Starting")
}

// Capacity is a member's capacity sample.
type Capacity struct {
	CellsUsed  int64 `json:"cellsUsed"`
	CellsTotal int64 `json:"cellsTotal"`
}

// Result is one read: a Report, or the reason there is none.
type Result struct {
	Report *Report
	Err    error
}

// maxBody bounds what a member can make the operator read.
const maxBody = 64 << 10

// Reader reads /state with bounded time and concurrency and never retries
// within one call: the next reconcile is the retry.
type Reader struct {
	client      *http.Client
	concurrency int
}

// idleConnTimeout is how long a connection to a member stays open after a
// read. Polls while a member starts or a roll waits (250 ms, 1 s) reuse
// it; reads at rest (every state interval, 5 s at the least) open a fresh
// one. An idle keep-alive connection per member cost two goroutines and
// 8 KiB of buffers each: about 65 MiB at 3,000 members (issue #20).
const idleConnTimeout = 2 * time.Second

// NewReader returns a Reader whose reads each take at most timeout.
func NewReader(timeout time.Duration) *Reader {
	transport := &http.Transport{
		// Members are addressed by Pod IP; a proxy from the environment must
		// not intercept in-cluster reads.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     idleConnTimeout,
		DisableCompression:  true,
	}
	return &Reader{client: &http.Client{Transport: transport, Timeout: timeout}, concurrency: 8}
}

// Read fetches http://IP:PORT/state.
func (r *Reader) Read(ctx context.Context, ip string, port int) (*Report, error) {
	if ip == "" {
		return nil, fmt.Errorf("the Pod has no IP yet")
	}
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + "/state"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /state: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("reading /state: %w", err)
	}
	var rep Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("/state answered %d with a body that is not the documented JSON: %v", resp.StatusCode, err)
	}
	// 503 with a body is a valid "not serving" report; anything else non-200 is not.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return nil, fmt.Errorf("/state answered HTTP %d", resp.StatusCode)
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		rep.Healthy = false
	}
	return &rep, nil
}

// Target is one member to read.
type Target struct {
	Key string
	IP  string
}

// ReadAll reads every target concurrently (bounded) and returns a result per key.
func (r *Reader) ReadAll(ctx context.Context, targets []Target, port int) map[string]Result {
	out := make(map[string]Result, len(targets))
	var mu sync.Mutex
	var g errgroup.Group
	if r.concurrency > 0 {
		g.SetLimit(r.concurrency)
	}
	for _, t := range targets {
		g.Go(func() error {
			rep, err := r.Read(ctx, t.IP, port)
			mu.Lock()
			out[t.Key] = Result{Report: rep, Err: err}
			mu.Unlock()
			return nil // a failed read is the member's result, not the pass's
		})
	}
	_ = g.Wait()
	return out
}

func unwrapURLError(err error) error {
	if ue, ok := err.(interface{ Unwrap() error }); ok {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
