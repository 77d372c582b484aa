// Package harness runs the operators the way the local end-to-end tier and
// `make demo` need them: as processes on this machine, authenticated as the
// ServiceAccounts their charts create and so limited to their charts' RBAC.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// Chart is one operator chart installed without its Deployment: the
// operator runs as a local process instead of a Pod.
type Chart struct {
	// Name is the operator and chart name (fleet-operator, mesh-operator).
	Name      string
	Namespace string
	// Set are helm --set overrides.
	Set []string
	// Root is the tree holding charts/<Name> (default: the root passed to
	// InstallRBAC, whose bin/helm renders it).
	Root string
}

// Release is the Helm release name used for every chart here.
func (c Chart) Release() string { return c.Name }

// ServiceAccount the chart creates for the operator (release name == chart name).
func (c Chart) ServiceAccount() string { return c.Name }

// InstallRBAC renders the chart's ServiceAccount and RBAC templates with helm
// and applies them server-side, so the API server validates them and the
// operator process runs under exactly those rules.
func InstallRBAC(ctx context.Context, cl *cluster.Cluster, root string, c Chart) error {
	cs, err := cl.Clientset()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	chartRoot := root
	if c.Root != "" {
		chartRoot = c.Root
	}
	args := []string{"template", c.Release(), filepath.Join(chartRoot, "charts", c.Name), "--namespace", c.Namespace,
		"--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml"}
	for _, s := range c.Set {
		args = append(args, "--set", s)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "helm"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("helm template %s: %v: %s", c.Name, err, stderr.String())
	}
	f, err := os.CreateTemp("", c.Name+"-rbac-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(out); err != nil {
		return err
	}
	_ = f.Close()
	return cluster.InstallManifests(ctx, cl.REST, f.Name())
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a bound token from the TokenRequest API.
func ServiceAccountKubeconfig(ctx context.Context, cl *cluster.Cluster, namespace, sa, path string) error {
	cs, err := kubernetes.NewForConfig(cl.REST)
	if err != nil {
		return err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", namespace, sa, err)
	}
	admin, err := clientcmd.LoadFromFile(cl.Kubeconfig)
	if err != nil {
		return err
	}
	current := admin.Contexts[admin.CurrentContext]
	if current == nil {
		return fmt.Errorf("%s has no current context", cl.Kubeconfig)
	}
	user := "system:serviceaccount:" + namespace + ":" + sa
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = admin.Clusters[current.Cluster]
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = user
	return clientcmd.WriteToFile(*cfg, path)
}

// pointKubeconfigAt makes the kubeconfig at path talk to server (a fault
// proxy on 127.0.0.1) trusting caPEM, with the same credentials.
func pointKubeconfigAt(path, server string, caPEM []byte) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for name, c := range cfg.Clusters {
		c = c.DeepCopy()
		c.Server, c.CertificateAuthorityData, c.CertificateAuthority = server, caPEM, ""
		cfg.Clusters[name] = c
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// Process is an operator running on this machine.
type Process struct {
	Name       string
	Binary     string
	Args       []string
	Env        []string
	Kubeconfig string
	LogPath    string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// logStart is where this run's lines begin in LogPath.
	logStart int64
}

// Start runs the binary in its own process group with its log in LogPath.
func (p *Process) Start() error {
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if st, err := log.Stat(); err == nil {
		p.logStart = st.Size()
	}
	fmt.Fprintf(log, "---- %s starting %s %s\n", time.Now().Format(time.RFC3339), p.Binary, strings.Join(p.Args, " "))
	cmd := exec.Command(p.Binary, p.Args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+p.Kubeconfig), p.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own group so Kill takes any children; Pdeathsig so a crashed test
	// or test bed never leaves an operator behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return nil
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Leading reports whether the running process has acquired its leader
// lease, as its log says since it started. A restarted operator waits for
// its predecessor's lease to expire (up to the lease duration after a
// SIGKILL) and reconciles nothing until then, so a quiet cluster means
// nothing while an operator is not leading.
func (p *Process) Leading() bool {
	if !p.Running() {
		return false
	}
	f, err := os.Open(p.LogPath)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, p.logStart, 1<<40))
	return err == nil && bytes.Contains(b, []byte(`"msg":"Successfully acquired lease"`))
}

// Stop sends SIGTERM (graceful shutdown) and waits, then SIGKILLs the group.
func (p *Process) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		return p.Kill()
	}
}

// Kill ends the process group at once, as a crash or node loss would.
func (p *Process) Kill() error {
	if !p.Running() {
		return nil
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return errors.New(p.Name + " did not exit after SIGKILL")
	}
}

// Pid of the running process, 0 when not running.
func (p *Process) Pid() int {
	if !p.Running() {
		return 0
	}
	return p.cmd.Process.Pid
}

// Build compiles package pkg of module dir into out, with optional build tags.
func Build(ctx context.Context, dir, pkg, out string, tags ...string) error {
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
