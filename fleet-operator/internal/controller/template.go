package controller

import (
	appsv1 "k8s.io/api/apps/v1"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/mesh"
)

// memberStatefulSet is the members' StatefulSet exactly as the operator
// applies it: the fleet's own template plus what the mesh integration adds
// for the fleet's intent. It is the only place the member template is put
// together, so TestPodTemplateStability pins what an upgrade would roll out:
// any change to its output restarts every member of the fleets it affects.
func memberStatefulSet(fleet *v1alpha1.CelldFleet, intent mesh.Intent) *appsv1.StatefulSet {
	sts := members.StatefulSet(fleet)
	mesh.ApplyToTemplate(&sts.Spec.Template, fleet.Name, mesh.Mode(intent, mesh.WasMeshed(fleet)))
	return sts
}
