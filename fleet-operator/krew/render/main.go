// Command render writes kubectl-celld's krew manifest for a release:
//
//	go run ./krew/render -version 0.1.0 -checksums dist/fleet-operator_0.1.0_checksums.txt > dist/celld.yaml
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ericdev/fleetmesh/fleet-operator/krew"
)

func main() {
	version := flag.String("version", "", "the release, X.Y.Z")
	checksums := flag.String("checksums", "", "the release's checksums file (sha256sum output)")
	flag.Parse()
	raw, err := os.ReadFile(*checksums)
	if err == nil {
		raw, err = krew.Manifest(*version, raw)
	}
	if err == nil {
		_, err = os.Stdout.Write(raw)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
