package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// fakeAPIServer is an httptest TLS backend answering a Secret get, a
// Namespace list and a Namespace watch (one event, then it holds the
// stream open), recording the Authorization header it saw.
func fakeAPIServer(t *testing.T) (*httptest.Server, *sync.Map) {
	seen := &sync.Map{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Method+" "+r.URL.Path, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/namespaces/mesh-system/secrets/license":
			_ = json.NewEncoder(w).Encode(corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "mesh-system", Name: "license"}})
		case r.URL.Path == "/api/v1/namespaces" && r.URL.Query().Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "ADDED", "object": corev1.Namespace{
				TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "watched", ResourceVersion: "2"}}})
			w.(http.Flusher).Flush()
			<-r.Context().Done() // a watch stays open
		case r.URL.Path == "/api/v1/namespaces/refusing" && r.Method == http.MethodPatch:
			// A ValidatingAdmissionPolicy's answer: 422 Invalid.
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
				Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: "denied by the explorer's policy"})
		case r.URL.Path == "/api/v1/namespaces/accepting" && r.Method == http.MethodPatch:
			_ = json.NewEncoder(w).Encode(corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "accepting"}})
		case r.URL.Path == "/api/v1/namespaces":
			_ = json.NewEncoder(w).Encode(corev1.NamespaceList{TypeMeta: metav1.TypeMeta{Kind: "NamespaceList", APIVersion: "v1"},
				Items: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "listed"}}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func startProxy(t *testing.T) (*FaultProxy, kubernetes.Interface, *sync.Map) {
	backend, seen := fakeAPIServer(t)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: backend.Certificate().Raw})
	p, err := StartFaultProxy("system:serviceaccount:mesh-system:mesh-operator", backend.URL, ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	if !strings.HasPrefix(p.URL(), "https://127.0.0.1:") {
		t.Fatalf("proxy listens on %s, not on 127.0.0.1", p.URL())
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: p.URL(), BearerToken: "sa-token", TLSClientConfig: rest.TLSClientConfig{CAData: p.CAPEM()}})
	if err != nil {
		t.Fatal(err)
	}
	return p, cs, seen
}

func getLicense(cs kubernetes.Interface, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cs.CoreV1().Secrets("mesh-system").Get(ctx, "license", metav1.GetOptions{})
	return err
}

func listNamespaces(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	list, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "listed" {
		t.Fatalf("a request no rule names must pass through: %v %+v", err, list)
	}
}

func TestFaultProxyPassesThroughWithTheBearerToken(t *testing.T) {
	_, cs, seen := startProxy(t)
	if err := getLicense(cs, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	listNamespaces(t, cs)
	if auth, _ := seen.Load("GET /api/v1/namespaces/mesh-system/secrets/license"); auth != "Bearer sa-token" {
		t.Fatalf("the API server saw Authorization %q, want the operator's bearer token", auth)
	}
}

func TestFaultProxyFaultShapes(t *testing.T) {
	for _, tc := range []struct {
		fault string
		want  func(error) bool
	}{
		{Fault403, apierrors.IsForbidden},
		{Fault500, apierrors.IsInternalError},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			p, cs, _ := startProxy(t)
			p.Set(FaultRule{Resource: "secrets", Verb: "get", Fault: tc.fault})
			err := getLicense(cs, 5*time.Second)
			if !tc.want(err) {
				t.Fatalf("got %v (%T), want a parsed %s Status", err, err, tc.fault)
			}
			listNamespaces(t, cs)
			st := p.Stats()["secrets-get-"+tc.fault]
			if st.Requests != 1 || st.Steps != 1 || st.StepFirst.IsZero() {
				t.Fatalf("stats %+v, want one faulted step", st)
			}
			if got := p.Clear(); len(got) != 1 {
				t.Fatalf("Clear returned %v", got)
			}
			if err := getLicense(cs, 5*time.Second); err != nil {
				t.Fatalf("after Clear: %v", err)
			}
		})
	}
	t.Run("403 body", func(t *testing.T) {
		p, cs, _ := startProxy(t)
		p.Set(FaultRule{Resource: "secrets", Verb: "get", Fault: Fault403})
		err := getLicense(cs, 5*time.Second)
		var se apierrors.APIStatus
		if !errorsAs(err, &se) || se.Status().Details == nil || se.Status().Details.Name != "license" || se.Status().Details.Kind != "secrets" ||
			!strings.Contains(se.Status().Message, `cannot get resource "secrets"`) {
			t.Fatalf("the 403 is not a Forbidden Status like RBAC's: %#v", err)
		}
	})
	t.Run("429 with Retry-After", func(t *testing.T) {
		p, cs, _ := startProxy(t)
		p.Set(FaultRule{Resource: "secrets", Verb: "get", Fault: Fault429, RetryAfter: 1})
		// Raw: the answer itself.
		req, _ := http.NewRequest(http.MethodGet, p.URL()+"/api/v1/namespaces/mesh-system/secrets/license", nil)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(p.CAPEM())
		raw := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("got %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		// client-go waits as told and retries: once the fault is gone its
		// retry succeeds, after at least the Retry-After.
		go func() { time.Sleep(1500 * time.Millisecond); p.Clear() }()
		start := time.Now()
		if err := getLicense(cs, 20*time.Second); err != nil {
			t.Fatalf("client-go's retry after the 429s: %v", err)
		}
		if took := time.Since(start); took < time.Second {
			t.Fatalf("client-go did not wait for Retry-After (%s)", took)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		p, cs, _ := startProxy(t)
		p.Set(FaultRule{Resource: "secrets", Verb: "get", Fault: FaultTimeout, HangFor: 500 * time.Millisecond})
		start := time.Now()
		err := getLicense(cs, 10*time.Second)
		if err == nil || time.Since(start) < 500*time.Millisecond {
			t.Fatalf("a hung request must end without an answer after HangFor: %v after %s", err, time.Since(start))
		}
		if _, isStatus := err.(apierrors.APIStatus); isStatus {
			t.Fatalf("a timeout must not answer with a Status: %v", err)
		}
		// A hung step fails when its client sees it fail, not when it was
		// sent: the explorer's status rule counts from then.
		// (the proxy counts it just after cutting the connection off)
		var st FaultStats
		for deadline := time.Now().Add(time.Second); st.Steps == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			st = p.Stats()["secrets-get-timeout"]
		}
		if st.Steps != 1 || st.StepFirst.Sub(start) < 500*time.Millisecond {
			t.Fatalf("the failed step is counted when it ends: %+v, %s after it was sent", st, st.StepFirst.Sub(start))
		}
		// A client that gives up first gets its own deadline.
		p.Set(FaultRule{Resource: "secrets", Verb: "get", Fault: FaultTimeout, HangFor: time.Hour})
		start = time.Now()
		if err := getLicense(cs, 300*time.Millisecond); err == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("the client's deadline must end the hang: %v after %s", err, time.Since(start))
		}
		listNamespaces(t, cs)
	})
}

func TestFaultProxyStreamsWatches(t *testing.T) {
	p, cs, _ := startProxy(t)
	// A rule on every verb of namespaces but watch leaves the watch alone.
	p.Set(FaultRule{Resource: "namespaces", Fault: Fault500})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := cs.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		if ns, ok := ev.Object.(*corev1.Namespace); !ok || ns.Name != "watched" {
			t.Fatalf("got %#v", ev)
		}
	case <-ctx.Done():
		t.Fatal("the watch event did not stream through while the stream stays open")
	}
	if _, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); !apierrors.IsInternalError(err) {
		t.Fatalf("the list must fail: %v", err)
	}
}

func TestFaultProxyRequestInfo(t *testing.T) {
	for path, want := range map[string]reqInfo{
		"GET /api/v1/namespaces/mesh-system/secrets/license":                       {namespace: "mesh-system", resource: "secrets", name: "license", verb: "get", step: true},
		"GET /api/v1/namespaces":                                                   {resource: "namespaces", verb: "list", step: true},
		"GET /api/v1/namespaces?resourceVersion=0&limit=500":                       {resource: "namespaces", verb: "list"},
		"GET /api/v1/namespaces?watch=true":                                        {resource: "namespaces", verb: "watch"},
		"PATCH /api/v1/namespaces/x1-app":                                          {namespace: "x1-app", resource: "namespaces", name: "x1-app", verb: "patch", step: true},
		"PUT /api/v1/namespaces/x1-app/status":                                     {namespace: "x1-app", resource: "namespaces/status", name: "x1-app", verb: "update", step: true},
		"PATCH /apis/networking.k8s.io/v1/namespaces/x1-app/networkpolicies/a":     {namespace: "x1-app", resource: "networkpolicies", name: "a", verb: "patch", step: true},
		"GET /apis/security.istio.io/v1/peerauthentications":                       {resource: "peerauthentications", verb: "list", step: true},
		"DELETE /apis/apps/v1/namespaces/x1-app/statefulsets":                      {namespace: "x1-app", resource: "statefulsets", verb: "deletecollection", step: true},
		"PUT /apis/celld.eric.dev/v1alpha1/namespaces/x1-app/celldfleets/a/status": {namespace: "x1-app", resource: "celldfleets/status", name: "a", verb: "update", step: true},
		"GET /apis": {},
	} {
		method, target, _ := strings.Cut(path, " ")
		req := httptest.NewRequest(method, target, nil)
		if got := requestInfo(req); got != want {
			t.Errorf("%s: got %+v, want %+v", path, got, want)
		}
	}
}

func TestFaultProxyOnlyLoopback(t *testing.T) {
	if _, err := StartFaultProxy("x", "https://10.0.0.1:6443", nil); err == nil {
		t.Fatal("a non-loopback API server must be refused")
	}
}

func errorsAs(err error, target *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*target = s
	}
	return ok
}

// TestFaultProxyThroughAKubeconfig: a kubeconfig pointed at the proxy
// (pointKubeconfigAt) still authenticates with the ServiceAccount's token:
// clientcmd uses a token only over TLS, so the proxy serves TLS.
func TestFaultProxyThroughAKubeconfig(t *testing.T) {
	p, _, seen := startProxy(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthorityData: []byte("the API server's")}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: "sa-token"}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "sa"}
	cfg.CurrentContext = "sa"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	if err := pointKubeconfigAt(path, p.URL(), p.CAPEM()); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := getLicense(cs, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if auth, _ := seen.Load("GET /api/v1/namespaces/mesh-system/secrets/license"); auth != "Bearer sa-token" {
		t.Fatalf("the API server saw Authorization %q through the kubeconfig, want the token", auth)
	}
}

// TestFaultProxyRecordsWrites: every write the operator sends through the
// proxy is recorded with the API server's answer, its object and its field
// manager, so the explorer can count refused retries per writer and object
// (issue 43: the API server's metrics count them per kind only). A write
// the proxy faulted itself is not the API server's answer and is left out.
func TestFaultProxyRecordsWrites(t *testing.T) {
	p, cs, _ := startProxy(t)
	start := time.Now()
	patch := []byte(`{"metadata":{"labels":{"a":"b"}}}`)
	for range 2 {
		_, err := cs.CoreV1().Namespaces().Patch(context.Background(), "refusing", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "fleet-operator/fleet/x1-app/a"})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("the refused patch: %v", err)
		}
	}
	if _, err := cs.CoreV1().Namespaces().Patch(context.Background(), "accepting", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "mesh-operator"}); err != nil {
		t.Fatal(err)
	}
	p.Set(FaultRule{Resource: "namespaces", Verb: "patch", Fault: Fault403})
	_, _ = cs.CoreV1().Namespaces().Patch(context.Background(), "refusing", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "faulted"})
	listNamespaces(t, cs) // reads are not writes
	got := p.Writes(start)
	if len(got) != 3 {
		t.Fatalf("recorded %d writes, want the three the API server answered: %+v", len(got), got)
	}
	for i, want := range []WriteRecord{
		{Verb: "patch", Resource: "namespaces", Namespace: "refusing", Name: "refusing", FieldManager: "fleet-operator/fleet/x1-app/a", Code: 422},
		{Verb: "patch", Resource: "namespaces", Namespace: "refusing", Name: "refusing", FieldManager: "fleet-operator/fleet/x1-app/a", Code: 422},
		{Verb: "patch", Resource: "namespaces", Namespace: "accepting", Name: "accepting", FieldManager: "mesh-operator", Code: 200},
	} {
		g := got[i]
		if g.At.Before(start) {
			t.Errorf("write %d recorded at %s, before the test began", i, g.At)
		}
		g.At = time.Time{}
		if g != want {
			t.Errorf("write %d: got %+v, want %+v", i, g, want)
		}
	}
	if later := p.Writes(time.Now()); len(later) != 0 {
		t.Fatalf("writes since now: %+v", later)
	}
}
