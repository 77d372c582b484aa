//go:build tools

// Package kubenode pins the node binaries of the real-node test tier (kubelet,
// kube-proxy), built from the same k8s.io/kubernetes release as tools/kube's
// control plane so the node and the API server are one version.
package kubenode

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
