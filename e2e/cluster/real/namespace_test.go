//go:build realnode

package real

// These change the host (a namespace, a veth, a cgroup root) and compare it
// before and after, so they run only in the real-node tier (make
// test-realnode, one package at a time: never beside a running node).

import (
	"os"
	"strings"
	"testing"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// TestHostStateIsStable reads the host twice with nothing happening in
// between: every difference would be noise the before/after check of the
// real-node tier could not tell from something left behind.
func TestHostStateIsStable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reads iptables and ipsets: root only")
	}
	a, err := ReadHostState()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadHostState()
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(a, b); len(d) > 0 {
		t.Errorf("the host changed between two reads:\n%v", d)
	}
	if len(a) < 100 {
		t.Errorf("only %d entries read", len(a))
	}
}

// TestNodeNamespaceLeavesNothing starts only the node's namespaces, veth,
// API proxy and cgroup root, tears them down, and requires the host as it
// was: the undo half of the provider without the node's binaries.
func TestNodeNamespaceLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("namespaces, veth, cgroups: root only")
	}
	before, err := ReadHostState()
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{})
	if err := p.prepareDir(); err != nil {
		t.Fatal(err)
	}
	p.sysctls, err = readSysctls(kubeletSysctls)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.startNamespace(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.startAPIProxy("https://127.0.0.1:1"); err != nil {
		t.Error(err)
	}
	if err := p.makeCgroupRoot(); err != nil {
		t.Error(err)
	}
	// The node side has its own view of /var/lib.
	if out, err := run(p.inNode("sh", "-c", "touch /var/lib/fleetmesh-probe && ls /var/lib && ip -o addr show eth0")...); err != nil {
		t.Error(err)
	} else {
		t.Logf("node side:\n%s", out)
	}
	if _, err := os.Stat("/var/lib/fleetmesh-probe"); err == nil {
		t.Error("a file the node wrote to /var/lib appeared on the host")
		_ = os.Remove("/var/lib/fleetmesh-probe")
	}
	mid, _ := ReadHostState()
	t.Logf("while up, the host differs in %d entries (the veth and the cgroup root)", len(Diff(before, mid)))
	if err := p.Down(t.Context()); err != nil {
		t.Error(err)
	}
	after, err := ReadHostState()
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(before, after); len(d) > 0 {
		t.Errorf("left behind:\n%v", d)
	}
}

// TestPreflightRefusesASecondNode: while a node's cgroup root exists (a node
// runs, or a killed run left it), Up refuses before touching anything.
func TestPreflightRefusesASecondNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cgroups: root only")
	}
	dir := "/sys/fs/cgroup/memory/" + CgroupRoot
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Remove(dir) }()
	bin, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	err = Preflight(bin, "/usr/sbin/runc")
	if err == nil || !strings.Contains(err.Error(), "no other real node") {
		t.Errorf("Preflight with %s present: %v", dir, err)
	}
}

// TestPreflightRefusesAnAddressClash: the veth's 198.18.0.0/30 is the node's
// own; a host that already has an address in it (another test network, a
// leftover of a killed run) would get a second route to it and the API
// proxy could not bind, so Preflight refuses before touching anything and
// names the link. The test adds addresses in (or around) it to a veth pair
// of its own (this kernel has no dummy links) and removes the pair again.
func TestPreflightRefusesAnAddressClash(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("links: root only")
	}
	bin, err := cluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := Preflight(bin, "/usr/sbin/runc"); err != nil && strings.Contains(err.Error(), "198.18.0.0/30") {
		t.Fatalf("the host already clashes before the test: %v", err)
	}
	for _, addr := range []string{HostAddr + "/32", "198.18.0.2/30", "198.18.0.0/16"} {
		const link = "fmrclash0"
		if _, err := run("ip", "link", "add", link, "type", "veth", "peer", "name", "fmrclash1"); err != nil {
			t.Fatal(err)
		}
		if _, err := run("ip", "addr", "add", addr, "dev", link); err != nil {
			_, _ = run("ip", "link", "del", link)
			t.Fatal(err)
		}
		err := Preflight(bin, "/usr/sbin/runc")
		if _, derr := run("ip", "link", "del", link); derr != nil {
			t.Error(derr)
		}
		if err == nil || !strings.Contains(err.Error(), "198.18.0.0/30") || !strings.Contains(err.Error(), link) {
			t.Errorf("Preflight with %s on %s: %v; want a refusal naming 198.18.0.0/30 and the link", addr, link, err)
		} else {
			t.Logf("with %s on %s: %v", addr, link, err)
		}
	}
}
