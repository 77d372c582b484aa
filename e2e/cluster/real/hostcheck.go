package real

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// HostState is what the real node could change on the host, read from the
// host's own namespaces: sysctls, iptables (nft and legacy, v4 and v6) and
// ipsets, links, addresses, routes and rules, mounts, the fixed host paths a
// kubelet, containerd and CNI write by default, the top level of every cgroup
// hierarchy, kernel modules, and running node processes. Each entry is
// "category key" -> value; Diff compares two.
type HostState map[string]string

// volatileSysctl are sysctls that change on their own (counters, random
// values, what other processes on the machine do).
var volatileSysctl = regexp.MustCompile(`^(net/netfilter/nf_conntrack_count|kernel/random/.*|kernel/ns_last_pid|kernel/pty/nr|kernel/tainted|kernel/usermodehelper/.*|net/ipv4/tcp_mem|net/ipv4/udp_mem|net/core/netdev_rss_key|kernel/sched_domain/.*)$`)

// hostPaths are the fixed paths the node's components would write on a
// host; the provider keeps all of them inside the node's mount namespace.
var hostPaths = []string{"/var/lib/kubelet", "/var/lib/containerd", "/run/containerd", "/etc/containerd",
	"/var/lib/cni", "/etc/cni", "/opt/cni", "/var/log/containers", "/var/log/pods", "/run/netns",
	"/etc/kubernetes", "/var/lib/kube-router", "/var/lib/kube-proxy", "/run/kubernetes", "/var/run/kubernetes",
	"/run/calico", "/run/flannel", "/var/lib/dockershim", "/run/runc", "/run/containerd-shim",
	"/var/lib/kubelet/device-plugins", "/dev/shm/containerd"}

// ReadHostState reads the host's state now. Run it with nothing of the
// provider's running, before Up and after Down.
func ReadHostState() (HostState, error) {
	s := HostState{}
	// sysctls of the host's namespaces (this process's network namespace is
	// the host's).
	for _, top := range []string{"net", "kernel", "vm"} {
		_ = filepath.WalkDir(filepath.Join("/proc/sys", top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			key := strings.TrimPrefix(path, "/proc/sys/")
			if volatileSysctl.MatchString(key) {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil // write-only or not readable
			}
			s["sysctl "+key] = strings.TrimSpace(string(b))
			return nil
		})
	}
	counters := regexp.MustCompile(`\[\d+:\d+\]`)
	for _, tool := range []string{"iptables-nft-save", "iptables-legacy-save", "ip6tables-nft-save", "ip6tables-legacy-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		out, err := exec.Command(tool).CombinedOutput()
		if err != nil {
			s["iptables "+tool] = "error: " + strings.TrimSpace(string(out))
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			lines = append(lines, counters.ReplaceAllString(l, "[*]"))
		}
		s["iptables "+tool] = strings.Join(lines, "\n")
	}
	if _, err := exec.LookPath("ipset"); err == nil {
		out, _ := exec.Command("ipset", "list", "-n").CombinedOutput()
		s["ipset names"] = strings.TrimSpace(string(out))
	}
	lifetimes := regexp.MustCompile(`(valid_lft|preferred_lft|expires) \S+`)
	for key, argv := range map[string][]string{
		"links":         {"ip", "-o", "link", "show"},
		"addresses":     {"ip", "-o", "addr", "show"},
		"routes v4":     {"ip", "-4", "route", "show", "table", "all"},
		"routes v6":     {"ip", "-6", "route", "show", "table", "all"},
		"rules v4":      {"ip", "-4", "rule", "show"},
		"rules v6":      {"ip", "-6", "rule", "show"},
		"netns (named)": {"ip", "netns", "list"},
	} {
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
		s["net "+key] = lifetimes.ReplaceAllString(strings.TrimSpace(string(out)), "$1 *")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var mounts []string
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(l)
		// mount point, then the fields after the "-" separator: fs type and source.
		for i, x := range f {
			if x == "-" && i+2 < len(f) && len(f) > 4 {
				mounts = append(mounts, f[4]+" "+f[i+1]+" "+f[i+2])
				break
			}
		}
	}
	sort.Strings(mounts)
	s["mounts"] = strings.Join(mounts, "\n")
	for _, p := range hostPaths {
		_, err := os.Lstat(p)
		s["path "+p] = fmt.Sprint(err == nil)
	}
	for _, h := range cgroupHierarchies() {
		entries, _ := os.ReadDir(h)
		var dirs []string
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, e.Name())
			}
		}
		s["cgroup "+h] = strings.Join(dirs, " ")
	}
	if b, err := os.ReadFile("/proc/modules"); err == nil {
		var mods []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				mods = append(mods, f[0])
			}
		}
		sort.Strings(mods)
		s["kernel modules"] = strings.Join(mods, " ")
	}
	s["processes of the node"] = strings.Join(nodeProcesses(), "\n")
	return s, nil
}

// nodeProcesses lists running processes whose executable is a node binary
// (bin/node/..., runc).
func nodeProcesses() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if strings.Contains(exe, "/bin/node/") || filepath.Base(exe) == "runc" {
			out = append(out, exe)
		}
	}
	sort.Strings(out)
	return out
}

// Diff lists every entry that differs between before and after, one line
// each, with both values (multi-line values as the lines added and removed).
func Diff(before, after HostState) []string {
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []string
	for _, k := range sorted {
		b, inB := before[k]
		a, inA := after[k]
		switch {
		case !inB:
			out = append(out, fmt.Sprintf("%s: new (%s)", k, a))
		case !inA:
			out = append(out, fmt.Sprintf("%s: gone (was %s)", k, b))
		case a != b && !strings.Contains(a+b, "\n"):
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, b, a))
		case a != b:
			bl, al := lineSet(b), lineSet(a)
			for l := range al {
				if !bl[l] {
					out = append(out, fmt.Sprintf("%s: + %s", k, l))
				}
			}
			for l := range bl {
				if !al[l] {
					out = append(out, fmt.Sprintf("%s: - %s", k, l))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func lineSet(s string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		m[l] = true
	}
	return m
}
