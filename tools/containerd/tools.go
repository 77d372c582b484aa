//go:build tools

// Package containerd pins the container runtime of the real-node test tier:
// containerd, ctr and the runc shim, built without cgo and without the
// btrfs, devmapper and zfs snapshotters (tags no_btrfs no_devmapper no_zfs).
package containerd

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
