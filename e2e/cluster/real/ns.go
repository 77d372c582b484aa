package real

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ericdev/fleetmesh/e2e/cluster/proc"
)

// kubeletSysctls are the global (not network-namespaced) sysctls the kubelet
// sets at start (its "kernel tunables"); Down writes back what Up read.
var kubeletSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

func readSysctls(keys []string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range keys {
		b, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return nil, err
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out, nil
}

func writeSysctls(values map[string]string) error {
	var errs []error
	for k, v := range values {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v+"\n"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

// startNamespace starts the holder of the node's network and mount
// namespaces, binds the node's own /var/lib, /var/log and /run over the
// fixed host paths there, and connects it to the host with a veth pair.
func (p *Provider) startNamespace(ctx context.Context) error {
	ready := p.path("node", "ns-ready")
	script := strings.Join([]string{
		"set -e",
		// Private copies of the host's mounts (unshare made them private);
		// shared among themselves, as the kubelet and runc expect.
		"mount --make-rshared /",
		"mount --bind " + p.path("node", "varlib") + " /var/lib",
		"mount --bind " + p.path("node", "varlog") + " /var/log",
		"mount --bind " + p.path("node", "run") + " /run",
		"ip link set lo up",
		": > " + ready,
		"exec sleep infinity",
	}, "\n")
	holder, err := proc.Start("node-namespace", p.path("node", "logs", "node-namespace.log"), nil,
		"unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c", script)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.holder = holder
	p.mu.Unlock()
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if holder.Exited() {
			return holder.Failure("exited")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	link := "fmr" + hex.EncodeToString(suffix)
	if _, err := run("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(holder.PID())); err != nil {
		return err
	}
	p.hostLink = link
	steps := [][]string{
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", HostAddr, vethCIDR), "dev", link},
		{"ip", "link", "set", link, "up"},
		p.inNode("ip", "addr", "add", fmt.Sprintf("%s/%d", NodeAddr, vethCIDR), "dev", "eth0"),
		p.inNode("ip", "link", "set", "eth0", "up"),
		// Some components pick their address from the default route. The
		// host does not forward, so this reaches the host and nothing else.
		p.inNode("ip", "route", "add", "default", "via", HostAddr),
	}
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			return err
		}
	}
	p.logf("node namespace (holder pid %d), veth %s %s <-> eth0 %s", holder.PID(), link, HostAddr, NodeAddr)
	return nil
}

// startAPIProxy listens on the host side of the veth and forwards every
// connection to the API server on 127.0.0.1: the node's only way to it.
func (p *Provider) startAPIProxy(apiHost string) error {
	target, err := apiHostPort(apiHost)
	if err != nil {
		return err
	}
	var l net.Listener
	for attempt := 0; ; attempt++ {
		// The address appears a moment after the link is up (DAD does not
		// apply to IPv4, but the route may lag).
		l, err = net.Listen("tcp", net.JoinHostPort(HostAddr, strconv.Itoa(APIPort)))
		if err == nil || attempt > 50 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("API proxy: %w", err)
	}
	p.mu.Lock()
	p.proxy = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go forward(c, target)
		}
	}()
	return nil
}

func forward(c net.Conn, target string) {
	defer func() { _ = c.Close() }()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// cgroupHierarchies are the mounted cgroup hierarchies (v1 controllers, the
// named systemd one and the v2 "unified" one of a hybrid host).
func cgroupHierarchies() []string {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// makeCgroupRoot creates the kubelet's cgroup root in every hierarchy (it
// must exist); a new cpuset gets its parent's CPUs and memory nodes.
func (p *Provider) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, CgroupRoot)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("cgroup root: %w", err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cgroupDirs lists root and every cgroup under it in all hierarchies,
// deepest first.
func cgroupDirs(root string) []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killCgroupTree kills every process in the cgroups under root until none is
// left (a process may fork while being killed), for up to ten seconds.
func killCgroupTree(root string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		for _, dir := range cgroupDirs(root) {
			b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					left++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d process(es) still in the cgroups under %s", left, root)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroupTree removes root and every cgroup under it (empty by now).
func removeCgroupTree(root string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var last error
		for _, dir := range cgroupDirs(root) {
			if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
				last = fmt.Errorf("remove cgroup %s: %w", dir, err)
			}
		}
		if last == nil || time.Now().After(deadline) {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killNamespace kills every process in the holder's mount namespace except
// the holder (containerd, the runc shims that reparented away from it, any
// left-over helper), until none is left.
func killNamespace(holder *proc.Process) error {
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder.PID()))
	if err != nil {
		return nil // the holder is gone, and with it the namespace's last reference
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == holder.PID() {
				continue
			}
			if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns == want {
				left++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d process(es) still in the node's mount namespace", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLinkGone waits for the host side of the veth to vanish with the node's
// network namespace, and deletes it if it does not.
func waitLinkGone(link string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := net.InterfaceByName(link); err != nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := run("ip", "link", "del", link); err != nil {
		return fmt.Errorf("the host side of the node's veth outlived the node: %w", err)
	}
	return nil
}
