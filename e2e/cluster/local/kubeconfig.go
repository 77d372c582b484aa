package local

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// restConfig is the admin client configuration. Rate limits are raised far
// above client-go's defaults (5 QPS): the server is local, and specs that
// create hundreds of objects should measure the operators, not the client.
func restConfig(host string, certs *pki) *rest.Config {
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   certs.caPEM,
			CertData: certs.adminCertPEM,
			KeyData:  certs.adminKeyPEM,
		},
		QPS:   200,
		Burst: 400,
	}
}

// writeKubeconfig writes a self-contained admin kubeconfig (credentials
// embedded), so it stays valid when copied elsewhere.
func writeKubeconfig(path, host string, certs *pki) error {
	const name = "fleetmesh-local"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: certs.caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{
		ClientCertificateData: certs.adminCertPEM,
		ClientKeyData:         certs.adminKeyPEM,
	}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}
