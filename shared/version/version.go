// Package version is the version a binary was built as. Release builds
// stamp it (the Dockerfiles, `make build`):
//
//	go build -ldflags "-X github.com/ericdev/fleetmesh/shared/version.Version=X.Y.Z"
//
// so that an operator's start-up log and --version say which release runs.
package version

// Version is "dev" unless stamped at build time.
var Version = "dev"
