package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ericdev/fleetmesh/e2e/cluster/local"
)

// down stops the testbed in DIR: SIGTERM to the testbed process (which stops
// its components itself), then, after the timeout, SIGKILL to it and to
// every recorded component process group still alive.
func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	dir := fs.String("dir", ".testbed", "work directory given to testbed up")
	timeout := fs.Duration("timeout", 30*time.Second, "grace period before SIGKILL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return err
	}
	pid, err := readPID(abs, pidFile)
	if err != nil {
		return err
	}
	if testbedAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	if !waitGone(abs, pid, *timeout) {
		fmt.Fprintf(os.Stderr, "testbed down: still running after %s, killing\n", *timeout)
		killAll(abs, pid)
		if !waitGone(abs, pid, 5*time.Second) {
			return fmt.Errorf("processes of %s survived SIGKILL", abs)
		}
	}
	removeMarkers(abs)
	_ = os.Remove(filepath.Join(abs, local.ProcessesFile))
	return nil
}

// waitGone polls until the testbed process and every recorded component are
// gone, or timeout passes.
func waitGone(dir string, pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if !testbedAlive(pid) && !componentsAlive(dir) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func componentsAlive(dir string) bool {
	recs, err := local.ReadProcessRecords(dir)
	if err != nil {
		return false
	}
	for _, r := range recs {
		if r.Alive() {
			return true
		}
	}
	return false
}

func killAll(dir string, pid int) {
	if testbedAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	recs, _ := local.ReadProcessRecords(dir)
	for _, r := range recs {
		r.Kill()
	}
}
