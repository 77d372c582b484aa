package detect

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

func groups(gs ...string) map[string][]string {
	m := map[string][]string{}
	for _, g := range gs {
		switch g {
		case GroupSail:
			m[g] = []string{"istios", "istiocnis", "ztunnels", "istiorevisions"}
		case GroupMaistra:
			m[g] = []string{ResourceSMCP, "servicemeshmemberrolls"}
		case GroupCilium:
			m[g] = []string{ResourceCiliumNetPols, "ciliumendpoints"}
		case GroupConfigOS:
			m[g] = []string{ResourceClusterVer}
		default:
			m[g] = []string{"things"}
		}
	}
	return m
}

func spec(mode v1alpha1.Mode, provider v1alpha1.Provider, dp v1alpha1.DataPlane) v1alpha1.ServiceMeshSpec {
	return v1alpha1.ServiceMeshSpec{Mode: mode, Provider: provider, DataPlane: dp}
}

var (
	managed  = spec(v1alpha1.ModeManaged, v1alpha1.ProviderAuto, v1alpha1.DataPlaneAmbient)
	sidecar  = spec(v1alpha1.ModeManaged, v1alpha1.ProviderAuto, v1alpha1.DataPlaneSidecar)
	adopt    = spec(v1alpha1.ModeAdopt, v1alpha1.ProviderAuto, v1alpha1.DataPlaneSidecar)
	external = spec(v1alpha1.ModeExternal, v1alpha1.ProviderAuto, v1alpha1.DataPlaneSidecar)

	istiod     = Istiod{Namespace: "istio-system", Name: "istiod", Version: "1.29.1", Available: true}
	ourIstio   = SailIstio{Name: "default", Namespace: "istio-system", Ours: true, Revision: "default"}
	userIstio  = SailIstio{Name: "default", Namespace: "istio-system", Revision: "default"}
	otherIstio = SailIstio{Name: "canary", Namespace: "istio-canary", Revision: "canary"}

	smcp = []string{"istio-system/basic"}
)

func TestDecide(t *testing.T) {
	install := Options{SailInstallEnabled: true}
	for name, tc := range map[string]struct {
		spec  v1alpha1.ServiceMeshSpec
		facts Facts
		opt   Options

		action     Action
		mgmt       v1alpha1.Management
		provider   string
		blocked    v1alpha1.ConditionReason
		precond    v1alpha1.ConditionReason
		deferred   bool
		adoptIstio string
		istiods    int
	}{
		"empty cluster: install Sail": {spec: managed, facts: Facts{}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"install disabled": {spec: managed, facts: Facts{},
			action: ActionHold, mgmt: v1alpha1.ManagementManaged, provider: "sail", blocked: v1alpha1.ReasonSailOperatorMissing},
		"Sail present, no mesh: apply": {spec: managed, facts: Facts{Resources: groups(GroupSail)}, opt: install,
			action: ActionApply, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"our Istio and its istiod stay managed": {spec: managed, facts: Facts{Resources: groups(GroupSail, GroupIstioSecurity), Istios: []SailIstio{ourIstio}, Istiods: []Istiod{istiod}}, opt: install,
			action: ActionApply, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"managed auto-adopts a user's Sail Istio": {spec: managed, facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{otherIstio, userIstio}}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "sail", adoptIstio: "default"},
		"managed auto-adopts plain istiod": {spec: sidecar, facts: Facts{Resources: groups(GroupIstioSecurity), Istiods: []Istiod{istiod}}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "istio", istiods: 1},
		"OpenShift with OSSM 3 mesh: adopt": {spec: managed, facts: Facts{Resources: groups(GroupRoute, GroupSail), Istios: []SailIstio{userIstio}}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "openshift", adoptIstio: "default"},
		"OpenShift (ClusterVersion) with OSSM 3, no mesh: apply": {spec: managed, facts: Facts{Resources: groups(GroupConfigOS, GroupSail)}, opt: install,
			action: ActionApply, mgmt: v1alpha1.ManagementManaged, provider: "openshift"},
		"OpenShift without OSSM 3: never Helm-install": {spec: managed, facts: Facts{Resources: groups(GroupRoute)}, opt: install,
			action: ActionHold, mgmt: v1alpha1.ManagementManaged, provider: "openshift", blocked: v1alpha1.ReasonSailOperatorMissing},
		"config.openshift.io without ClusterVersion is not OpenShift": {spec: managed, facts: Facts{Resources: map[string][]string{GroupConfigOS: {"other"}}}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"provider openshift off OpenShift": {spec: spec(v1alpha1.ModeManaged, v1alpha1.ProviderOpenShift, v1alpha1.DataPlaneSidecar), opt: install,
			action: ActionHold, blocked: v1alpha1.ReasonProviderNotDetected},
		"provider sail with plain istiod": {spec: spec(v1alpha1.ModeManaged, v1alpha1.ProviderSail, v1alpha1.DataPlaneSidecar), facts: Facts{Istiods: []Istiod{istiod}}, opt: install,
			action: ActionHold, blocked: v1alpha1.ReasonProviderMismatch},
		"provider istio managed without istiod": {spec: spec(v1alpha1.ModeManaged, v1alpha1.ProviderIstio, v1alpha1.DataPlaneSidecar), opt: install,
			action: ActionHold, mgmt: v1alpha1.ManagementManaged, provider: "sail", blocked: v1alpha1.ReasonProviderCannotInstall},
		"provider istio managed with istiod: adopt": {spec: spec(v1alpha1.ModeManaged, v1alpha1.ProviderIstio, v1alpha1.DataPlaneSidecar), facts: Facts{Istiods: []Istiod{istiod}}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "istio", istiods: 1},
		"provider istio prefers istiod over a Sail Istio": {spec: spec(v1alpha1.ModeAdopt, v1alpha1.ProviderIstio, v1alpha1.DataPlaneSidecar), facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{otherIstio}, Istiods: []Istiod{{Namespace: "mesh", Name: "istiod"}}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "istio", istiods: 1},
		"adopt without a mesh": {spec: adopt, facts: Facts{Resources: groups(GroupSail)},
			action: ActionHold, blocked: v1alpha1.ReasonNoMeshFound},
		"adopt a Sail Istio": {spec: adopt, facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{otherIstio}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "sail", adoptIstio: "canary"},
		"adopt keeps observing our own Istio (switched from managed)": {spec: adopt, facts: Facts{Resources: groups(GroupSail, GroupIstioSecurity), Istios: []SailIstio{ourIstio}, Istiods: []Istiod{istiod}},
			action: ActionObserve, mgmt: v1alpha1.ManagementManaged, provider: "sail", adoptIstio: "default"},
		"adopt prefers someone else's Istio to our own": {spec: adopt, facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{ourIstio, otherIstio}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "sail", adoptIstio: "canary"},
		"adopt never uses install": {spec: adopt, facts: Facts{}, opt: install,
			action: ActionHold, blocked: v1alpha1.ReasonNoMeshFound},
		"external never touches, even when empty": {spec: external, facts: Facts{}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementExternal},
		"external observes a visible istiod": {spec: external, facts: Facts{Istiods: []Istiod{istiod}},
			action: ActionObserve, mgmt: v1alpha1.ManagementExternal, provider: "istio", istiods: 1},
		"Maistra: deferred in managed mode": {spec: managed, facts: Facts{Resources: groups(GroupRoute, GroupMaistra, GroupIstioSecurity), MaistraControlPlanes: smcp, Istiods: []Istiod{istiod}}, opt: install,
			action: ActionHold, blocked: v1alpha1.ReasonMaistraDetected, deferred: true, provider: "maistra"},
		"Maistra: deferred in adopt mode": {spec: adopt, facts: Facts{Resources: groups(GroupMaistra), MaistraControlPlanes: smcp, Istiods: []Istiod{istiod}},
			action: ActionHold, blocked: v1alpha1.ReasonMaistraDetected, deferred: true, provider: "maistra"},
		"Maistra: deferred even with the Sail API but no Sail Istio": {spec: managed, facts: Facts{Resources: groups(GroupRoute, GroupMaistra, GroupSail), MaistraControlPlanes: smcp, Istiods: []Istiod{istiod}}, opt: install,
			action: ActionHold, blocked: v1alpha1.ReasonMaistraDetected, deferred: true, provider: "maistra"},
		"Maistra: external only observes": {spec: external, facts: Facts{Resources: groups(GroupMaistra), MaistraControlPlanes: smcp, Istiods: []Istiod{istiod}},
			action: ActionObserve, mgmt: v1alpha1.ManagementExternal, provider: "maistra", istiods: 1},
		"Maistra leftovers (CRDs, no control plane) do not defer: install": {spec: managed, facts: Facts{Resources: groups(GroupMaistra)}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"Maistra leftovers on OSSM 3 without a mesh: apply": {spec: managed, facts: Facts{Resources: groups(GroupRoute, GroupMaistra, GroupSail)}, opt: install,
			action: ActionApply, mgmt: v1alpha1.ManagementManaged, provider: "openshift"},
		"Maistra leftovers on OSSM 3 with its mesh: adopt": {spec: managed, facts: Facts{Resources: groups(GroupRoute, GroupMaistra, GroupSail), Istios: []SailIstio{userIstio}}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "openshift", adoptIstio: "default"},
		"Maistra running next to an OSSM 3 Istio: adopt the Sail Istio": {spec: managed, facts: Facts{Resources: groups(GroupRoute, GroupMaistra, GroupSail), MaistraControlPlanes: smcp, Istios: []SailIstio{userIstio}, Istiods: []Istiod{istiod}}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "openshift", adoptIstio: "default"},
		"Maistra running, our Istio exists: stays managed": {spec: managed, facts: Facts{Resources: groups(GroupMaistra, GroupSail), MaistraControlPlanes: smcp, Istios: []SailIstio{ourIstio}}, opt: install,
			action: ActionApply, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"Cilium DaemonSet + ambient: held with a warning": {spec: managed, facts: Facts{CiliumDaemonSet: true}, opt: install,
			action: ActionHold, mgmt: v1alpha1.ManagementManaged, provider: "sail", precond: v1alpha1.ReasonCiliumAmbient},
		"Cilium CRD + ambient with Sail: held": {spec: managed, facts: Facts{Resources: groups(GroupCilium, GroupSail)}, opt: install,
			action: ActionHold, mgmt: v1alpha1.ManagementManaged, provider: "sail", precond: v1alpha1.ReasonCiliumAmbient},
		"Cilium + ambient keeps our existing control plane unchanged": {spec: managed, facts: Facts{Resources: groups(GroupSail), CiliumDaemonSet: true, Istios: []SailIstio{ourIstio}}, opt: install,
			action: ActionHold, mgmt: v1alpha1.ManagementManaged, provider: "sail", precond: v1alpha1.ReasonCiliumAmbient},
		"Cilium + ambient, half configured": {spec: managed, facts: Facts{CiliumDaemonSet: true, CiliumConfig: map[string]string{CiliumSockLBHostNSOnly: "true"}}, opt: install,
			action: ActionHold, mgmt: v1alpha1.ManagementManaged, provider: "sail", precond: v1alpha1.ReasonCiliumAmbient},
		"Cilium configured for ambient passes": {spec: managed, facts: Facts{CiliumDaemonSet: true, CiliumConfig: map[string]string{CiliumSockLBHostNSOnly: "true", CiliumCNIExclusive: "false"}}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"Cilium + sidecar passes": {spec: sidecar, facts: Facts{CiliumDaemonSet: true}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
		"Cilium + ambient adopting: observed, warned": {spec: spec(v1alpha1.ModeAdopt, v1alpha1.ProviderAuto, v1alpha1.DataPlaneAmbient), facts: Facts{CiliumDaemonSet: true, Istiods: []Istiod{istiod}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, provider: "istio", precond: v1alpha1.ReasonCiliumAmbient, istiods: 1},
		"Calico's kind Istio is not Sail": {spec: managed, facts: Facts{Resources: map[string][]string{"operator.tigera.io": {"istios"}}}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged, provider: "sail"},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.spec, tc.facts, tc.opt)
			assert.Equal(t, tc.action, p.Action, "action")
			assert.Equal(t, tc.mgmt, p.Management, "management")
			assert.Equal(t, tc.provider, p.Provider, "provider")
			assert.Equal(t, tc.blocked, p.BlockedReason, "blocked: %s", p.BlockedMessage)
			assert.Equal(t, tc.precond, p.PreconditionReason, "precondition")
			assert.Equal(t, tc.deferred, p.Deferred, "deferred")
			if tc.blocked != "" {
				assert.NotEmpty(t, p.BlockedMessage)
			}
			if tc.deferred {
				// The seed: adopt an existing mesh or upgrade to OSSM 3 / Sail.
				for _, want := range []string{"adopt", "OpenShift Service Mesh 3", "Sail", smcp[0]} {
					assert.Contains(t, p.BlockedMessage, want)
				}
			}
			if tc.precond != "" {
				assert.Contains(t, p.PreconditionMessage, "dataPlane: sidecar", "the warning recommends sidecar")
			}
			if tc.adoptIstio != "" {
				if assert.NotNil(t, p.AdoptedIstio) {
					assert.Equal(t, tc.adoptIstio, p.AdoptedIstio.Name)
				}
			} else {
				assert.Nil(t, p.AdoptedIstio)
			}
			assert.Len(t, p.AdoptedIstiod, tc.istiods)
		})
	}
}

func TestEnvironment(t *testing.T) {
	f := Facts{Resources: groups(GroupRoute, GroupSail, GroupIstioSecurity, GroupMaistra), CiliumDaemonSet: true,
		Istiods: []Istiod{{Namespace: "b", Name: "istiod", Revision: "canary"}, {Namespace: "a", Name: "istiod"}}}
	assert.Equal(t, v1alpha1.DetectedEnvironment{Platform: v1alpha1.PlatformOpenShift, SailAPI: true, IstioAPI: true, Maistra: true, Cilium: true,
		Istiods: []string{"a/istiod@default", "b/istiod@canary"}}, f.Environment())
	assert.Equal(t, v1alpha1.PlatformKubernetes, Facts{}.Environment().Platform)
}

// TestDecideMaintainSail: the Sail release is kept current and repaired
// only where the operator installed it and alone holds it, and only on a
// pass that applies the control plane.
func TestDecideMaintainSail(t *testing.T) {
	const release = "sail-operator"
	install := Options{SailInstallEnabled: true, SailRelease: release}
	ours := &SailRecord{Release: release, Holders: []string{labels.SailHolderServiceMesh}}
	sail := groups(GroupSail)
	for name, tc := range map[string]struct {
		spec   v1alpha1.ServiceMeshSpec
		facts  Facts
		opt    Options
		action Action
		want   bool
	}{
		"installed by the operator, Sail API served: maintained": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: ours}, opt: install,
			action: ActionApply, want: true},
		"our Istio exists: still maintained": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: ours, Istios: []SailIstio{ourIstio}}, opt: install,
			action: ActionApply, want: true},
		"no holders record: preinstalled, never touched": {spec: sidecar, facts: Facts{Resources: sail}, opt: install,
			action: ActionApply},
		"install disabled: never touched": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: ours}, opt: Options{SailRelease: release},
			action: ActionApply},
		"another holder shares it": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: &SailRecord{Release: release, Holders: []string{"other-tool", labels.SailHolderServiceMesh}}}, opt: install,
			action: ActionApply},
		"another party's record, not joined yet": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: &SailRecord{Release: release, Holders: []string{"other-tool"}}}, opt: install,
			action: ActionApply},
		"the record names another release": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: &SailRecord{Release: "their-sail", Holders: []string{labels.SailHolderServiceMesh}}}, opt: install,
			action: ActionApply},
		"a record left by the teardown, no holder": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: &SailRecord{Release: release}}, opt: install,
			action: ActionApply},
		"OpenShift Service Mesh 3 without a record": {spec: sidecar, facts: Facts{Resources: groups(GroupRoute, GroupSail)}, opt: install,
			action: ActionApply},
		"Sail API absent: the install path": {spec: sidecar, facts: Facts{SailRecord: ours}, opt: install,
			action: ActionInstallSail},
		"held by a precondition: nothing moves": {spec: managed, facts: Facts{Resources: groups(GroupSail, GroupCilium), SailRecord: ours, Istios: []SailIstio{ourIstio}}, opt: install,
			action: ActionHold},
		"adopting a user's Istio: not ours to maintain": {spec: sidecar, facts: Facts{Resources: sail, SailRecord: ours, Istios: []SailIstio{userIstio}}, opt: install,
			action: ActionObserve},
		"external": {spec: external, facts: Facts{Resources: sail, SailRecord: ours}, opt: install,
			action: ActionObserve},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.spec, tc.facts, tc.opt)
			assert.Equal(t, tc.action, p.Action)
			assert.Equal(t, tc.want, p.MaintainSail)
		})
	}
}
