package local_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
)

// requireTools fails (not skips) without the binaries: CI builds them first,
// so their absence is a broken setup.
func requireTools(t *testing.T, names ...string) {
	t.Helper()
	dir, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.RequireBinaries(dir, names...); err != nil {
		t.Fatal(err)
	}
}

// logWriter forwards the provider's start-up lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// up starts a provider and registers Down as cleanup.
func up(t *testing.T, opts local.Options) (*local.Provider, *cluster.Cluster) {
	t.Helper()
	opts.Log = logWriter{t}
	p := local.New(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	started := time.Now()
	c, err := p.Up(ctx)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Logf("Up with %d node(s) took %s", opts.Nodes, time.Since(started).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := p.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	return p, c
}

// childPIDs lists the live processes whose parent is this test binary.
func childPIDs(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == self {
			pids = append(pids, pid)
		}
	}
	return pids
}

func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
