// Command pause is the real-node tier's Pod sandbox image (containerd's
// sandbox_image): it holds the Pod's namespaces and does nothing until it is
// told to stop, as Kubernetes' own pause does. It is built here (static, no
// cgo) because the node has no registry to pull registry.k8s.io/pause from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the Pod it reaps orphans, so zombies do not pile up.
	child := make(chan os.Signal, 1)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-child:
			for {
				var ws syscall.WaitStatus
				if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
