//go:build tools

// Package tools pins lint for make tools.
package tools

import (
	_ "honnef.co/go/tools/cmd/staticcheck"
)
