package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RunControllers runs kube-controller-manager (from the directory holding
// kube-apiserver) with only the named controllers, e.g. "statefulset",
// against the Env's API server as its admin, until the test ends. The
// integration tier otherwise has no controllers: a test that needs a
// StatefulSet to really create its Pods (and be refused by admission)
// starts that one controller. Its log is printed when the test fails.
func (e *Env) RunControllers(t testing.TB, controllers ...string) {
	t.Helper()
	bin := filepath.Join(e.assets, "kube-controller-manager")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kube-controller-manager not found in %s: run `make tools` first", e.assets)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(adminKubeconfig(e), kubeconfig); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--controllers="+strings.Join(controllers, ","),
		"--leader-elect=false",
		// Serving is off: nothing scrapes it, and no port is taken.
		"--secure-port=0",
		"--profiling=false",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group, killed with the test binary even if the
	// cleanup never runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kube-controller-manager: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("kube-controller-manager log (tail):\n%s", tail(b, 4000))
			}
		}
	})
}

// adminKubeconfig is the Env's admin credentials as a kubeconfig file.
func adminKubeconfig(e *Env) clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: e.Config.CertData, ClientKeyData: e.Config.KeyData, Token: e.Config.BearerToken,
	}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	cfg.CurrentContext = "envtest"
	return *cfg
}

func tail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	if i := bytes.IndexByte(b[len(b)-n:], '\n'); i >= 0 {
		return b[len(b)-n+i+1:]
	}
	return b[len(b)-n:]
}
