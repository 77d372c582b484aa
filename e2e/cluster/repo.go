package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// BinDirEnv overrides where the test bed's binaries are found. Without it they
// are taken from bin/ at the repository root (the directory holding go.work),
// where `make tools` builds them.
const BinDirEnv = "FLEETMESH_BIN"

// RepoRoot walks up from the working directory to the directory that holds
// go.work. Tests run with their package directory as working directory and the
// testbed command runs from the repository root (Makefile), so both find it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work found above the working directory; run from inside the fleetmesh repository")
		}
		dir = parent
	}
}

// BinDir returns the directory holding etcd, kube-apiserver, kwok, helm, ...
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RequireBinaries fails with an actionable message when a tool is missing:
// CI always builds the tools first, so a missing binary is a setup error, not
// a reason to skip.
func RequireBinaries(binDir string, names ...string) error {
	var missing []string
	for _, name := range names {
		info, err := os.Stat(filepath.Join(binDir, name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s in %s: run `make tools` (hack/build-tools.sh) first",
			strings.Join(missing, ", "), binDir)
	}
	return nil
}

// E2EModuleDir is the e2e module's directory; its go.mod pins the versions of
// the modules whose CRDs we install.
func E2EModuleDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "e2e"), nil
}

var moduleDirs sync.Map // module path -> directory, cached: `go list` costs ~0.2s

// ModuleDir returns the on-disk directory of module (as required by the
// module in dir), downloading it into the module cache when needed. CRDs are
// read from their owners' modules so their version follows go.mod.
func ModuleDir(ctx context.Context, dir, module string) (string, error) {
	if cached, ok := moduleDirs.Load(module); ok {
		return cached.(string), nil
	}
	out, err := goCommand(ctx, dir, "list", "-m", "-f", "{{.Dir}}", module)
	if err != nil {
		return "", err
	}
	if out == "" {
		// Listed in go.mod but not extracted yet.
		if _, err := goCommand(ctx, dir, "mod", "download", module); err != nil {
			return "", err
		}
		if out, err = goCommand(ctx, dir, "list", "-m", "-f", "{{.Dir}}", module); err != nil {
			return "", err
		}
	}
	if out == "" {
		return "", fmt.Errorf("module %s has no directory in the module cache", module)
	}
	moduleDirs.Store(module, out)
	return out, nil
}

func goCommand(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s (in %s): %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}
