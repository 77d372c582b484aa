package cluster

// These blank imports (of dependency-free packages) keep the modules that own
// the default CRDs required in go.mod: nothing else in e2e imports them yet,
// and `go mod tidy` would otherwise drop them, leaving DefaultCRDPaths unable
// to locate their CRD files at the pinned versions.
import (
	_ "istio.io/api/label"
	_ "sigs.k8s.io/gateway-api/pkg/consts"
)
