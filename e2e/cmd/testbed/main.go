// Command testbed runs the local cluster provider in the foreground, for the
// Makefile's demo and local e2e targets and for humans:
//
//	testbed up   --dir .testbed [--nodes 3] [--operators [--simulate-mesh]] [--crds dir,file] [--optional-crds dir,...]
//	testbed wait --dir .testbed [--timeout 3m]
//	testbed down --dir .testbed [--timeout 30s]
//
// `up` writes DIR/kubeconfig and DIR/testbed.pid, then DIR/ready and one
// "testbed ready: ..." line once the cluster is usable, and runs until SIGINT
// or SIGTERM, when it stops every component it started. A Makefile starts it
// in the background (`testbed up ... &`) and blocks on `testbed wait`.
// `down` signals the recorded process and waits until it and all
// components are gone, killing the components' process groups if they
// outlive the timeout.
package main

import (
	"fmt"
	"os"
)

const usage = `usage:
  testbed up   --dir DIR [--nodes N] [--operators [--simulate-mesh]] [--crds PATH,...] [--optional-crds PATH,...] [--no-default-crds]
  testbed wait --dir DIR [--timeout DURATION]
  testbed down --dir DIR [--timeout DURATION]
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "wait":
		err = waitReady(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "testbed: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
