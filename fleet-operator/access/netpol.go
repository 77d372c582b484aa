package access

import "github.com/ericdev/fleetmesh/shared/netpol"

// The NetworkPolicy layer's types; shared/netpol evaluates the policies
// (with cyclonus), so the mesh operator's ambient check judges the same way.
type (
	Endpoint       = netpol.Endpoint
	Direction      = netpol.Direction
	NetworkVerdict = netpol.NetworkVerdict
)
