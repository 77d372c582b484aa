// Package proc runs the test beds' components (the local control plane's,
// the real node's) as children of the test process, and waits on them.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is one component running as a child of this process.
type Process struct {
	Name    string
	Binary  string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	err     error         // exit status; valid after done is closed
}

// Start runs argv in its own process group with stdout and stderr appended
// to logPath. Its own group lets a bed kill it and anything it forks with
// one signal, and keeps a terminal's Ctrl-C from reaching it before the bed
// decides the shutdown order. Pdeathsig makes the kernel kill it if this
// process dies without stopping it (a test binary killed by its timeout).
func Start(name, logPath string, env []string, argv ...string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor
	fmt.Fprintf(logFile, "### %s\n", strings.Join(argv, " "))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Binary: argv[0], LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID is the process's (and its group's) id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process group; a group that is already gone
// is not an error.
func (p *Process) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-p.PID(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Stop asks the group to terminate, waits up to grace, then kills it, and
// returns once the process has been reaped.
func (p *Process) Stop(grace time.Duration) {
	if !p.Exited() {
		p.signalGroup(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	// Kill the group even after the leader exited: a forked helper may remain.
	p.signalGroup(syscall.SIGKILL)
	<-p.done
}

// Failure describes an unexpected exit, with the end of the component's log.
func (p *Process) Failure(what string) error {
	return fmt.Errorf("%s: %s (%v); last lines of %s:\n%s", p.Name, what, p.err, p.LogPath, Tail(p.LogPath, 30))
}

// Tail returns the last n lines of a file, for error messages.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// TimeoutError is a wait that ran out (or was cancelled): Err is the
// context's error.
type TimeoutError struct {
	What string
	Err  error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("timed out waiting for %s: %v", e.What, e.Err)
}
func (e *TimeoutError) Unwrap() error { return e.Err }

// Poll calls cond every 100 ms until it holds, failing early when healthy
// reports that a component exited; a wait that runs out is a *TimeoutError.
func Poll(ctx context.Context, what string, healthy func() error, cond func(context.Context) (bool, error)) error {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for {
		if err := healthy(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		ok, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return &TimeoutError{What: what, Err: ctx.Err()}
		case <-ticker.C:
		}
	}
}
