package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// waitReady blocks until DIR/ready names a live testbed, and prints the
// kubeconfig path. It fails early when the testbed process died, or never
// showed up, instead of waiting out the whole timeout.
func waitReady(args []string) error {
	fs := flag.NewFlagSet("wait", flag.ContinueOnError)
	dir := fs.String("dir", ".testbed", "work directory given to testbed up")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait")
	if err := fs.Parse(args); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	started := time.Now()
	deadline := started.Add(*timeout)
	// `testbed up &` may not have written its pid yet when wait starts.
	appearDeadline := started.Add(15 * time.Second)
	seen := false
	for time.Now().Before(deadline) {
		kubeconfig, ready, err := readyState(abs)
		if err != nil {
			return err
		}
		if ready {
			fmt.Println(kubeconfig)
			return nil
		}
		pid, err := readPID(abs, pidFile)
		if err != nil {
			return err
		}
		seen = seen || pid != 0
		switch {
		case (pid != 0 && !testbedAlive(pid)) || (pid == 0 && seen):
			return upFailed(abs, readFailed(abs, started.Add(-time.Second)))
		case pid == 0 && time.Now().After(appearDeadline):
			if reason := readFailed(abs, started.Add(-time.Second)); reason != "" {
				return upFailed(abs, reason)
			}
			return errors.New("no testbed up is running in " + abs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("testbed in %s not ready after %s", abs, *timeout)
}

// readyState reads DIR/ready; a marker whose owner is gone is stale.
func readyState(dir string) (kubeconfig string, ready bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, readyFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	pid, err := readPID(dir, readyFile)
	if err != nil || !testbedAlive(pid) {
		return "", false, nil
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 {
		return "", false, nil
	}
	return lines[1], true, nil
}

func upFailed(dir, reason string) error {
	if reason == "" {
		reason = "see its output and " + filepath.Join(dir, "logs")
	}
	return fmt.Errorf("testbed up exited before the cluster was ready: %s", reason)
}
