package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// HelmRelease describes one chart installation done with the helm binary.
// Shelling out (rather than linking Helm's library) keeps the specs exercising
// exactly what users run.
type HelmRelease struct {
	Name      string
	Namespace string
	// Chart is a chart directory, packaged chart or repo reference.
	Chart       string
	ValuesFiles []string
	// Set holds key=value overrides (helm --set).
	Set []string
	// Wait makes helm wait until the release's resources are ready.
	Wait    bool
	Timeout time.Duration
}

// HelmArgs renders the `helm upgrade --install` arguments for r.
func HelmArgs(kubeconfig string, r HelmRelease) []string {
	args := []string{"upgrade", "--install", r.Name, r.Chart,
		"--namespace", r.Namespace, "--create-namespace", "--kubeconfig", kubeconfig}
	for _, f := range r.ValuesFiles {
		args = append(args, "--values", f)
	}
	for _, s := range r.Set {
		args = append(args, "--set", s)
	}
	if r.Wait {
		args = append(args, "--wait")
	}
	if r.Timeout > 0 {
		args = append(args, "--timeout", r.Timeout.String())
	}
	return args
}

// HelmInstall installs or upgrades r with bin/helm (or helmBin if set).
func HelmInstall(ctx context.Context, helmBin, kubeconfig string, r HelmRelease) error {
	return runHelm(ctx, helmBin, HelmArgs(kubeconfig, r)...)
}

// HelmUninstall removes a release; a missing release is not an error.
func HelmUninstall(ctx context.Context, helmBin, kubeconfig, name, namespace string) error {
	return runHelm(ctx, helmBin, "uninstall", name, "--namespace", namespace,
		"--kubeconfig", kubeconfig, "--ignore-not-found")
}

func runHelm(ctx context.Context, helmBin string, args ...string) error {
	if helmBin == "" {
		dir, err := BinDir()
		if err != nil {
			return err
		}
		if err := RequireBinaries(dir, "helm"); err != nil {
			return err
		}
		helmBin = filepath.Join(dir, "helm")
	}
	cmd := exec.CommandContext(ctx, helmBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args[:min(3, len(args))], " "), err, out.String())
	}
	return nil
}
