package real

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/ericdev/fleetmesh/e2e/cluster/proc"
)

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
	return append([]string{"nsenter", fmt.Sprintf("--target=%d", p.holder.PID()), "--net", "--mount", "--"}, argv...)
}

// startNodeProc starts a node component inside the node's namespaces and
// records it for Down and Healthy.
func (p *Provider) startNodeProc(name string, argv ...string) (*proc.Process, error) {
	env := []string{"PATH=" + p.binDir + "/node:" + os.Getenv("PATH")}
	pr, err := proc.Start(name, p.path("node", "logs", name+".log"), env, p.inNode(argv...)...)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.nodeProc = append(p.nodeProc, pr)
	p.mu.Unlock()
	return pr, nil
}
