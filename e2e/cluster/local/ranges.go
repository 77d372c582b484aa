package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// rangeLease holds node address slots (the second octet of 127.<slot+1>.0.0/16)
// for one test bed. Several beds may run at once on one machine (parallel
// packages, a benchmark beside a test run), and each runs its stand-in Pods
// on real loopback addresses: two beds handing out the same Pod IP would have
// their stand-ins fight over one socket. Each slot is an advisory lock on a
// file; the kernel releases it when the process dies, so a killed bed never
// leaks its slots.
type rangeLease struct {
	base  int
	files []*os.File
}

// leaseRanges takes n consecutive free slots, the lowest first.
func leaseRanges(n int) (*rangeLease, error) {
	if n == 0 {
		return &rangeLease{}, nil
	}
	dir := filepath.Join(os.TempDir(), "fleetmesh-node-ranges")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	for base := 0; base+n <= MaxNodes; base++ {
		l := &rangeLease{base: base}
		for i := base; i < base+n; i++ {
			f, ok, err := tryLock(filepath.Join(dir, "slot-"+strconv.Itoa(i)))
			if err != nil {
				l.release()
				return nil, err
			}
			if !ok {
				break
			}
			l.files = append(l.files, f)
		}
		if len(l.files) == n {
			return l, nil
		}
		l.release()
	}
	return nil, fmt.Errorf("no %d free consecutive node address ranges under %s: too many test beds running", n, dir)
}

func tryLock(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, true, nil
}

// slot is the address slot of the bed's node i.
func (l *rangeLease) slot(i int) int { return l.base + i }

func (l *rangeLease) release() {
	if l == nil {
		return
	}
	for _, f := range l.files {
		f.Close() // closing the last descriptor drops the lock
	}
	l.files = nil
}
