package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files testbed keeps in DIR next to the provider's own (kubeconfig,
// processes, etcd/, logs/, ...).
const (
	pidFile    = "testbed.pid"
	readyFile  = "ready"
	failedFile = "failed" // why the last `up` failed before ready
)

// writePID records this process as the owner of dir's cluster.
func writePID(dir string) error {
	return writeWhole(dir, pidFile, strconv.Itoa(os.Getpid())+"\n")
}

// writeWhole replaces dir/name in one rename: `testbed wait` polls these
// files while `testbed up &` writes them, and os.WriteFile would let it read
// the file created but still empty.
func writeWhole(dir, name, content string) error {
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// readPID returns the recorded testbed process, or 0 if none is recorded.
func readPID(dir string, name string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if strings.TrimSpace(first) == "" {
		return 0, nil // created but not written yet: no process named
	}
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return pid, nil
}

// writeReady marks the cluster usable; it names the owning process so a
// marker left by a crashed run is not mistaken for a live cluster.
func writeReady(dir, kubeconfig string) error {
	return writeWhole(dir, readyFile, fmt.Sprintf("%d\n%s\n", os.Getpid(), kubeconfig))
}

func removeMarkers(dir string) {
	for _, name := range []string{readyFile, pidFile} {
		_ = os.Remove(filepath.Join(dir, name))
	}
}

// writeFailed leaves the start-up error for `testbed wait` to report.
func writeFailed(dir string, err error) {
	_ = writeWhole(dir, failedFile, err.Error()+"\n")
}

// readFailed returns the failure recorded at or after since, if any; older
// markers belong to earlier runs.
func readFailed(dir string, since time.Time) string {
	path := filepath.Join(dir, failedFile)
	info, err := os.Stat(path)
	if err != nil || info.ModTime().Before(since) {
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// testbedAlive reports whether pid is a running (not zombie) testbed up
// process. Matching the command line keeps a recycled PID from being
// signalled.
func testbedAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	return len(args) > 1 && strings.Contains(filepath.Base(args[0]), "testbed") && args[1] == "up"
}
