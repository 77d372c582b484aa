package local

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the file paths of the credentials the control plane uses. ECDSA
// P-256 keys are generated because they take microseconds (RSA-2048 takes
// tens of milliseconds each) and every component and the ServiceAccount token
// signer accept them.
type pki struct {
	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	SAKey, SAPub            string

	caPEM, adminCertPEM, adminKeyPEM []byte
}

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newPKI writes a fresh CA, an API server serving certificate for the
// loopback address, an admin client certificate in group system:masters and a
// ServiceAccount signing key into dir. serviceIP is the first IP of the
// Service range (the in-cluster "kubernetes" Service) so the serving
// certificate stays valid for in-cluster style clients too.
func newPKI(dir string, serviceIP net.IP) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		CACert: filepath.Join(dir, "ca.crt"), CAKey: filepath.Join(dir, "ca.key"),
		ServingCert: filepath.Join(dir, "apiserver.crt"), ServingKey: filepath.Join(dir, "apiserver.key"),
		AdminCert: filepath.Join(dir, "admin.crt"), AdminKey: filepath.Join(dir, "admin.key"),
		SAKey: filepath.Join(dir, "sa.key"), SAPub: filepath.Join(dir, "sa.pub"),
	}
	ca, err := newCA()
	if err != nil {
		return nil, err
	}
	if p.caPEM, err = writePair(p.CACert, p.CAKey, ca); err != nil {
		return nil, err
	}
	serving, err := ca.issue(servingTemplate(serviceIP))
	if err != nil {
		return nil, err
	}
	if _, err := writePair(p.ServingCert, p.ServingKey, serving); err != nil {
		return nil, err
	}
	admin, err := ca.issue(clientTemplate("fleetmesh-e2e-admin", "system:masters"))
	if err != nil {
		return nil, err
	}
	if p.adminCertPEM, err = writePair(p.AdminCert, p.AdminKey, admin); err != nil {
		return nil, err
	}
	if p.adminKeyPEM, err = os.ReadFile(p.AdminKey); err != nil {
		return nil, err
	}
	return p, writeSAKeys(p.SAKey, p.SAPub)
}

func newCA() (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := baseTemplate()
	tmpl.Subject = pkix.Name{CommonName: "fleetmesh-e2e-ca"}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

// issue signs tmpl with the CA for a fresh key.
func (ca *keyPair) issue(tmpl *x509.Certificate) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func baseTemplate() *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		// Backdated so a clock that is slightly off does not reject it.
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(365 * 24 * time.Hour),
	}
}

func servingTemplate(serviceIP net.IP) *x509.Certificate {
	tmpl := baseTemplate()
	tmpl.Subject = pkix.Name{CommonName: "kube-apiserver"}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local"}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	if serviceIP != nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, serviceIP)
	}
	return tmpl
}

func clientTemplate(user string, groups ...string) *x509.Certificate {
	tmpl := baseTemplate()
	tmpl.Subject = pkix.Name{CommonName: user, Organization: groups}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return tmpl
}

// writePair writes cert and key as PEM and returns the certificate PEM.
func writePair(certPath, keyPath string, kp *keyPair) ([]byte, error) {
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw})
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return certPEM, writeKey(keyPath, kp.key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// writeSAKeys writes the key the API server signs ServiceAccount tokens with
// (TokenRequest, `kubectl create token`) and its public half, which both the
// API server and the controller-manager's token controller need.
func writeSAKeys(keyPath, pubPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return fmt.Errorf("service account public key: %w", err)
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
}

// IssueClientCert returns a client certificate and key (PEM) for user in
// groups, signed by the running cluster's CA, and the CA certificate: the
// credentials of a real node's kubelet (system:node:NAME in system:nodes) or
// kube-proxy. It fails before Up.
func (p *Provider) IssueClientCert(user string, groups ...string) (certPEM, keyPEM, caPEM []byte, err error) {
	p.mu.Lock()
	certs := p.certs
	p.mu.Unlock()
	if certs == nil {
		return nil, nil, nil, fmt.Errorf("no cluster: IssueClientCert needs a running cluster")
	}
	ca, err := loadPair(certs.CACert, certs.CAKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cluster CA: %w", err)
	}
	kp, err := ca.issue(clientTemplate(user, groups...))
	if err != nil {
		return nil, nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(kp.key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), certs.caPEM, nil
}

// loadPair reads a certificate and its ECDSA key written by writePair.
func loadPair(certPath, keyPath string) (*keyPair, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ECDSA key", keyPath)
	}
	return &keyPair{cert: cert, key: ec}, nil
}
