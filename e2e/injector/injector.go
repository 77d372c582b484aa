// Package injector is a test-only stand-in for Istio's sidecar injector: a
// mutating admission webhook, served on 127.0.0.1 with its own CA, that adds
// an istio-proxy container to Pods labelled sidecar.istio.io/inject=true the
// way Istio does (a native sidecar when the Pod asks for one). The API server
// calls it on its real admission path, so the operator sees exactly the Pods
// it would see with Istio. It injects nothing that runs: kwok fakes the
// containers.
package injector

import (
	"context"
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
	"math/big"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Name of the MutatingWebhookConfiguration.
const Name = "e2e-istio-sidecar-injector"

// Injector is a running webhook.
type Injector struct {
	cs       kubernetes.Interface
	server   *http.Server
	listener net.Listener
	caPEM    []byte
}

// Start serves the webhook and registers it with the API server.
func Start(ctx context.Context, cfg *rest.Config) (*Injector, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	caPEM, cert, err := selfSigned()
	if err != nil {
		return nil, err
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/inject", serve)
	in := &Injector{cs: cs, listener: l, caPEM: caPEM, server: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = in.server.Serve(l) }()
	if err := in.Register(ctx); err != nil {
		in.Stop(ctx)
		return nil, err
	}
	return in, nil
}

// Register installs the MutatingWebhookConfiguration (again).
func (in *Injector) Register(ctx context.Context) error {
	url := "https://" + in.listener.Addr().String() + "/inject"
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "sidecar-injector.e2e.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: in.caPEM},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			// Like Istio's: a Pod must not start without its proxy.
			FailurePolicy:  ptr.To(admissionregistrationv1.Fail),
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{labels.IstioInject: "true"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
		}},
	}
	_, err := in.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Unregister removes the webhook, as if the injector were not installed:
// Pods are then created without a proxy.
func (in *Injector) Unregister(ctx context.Context) error {
	err := in.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Stop unregisters the webhook and stops serving.
func (in *Injector) Stop(ctx context.Context) {
	_ = in.Unregister(ctx)
	_ = in.server.Close()
}

func serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(review.Request.Object.Raw, pod); err == nil {
		if patch := injectPatch(pod); patch != nil {
			resp.Patch = patch
			resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
		}
	}
	review.Response = resp
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// injectPatch adds the proxy: as an init container with restartPolicy
// Always when the Pod asks for a native sidecar, else as a container.
func injectPatch(pod *corev1.Pod) []byte {
	if pod.Labels[labels.IstioInject] != "true" {
		return nil
	}
	// Istio's injection template writes the mesh's proxy configuration,
	// the istiod address included, into PROXY_CONFIG; the fleet operator
	// reads from it which control plane a proxy talks to.
	proxy := corev1.Container{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:e2e", Args: []string{"proxy", "sidecar"},
		Env: []corev1.EnvVar{{Name: "PROXY_CONFIG", Value: `{"discoveryAddress":"istiod.istio-system.svc:15012"}`}}}
	var ops []map[string]any
	if pod.Annotations[labels.IstioNativeSidecar] == "true" {
		proxy.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		if len(pod.Spec.InitContainers) == 0 {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/initContainers", "value": []corev1.Container{proxy}})
		} else {
			ops = append(ops, map[string]any{"op": "add", "path": "/spec/initContainers/0", "value": proxy})
		}
	} else {
		ops = append(ops, map[string]any{"op": "add", "path": "/spec/containers/-", "value": proxy})
	}
	b, _ := json.Marshal(ops)
	return b
}

// selfSigned makes a CA-signed-by-itself serving certificate for 127.0.0.1.
func selfSigned() ([]byte, tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "e2e sidecar injector"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("serving certificate: %w", err)
	}
	return certPEM, cert, nil
}
