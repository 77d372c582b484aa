package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ericdev/fleetmesh/e2e/cluster/proc"
)

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

func appendRecord(workDir string, p *proc.Process) error {
	f, err := os.OpenFile(filepath.Join(workDir, ProcessesFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = fmt.Fprintf(f, "%s %d %s\n", p.Name, p.PID(), p.Binary)
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
