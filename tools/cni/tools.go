//go:build tools

// Package cni pins the CNI plugins of the real-node test tier: bridge,
// host-local IPAM and loopback.
package cni

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
