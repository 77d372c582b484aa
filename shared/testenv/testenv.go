// Package testenv starts a real kube-apiserver and etcd (the binaries `make
// tools` builds into bin/) for integration tests, through controller-runtime's
// envtest, with the CRDs the test names installed.
package testenv

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// RepoRoot is the directory holding go.work, found by walking up from the
// test's working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("cannot find the repository root (a directory with go.work) above the working directory")
		}
		dir = parent
	}
}

// Env is a running API server.
type Env struct {
	Config *rest.Config
	Client client.Client
	// assets is the directory holding the control plane's binaries.
	assets string
}

// Start runs kube-apiserver and etcd for the test and stops them when it
// ends. crdDirs are absolute or relative to the repository root.
func Start(t testing.TB, scheme *runtime.Scheme, crdDirs ...string) *Env {
	t.Helper()
	root := RepoRoot(t)
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Fatalf("%s not found in %s: run `make tools` first", bin, assets)
		}
	}
	var paths []string
	for _, d := range crdDirs {
		if !filepath.IsAbs(d) {
			d = filepath.Join(root, d)
		}
		paths = append(paths, d)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves the control plane running when a later step
		// (installing the CRDs) fails: stop what it started, or etcd and
		// kube-apiserver outlive the test.
		_ = env.Stop()
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Config: cfg, Client: c, assets: assets}
}

// ModuleFile returns the path of a file inside a Go module at a version,
// downloading the module through the module proxy if needed. Tests use it
// to load CRDs from their owners' modules (Istio, Gateway API).
func ModuleFile(t testing.TB, module, version, file string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v", module, version, err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: no module directory in %s", module, version, out)
	}
	return filepath.Join(info.Dir, file)
}

// InstallCRDs installs more CRDs into a running Env, e.g. to show that an
// operator recovers when an API appears.
func (e *Env) InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing CRDs from %v: %v", paths, err)
	}
}

// WaitAllowed waits until the API server allows user every request in attrs,
// and fails the test naming the requests still denied after 30 s. The RBAC
// authorizer reads roles and bindings from the API server's own informers, so
// a binding applies moments after it was created: a test that acts as the
// user right away races it (and loses on a loaded machine).
func WaitAllowed(t testing.TB, c client.Client, user string, attrs ...authorizationv1.ResourceAttributes) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var denied []authorizationv1.ResourceAttributes
		for _, a := range attrs {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &a}}
			if err := c.Create(context.Background(), sar); err != nil {
				t.Fatalf("asking whether %s may %+v: %v", user, a, err)
			}
			if !sar.Status.Allowed {
				denied = append(denied, a)
			}
		}
		if len(denied) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s %s still may not %+v", user, denied)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
