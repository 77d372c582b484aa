package manager

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPaceIsSharedByEveryClient: the manager's client builds a REST client
// per kind, and those built from one paced config draw from one bucket.
// With a bucket per kind (QPS and Burst alone) six requests split over two
// kinds went out in about 0.1 s; from one bucket of 10 QPS and a burst of 2
// they take 0.4 s.
func TestPaceIsSharedByEveryClient(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.NotFound(w, nil)
	}))
	defer srv.Close()

	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	mapper.Add(appsv1.SchemeGroupVersion.WithKind("StatefulSet"), meta.RESTScopeNamespace)
	c, err := client.New(Pace{QPS: 10, Burst: 2}.paced(&rest.Config{Host: srv.URL}), client.Options{Scheme: clientgoscheme.Scheme, Mapper: mapper})
	require.NoError(t, err)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "ns", Name: "x"}
	start := time.Now()
	for range 3 {
		_ = c.Get(ctx, key, &corev1.ConfigMap{})
		_ = c.Get(ctx, key, &appsv1.StatefulSet{})
	}
	assert.EqualValues(t, 6, requests.Load())
	assert.GreaterOrEqual(t, time.Since(start), 350*time.Millisecond, "two kinds' clients, one bucket: 4 requests past the burst at 10 per second")
}

func TestUnpacedLeavesTheConfigAlone(t *testing.T) {
	for _, p := range []Pace{{}, {QPS: -1, Burst: 10}} {
		cfg := p.paced(&rest.Config{Host: "https://127.0.0.1:1"})
		assert.Nil(t, cfg.RateLimiter)
		assert.Zero(t, cfg.QPS)
	}
}

func TestValidateRefusesAPaceWithoutBurst(t *testing.T) {
	o := Options{Namespace: "ops", APIPace: Pace{QPS: 50}}
	assert.ErrorContains(t, o.Validate(), "--kube-api-burst must be at least 1")
	o.APIPace.Burst = 1
	assert.NoError(t, o.Validate())
}

// TestResponsesAreNotCompressed: the operators' clients do not ask for
// gzip, so the API server does not compress their watch streams (it
// compresses a watch list only for a client that accepts gzip). Without
// uncompressed, Go's HTTP client sends Accept-Encoding: gzip by itself. The
// server speaks TLS as an API server does: client-go gives a config without
// TLS Go's default transport, which would ignore the setting.
func TestResponsesAreNotCompressed(t *testing.T) {
	var asked atomic.Value
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Store(r.Header.Get("Accept-Encoding"))
		http.NotFound(w, nil)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	c, err := client.New(Pace{QPS: 10, Burst: 2}.paced(uncompressed(cfg)), client.Options{Scheme: clientgoscheme.Scheme, Mapper: mapper})
	require.NoError(t, err)
	_ = c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "x"}, &corev1.ConfigMap{})
	require.NotNil(t, asked.Load(), "the request reached the server")
	assert.Empty(t, asked.Load(), "Accept-Encoding")
}
