// Command coredns is CoreDNS with only the plugins the real-node test tier's
// cluster DNS uses (the full build links every cloud provider's SDK): the
// kubernetes plugin answers cluster.local, the rest is health and readiness.
// Nothing is forwarded upstream: the test bed has no network beyond the host.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order of the plugin chain, as in CoreDNS's plugin.cfg.
var directives = []string{"ready", "health", "errors", "log", "cache", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
