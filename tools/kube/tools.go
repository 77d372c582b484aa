//go:build tools

// Package kube pins the Kubernetes control-plane binaries that the local test
// bed builds from source: there is no container runtime on CI machines, so the
// API server, controller-manager, scheduler and kubectl come from Go modules.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
