package local

import (
	"net"
	"strings"
)

// freePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago. The kernel picks them, so test packages running in parallel get
// different ones; all listeners stay open until every port is chosen so one
// call never returns the same port twice. A port can still be taken between
// here and the component's bind, so callers retry on "address already in use".
func freePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portConflict reports whether a component's log shows it lost the race for
// its port.
func portConflict(log string) bool {
	return strings.Contains(log, "address already in use")
}
