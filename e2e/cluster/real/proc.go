package real

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// proc is one node component, a child of this process in its own process
// group, killed by the kernel if this process dies (Pdeathsig).
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

func startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fmt.Fprintf(f, "### %s\n", strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop(grace time.Duration) {
	if !p.exited() {
		_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	if err := syscall.Kill(-p.pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

func (p *proc) failure(what string) error {
	return fmt.Errorf("%s: %s (%v); last lines of %s:\n%s", p.name, what, p.err, p.logPath, tail(p.logPath, 30))
}

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

// run runs a short command and returns its combined output as the error's
// text when it fails.
func run(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// inNode prefixes argv to run it in the node's network and mount namespace.
func (p *Provider) inNode(argv ...string) []string {
	return append([]string{"nsenter", fmt.Sprintf("--target=%d", p.holder.pid()), "--net", "--mount", "--"}, argv...)
}

// startNodeProc starts a node component inside the node's namespaces and
// records it for Down and Healthy.
func (p *Provider) startNodeProc(name string, argv ...string) (*proc, error) {
	env := []string{"PATH=" + p.binDir + "/node:" + os.Getenv("PATH")}
	pr, err := startProc(name, p.path("node", "logs", name+".log"), env, p.inNode(argv...)...)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.nodeProc = append(p.nodeProc, pr)
	p.mu.Unlock()
	return pr, nil
}
