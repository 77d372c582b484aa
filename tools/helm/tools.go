//go:build tools

// Package tools pins helm for make tools.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
