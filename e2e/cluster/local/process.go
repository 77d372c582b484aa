package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane component running as a child of this process.
type process struct {
	name    string
	binary  string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has been reaped
	err     error         // exit status; valid after done is closed
}

// startProcess runs binary in its own process group with stdout and stderr
// appended to logPath. Its own group lets Down kill it and anything it forks
// with one signal, and keeps a terminal's Ctrl-C from reaching it before we
// decide the shutdown order. Pdeathsig makes the kernel kill it if this
// process dies without running Down (a test binary killed by its timeout).
func startProcess(name, binary, logPath string, args, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child keeps its own descriptor
	fmt.Fprintf(logFile, "### %s %s\n", binary, strings.Join(args, " "))

	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, binary: binary, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process group; a group that is already gone
// is not an error.
func (p *process) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop asks the group to terminate, waits up to grace, then kills it, and
// returns once the process has been reaped.
func (p *process) stop(grace time.Duration) {
	if !p.exited() {
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

// failure describes an unexpected exit, with the end of the component's log.
func (p *process) failure(what string) error {
	return fmt.Errorf("%s: %s (%v); last lines of %s:\n%s", p.name, what, p.err, p.logPath, tail(p.logPath, 30))
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
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

// ProcessRecord is one line of WorkDir/processes: enough for a different
// process (testbed down) to find and, as a last resort, kill a component.
type ProcessRecord struct {
	Name   string
	PGID   int
	Binary string
}

// ProcessesFile lists the components a provider started, one per line as
// "name pgid binary", appended as each starts so a crash mid-Up still leaves
// a complete record.
const ProcessesFile = "processes"

func appendRecord(workDir string, p *process) error {
	f, err := os.OpenFile(filepath.Join(workDir, ProcessesFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = fmt.Fprintf(f, "%s %d %s\n", p.name, p.pid(), p.binary)
	return err
}

// ReadProcessRecords parses WorkDir/processes; a missing file means nothing
// was started.
func ReadProcessRecords(workDir string) ([]ProcessRecord, error) {
	data, err := os.ReadFile(filepath.Join(workDir, ProcessesFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []ProcessRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r ProcessRecord
		if _, err := fmt.Sscanf(line, "%s %d %s", &r.Name, &r.PGID, &r.Binary); err == nil {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// Alive reports whether the recorded component still runs: its group leader
// exists and still executes the recorded binary. Checking the executable
// keeps a recycled PID from being mistaken for (and killed as) ours.
func (r ProcessRecord) Alive() bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", r.PGID))
	if err != nil {
		return false
	}
	if isZombie(r.PGID) {
		return false
	}
	return strings.TrimSuffix(exe, " (deleted)") == r.Binary
}

// Kill sends SIGKILL to the recorded process group if it is still ours.
func (r ProcessRecord) Kill() {
	if r.Alive() {
		_ = syscall.Kill(-r.PGID, syscall.SIGKILL)
	}
}

// isZombie reports an exited but unreaped process, which holds a PID but
// runs nothing.
func isZombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3 follows the parenthesised command name, which may contain spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
