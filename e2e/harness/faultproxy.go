package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FaultProxy is a reverse proxy between one operator and the API server
// that answers chosen requests with a fault while a rule is set (issue 43,
// "API faults"). The operator's kubeconfig points at the proxy (HTTPS on
// 127.0.0.1 with a certificate of its own, CAPEM: clientcmd sends a bearer
// token over TLS only); the proxy forwards everything else to the API server over
// TLS, unchanged: the operator's bearer token passes through, so the API
// server still authenticates and authorizes the operator's ServiceAccount,
// and watches stream through untouched (FlushInterval -1).
//
// Faults are what a real API server, or the path to it, answers under load
// or misconfiguration: 500 (InternalError), 429 with Retry-After (client-go
// waits and retries a 429 by itself, up to ten times), 403 (a Forbidden
// Status, as RBAC answers) and a timeout (the request hangs until the
// client gives up or HangFor passes, then the connection is closed
// without an answer). Bodies are metav1.Status, so client-go parses them
// as the API server's own.
type FaultProxy struct {
	// Name says whose proxy it is (the operator's).
	Name string

	ln     net.Listener
	srv    *http.Server
	target *url.URL
	caPEM  []byte

	mu    sync.Mutex
	rules []*FaultRule
	// writes: what the API server answered to the operator's writes
	// (Writes), the last writeMemory of them.
	writes []WriteRecord
}

// WriteRecord is one write (create, update, patch, delete) the operator
// sent through the proxy and the API server answered: when the answer
// came, what was written, with which field manager, and the status code.
// The API server's own metrics count requests per kind only; a record per
// writer and object tells several pollers from one retry loop.
type WriteRecord struct {
	At                              time.Time
	Verb, Resource, Namespace, Name string
	// FieldManager is the request's fieldManager parameter ("" without).
	FieldManager string
	Code         int
}

// Object names the written object as namespace/name (cluster-scoped:
// /name) with its resource.
func (w WriteRecord) Object() string {
	ns := w.Namespace
	if strings.HasPrefix(w.Resource, "namespaces") {
		ns = ""
	}
	return w.Resource + " " + ns + "/" + w.Name
}

// writeMemory bounds the records kept (the explorer reads the last few
// seconds'; a sequence writes a few thousand times at most).
const writeMemory = 20000

// The fault shapes.
const (
	Fault500     = "500"
	Fault429     = "429"
	Fault403     = "403"
	FaultTimeout = "timeout"
)

// FaultRule answers the requests for Resource (plural, with "/status" for
// the subresource; "" matches none) with Verb (get, list, watch, create,
// update, patch, delete; "" matches every verb but watch) with Fault.
type FaultRule struct {
	Resource, Verb, Fault string
	// Namespace, when set, limits the rule to requests in it.
	Namespace string
	// HangFor bounds a timeout's hang (default DefaultHang).
	HangFor time.Duration
	// RetryAfter is the 429's Retry-After in seconds (default 1).
	RetryAfter int

	// What the rule did (FaultStats).
	stats FaultStats
}

// DefaultHang is how long a timeout fault holds a request whose client
// does not give up first: about a request timeout, shorter than the
// explorer's fault span.
const DefaultHang = 15 * time.Second

// FaultStats is what a rule answered: every faulted request, and of them
// the steps (StepFirst, StepLast, Steps): requests an operator's reconcile
// made itself (not a watch, and not an informer's list, which carries a
// resourceVersion), whose failure a reconcile sees.
type FaultStats struct {
	Requests            int
	Steps               int
	StepFirst, StepLast time.Time
}

// String names the rule as the explorer's actions do.
func (r *FaultRule) String() string {
	s := r.Resource
	if r.Verb != "" {
		s += "-" + r.Verb
	}
	return s + "-" + r.Fault
}

// StartFaultProxy listens on 127.0.0.1 and forwards to the API server at
// target (which must be a loopback address) trusting caPEM.
func StartFaultProxy(name, target string, caPEM []byte) (*FaultProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	if !loopback(u.Hostname()) {
		return nil, fmt.Errorf("fault proxy %s: target %s is not a loopback address", name, target)
	}
	pool := x509.NewCertPool()
	if len(caPEM) > 0 && !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("fault proxy %s: no CA certificate in the given PEM", name)
	}
	cert, certPEM, err := selfSignedLoopback()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &FaultProxy{Name: name, ln: ln, target: u, caPEM: certPEM}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // watches and logs stream through at once
	// Streams cut by an API server restart are the point, not news.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.Transport = &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		IdleConnTimeout:   90 * time.Second,
	}
	// An API server that is down (restarting) looks to the operator as it
	// would without the proxy: the connection ends without an answer.
	rp.ErrorHandler = func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) }
	p.srv = &http.Server{Handler: p.handler(rp), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

// selfSignedLoopback is a serving certificate for 127.0.0.1 that is its
// own CA, and its PEM for the client's trust.
func selfSignedLoopback() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "fleetmesh fault proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// CAPEM is the proxy's certificate, for the client's kubeconfig.
func (p *FaultProxy) CAPEM() []byte { return p.caPEM }

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback() && ip.To4() != nil
}

// URL is where the operator's kubeconfig points.
func (p *FaultProxy) URL() string { return "https://" + p.ln.Addr().String() }

// Set adds a rule (a rule for the same resource, verb and namespace is
// replaced: the last fault set on a request is the one it gets, and what
// the replaced rule did is dropped).
func (p *FaultProxy) Set(r FaultRule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, old := range p.rules {
		if old.Resource == r.Resource && old.Verb == r.Verb && old.Namespace == r.Namespace {
			p.rules = append(p.rules[:i], p.rules[i+1:]...)
			break
		}
	}
	p.rules = append(p.rules, &r)
}

// Clear removes every rule and returns what each did, by rule name.
func (p *FaultProxy) Clear() map[string]FaultStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]FaultStats{}
	for _, r := range p.rules {
		out[r.String()] = r.stats
	}
	p.rules = nil
	return out
}

// Remove takes the rule named name (FaultRule.String) off and returns what
// it did.
func (p *FaultProxy) Remove(name string) (FaultStats, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if r.String() == name {
			p.rules = append(p.rules[:i], p.rules[i+1:]...)
			return r.stats, true
		}
	}
	return FaultStats{}, false
}

// Stats is what the rules set now did so far, by rule name.
func (p *FaultProxy) Stats() map[string]FaultStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]FaultStats{}
	for _, r := range p.rules {
		out[r.String()] = r.stats
	}
	return out
}

// Close stops the proxy (open streams end).
func (p *FaultProxy) Close() error { return p.srv.Close() }

// reqInfo is what a rule matches on.
type reqInfo struct {
	namespace, resource, name, verb string
	// step: a request a reconcile makes itself (FaultStats).
	step bool
}

// requestInfo parses an API request path the way the API server does for
// the parts rules need: /api/v1/... and /apis/<group>/<version>/...,
// namespaced or not, with a subresource.
func requestInfo(r *http.Request) reqInfo {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return reqInfo{}
	}
	var in reqInfo
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		in.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 {
		return reqInfo{}
	}
	in.resource = parts[0]
	if len(parts) >= 2 {
		in.name = parts[1]
	}
	if len(parts) >= 3 {
		in.resource += "/" + parts[2]
	}
	if strings.HasPrefix(in.resource, "namespaces") && in.name != "" {
		in.namespace = in.name
	}
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		switch {
		case q.Get("watch") == "true" || q.Get("watch") == "1":
			in.verb = "watch"
		case in.name == "":
			in.verb = "list"
		default:
			in.verb = "get"
		}
	case http.MethodPost:
		in.verb = "create"
	case http.MethodPut:
		in.verb = "update"
	case http.MethodPatch:
		in.verb = "patch"
	case http.MethodDelete:
		in.verb = "delete"
		if in.name == "" {
			in.verb = "deletecollection"
		}
	}
	in.step = in.verb != "watch" && !(in.verb == "list" && q.Has("resourceVersion"))
	return in
}

func (r *FaultRule) matches(in reqInfo) bool {
	if r.Resource == "" || r.Resource != in.resource || (r.Namespace != "" && r.Namespace != in.namespace) {
		return false
	}
	if r.Verb == "" {
		return in.verb != "watch"
	}
	return r.Verb == in.verb
}

func (p *FaultProxy) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		in := requestInfo(req)
		var matched *FaultRule
		var rule FaultRule
		p.mu.Lock()
		for _, r := range p.rules {
			if r.matches(in) {
				r.stats.Requests++
				matched, rule = r, *r
				break
			}
		}
		p.mu.Unlock()
		if matched == nil {
			if !writeVerbs[in.verb] {
				next.ServeHTTP(w, req)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			next.ServeHTTP(sw, req)
			p.recordWrite(WriteRecord{At: time.Now(), Verb: in.verb, Resource: in.resource, Namespace: in.namespace, Name: in.name,
				FieldManager: req.URL.Query().Get("fieldManager"), Code: sw.code()})
			return
		}
		if in.step {
			// Deferred: a hung request ends in a panic that cuts the
			// connection off.
			defer p.countFailedStep(matched)
		}
		answerFault(w, req, rule, in, p.Name)
	})
}

// writeVerbs are the verbs Writes records.
var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

func (p *FaultProxy) recordWrite(w WriteRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.writes) >= writeMemory {
		p.writes = append(p.writes[:0], p.writes[len(p.writes)-writeMemory/2:]...)
	}
	p.writes = append(p.writes, w)
}

// Writes returns the writes the API server answered at or after since, in
// the order their answers came (a write the proxy faulted is not among
// them: that answer was not the API server's).
func (p *FaultProxy) Writes(since time.Time) []WriteRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []WriteRecord
	for _, w := range p.writes {
		if !w.At.Before(since) {
			out = append(out, w)
		}
	}
	return out
}

// countFailedStep records a step that has failed: once its client has the
// answer (or, for a hung request, gave up or was cut off), the moment the
// operator can know, and the one the explorer's status rule counts from.
func (p *FaultProxy) countFailedStep(r *FaultRule) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.stats.Steps == 0 {
		r.stats.StepFirst = now
	}
	r.stats.Steps++
	r.stats.StepLast = now
}

// answerFault writes the rule's fault for the request.
func answerFault(w http.ResponseWriter, req *http.Request, rule FaultRule, in reqInfo, who string) {
	group := ""
	if parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/"); len(parts) >= 2 && parts[0] == "apis" {
		group = parts[1]
	}
	resource, _, _ := strings.Cut(in.resource, "/")
	status := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Details: &metav1.StatusDetails{Name: in.name, Group: group, Kind: resource}}
	switch rule.Fault {
	case FaultTimeout:
		hang := rule.HangFor
		if hang == 0 {
			hang = DefaultHang
		}
		select {
		case <-req.Context().Done():
		case <-time.After(hang):
		}
		panic(http.ErrAbortHandler) // no answer: the connection just ends
	case Fault429:
		after := rule.RetryAfter
		if after == 0 {
			after = 1
		}
		w.Header().Set("Retry-After", fmt.Sprint(after))
		status.Code, status.Reason = http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests
		status.Message = "the server has received too many requests and has asked us to try again later (fault injected by the explorer)"
		status.Details.RetryAfterSeconds = int32(after)
	case Fault403:
		status.Code, status.Reason = http.StatusForbidden, metav1.StatusReasonForbidden
		where := "at the cluster scope"
		if in.namespace != "" && !strings.HasPrefix(in.resource, "namespaces") {
			where = fmt.Sprintf("in the namespace %q", in.namespace)
		}
		status.Message = fmt.Sprintf("%s %q is forbidden: User %q cannot %s resource %q in API group %q %s (fault injected by the explorer)",
			resource, in.name, who, in.verb, in.resource, group, where)
	default:
		status.Code, status.Reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
		status.Message = "Internal error occurred: fault injected by the explorer"
	}
	b, err := json.Marshal(status)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_, _ = w.Write(b)
}
