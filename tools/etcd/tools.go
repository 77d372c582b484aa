//go:build tools

// Package etcd pins the etcd server that backs the local kube-apiserver.
// `go install ...@v3.7.3` is refused because etcd's go.mod has replace
// directives, so it is built from this module instead.
package etcd

import _ "go.etcd.io/etcd/server/v3"
