package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A component that ignores SIGTERM is killed after the grace, with the
// child it forked: Stop signals the whole group.
func TestStopKillsTheGroupAfterTheGrace(t *testing.T) {
	log := filepath.Join(t.TempDir(), "c.log")
	p, err := Start("stubborn", log, nil, "sh", "-c", `trap "" TERM; sleep 60 & echo child $!; wait`)
	if err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(5 * time.Second)
	for child == 0 && time.Now().Before(deadline) {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "child ") {
			for _, f := range strings.Fields(string(b)[strings.Index(string(b), "child "):]) {
				if n, err := parsePID(f); err == nil {
					child = n
					break
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if child == 0 {
		t.Fatalf("the component never said its child's pid; log:\n%s", Tail(log, 5))
	}
	if p.Exited() {
		t.Fatal("Exited before Stop")
	}
	start := time.Now()
	p.Stop(300 * time.Millisecond)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("Stop took %s: the grace was not given", took)
	}
	if !p.Exited() {
		t.Error("not reaped after Stop")
	}
	// The killed child is reaped by whoever inherited it: until then it
	// is a zombie, which runs nothing.
	deadline = time.Now().Add(2 * time.Second)
	for !gone(child) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !gone(child) {
		t.Errorf("the forked child %d survived Stop", child)
	}
	if msg := p.Failure("exited").Error(); !strings.Contains(msg, "stubborn: exited") || !strings.Contains(msg, "child ") {
		t.Errorf("Failure = %q, want the name and the log's last lines", msg)
	}
}

// gone: no such process, or a zombie.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func parsePID(s string) (int, error) {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a pid")
		}
		n = n*10 + int(c-'0')
	}
	if n == 0 {
		return 0, errors.New("not a pid")
	}
	return n, nil
}

func TestPoll(t *testing.T) {
	never := func(context.Context) (bool, error) { return false, nil }
	healthy := func() error { return nil }

	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	var timeout *TimeoutError
	if err := Poll(ctx, "nothing", healthy, never); !errors.As(err, &timeout) || timeout.What != "nothing" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Poll ran out = %v, want a *TimeoutError for %q wrapping the deadline", err, "nothing")
	}

	exited := errors.New("etcd: exited unexpectedly")
	start := time.Now()
	err := Poll(context.Background(), "etcd", func() error { return exited }, never)
	if !errors.Is(err, exited) || errors.As(err, &timeout) || time.Since(start) > time.Second {
		t.Errorf("Poll with an exited component = %v after %s, want that failure at once", err, time.Since(start))
	}

	calls := 0
	err = Poll(context.Background(), "third time", healthy, func(context.Context) (bool, error) { calls++; return calls == 3, nil })
	if err != nil || calls != 3 {
		t.Errorf("Poll = %v after %d calls, want nil after 3", err, calls)
	}
}
