package manager

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"

	ctrl "sigs.k8s.io/controller-runtime"
)

// MemoryLimitEnv names the environment variable the charts fill with the
// operator container's memory limit in MiB, through the downward API
// (resourceFieldRef limits.memory, divisor 1Mi). Without a limit on the
// container the kubelet passes the node's allocatable memory.
const MemoryLimitEnv = "MEMORY_LIMIT_MIB"

// memoryLimitShare is the part of the container's memory limit the Go
// runtime's soft limit (GOMEMLIMIT) is set to: the garbage collector works
// harder as the heap nears it, and the rest is headroom for what the limit
// does not govern (goroutine stacks beyond it, the binary, page cache
// charged to the container) so that the kernel's OOM killer is not reached
// first (docs/install.md#sizing).
const memoryLimitShare = 0.9

// softMemoryLimit is the soft memory limit in bytes to set from the
// environment, or 0 to leave the runtime's: an explicit GOMEMLIMIT (which
// the runtime read at start) wins, and without MemoryLimitEnv there is none.
// A value that is not a positive number of MiB is an error (and no limit).
func softMemoryLimit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := getenv(MemoryLimitEnv)
	if v == "" {
		return 0, nil
	}
	mib, err := strconv.ParseInt(v, 10, 64)
	if err != nil || mib <= 0 || mib > math.MaxInt64>>20 {
		return 0, fmt.Errorf("$%s=%q is not a positive number of MiB; the Go runtime keeps no soft memory limit", MemoryLimitEnv, v)
	}
	return int64(float64(mib<<20) * memoryLimitShare), nil
}

// applySoftMemoryLimit sets the Go runtime's soft memory limit from the
// environment and logs what it decided.
func applySoftMemoryLimit(getenv func(string) string) {
	log := ctrl.Log.WithName("setup")
	limit, err := softMemoryLimit(getenv)
	switch {
	case err != nil:
		log.Error(err, "soft memory limit")
	case limit > 0:
		debug.SetMemoryLimit(limit)
		log.Info("soft memory limit set (GOMEMLIMIT)", "bytes", limit, "fromMiB", getenv(MemoryLimitEnv), "share", memoryLimitShare)
	}
}
