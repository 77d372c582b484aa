//go:build tools

// Package kuberouter pins kube-router, which the real-node test tier runs with
// only its network policy firewall (--run-firewall=true --run-router=false
// --run-service-proxy=false) to enforce NetworkPolicy with iptables and ipset.
package kuberouter

import (
	_ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
)
