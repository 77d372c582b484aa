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
		"provider istio prefers istiod over a Sail Istio": {spec: spec(v1alpha1.ModeAdopt, v1alpha1.ProviderIstio, v1alpha1.DataPlaneSidecar), facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{otherIstio}, Istiods: []Istiod{{Namespace: "mesh", Name: "istiod"}}, InjectorNamespaces: []string{"mesh"}},
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

// TestDecideTrustedControlPlanes (issue 41 item 1): an istiod counts as a
// control plane only in a namespace no tenant can make one's: the one the
// spec names, a Sail Istio's, or one an Istio sidecar-injector webhook
// calls. Several trusted ones are reported, never picked between, unless
// the spec names one of them.
func TestDecideTrustedControlPlanes(t *testing.T) {
	install := Options{SailInstallEnabled: true}
	fake := Istiod{Namespace: "acme", Name: "istiod", Version: "1.30.1", Available: true}
	revisioned := Istiod{Namespace: "istio-system", Name: "istiod-1-30", Revision: "1-30", Version: "1.30.1"}
	meshA := Istiod{Namespace: "mesh-a", Name: "istiod", Available: true}
	meshB := Istiod{Namespace: "mesh-b", Name: "istiod", Available: true}
	named := func(s v1alpha1.ServiceMeshSpec, ns string) v1alpha1.ServiceMeshSpec {
		s.ControlPlaneNamespace = ns
		return s
	}
	adoptIstio := spec(v1alpha1.ModeAdopt, v1alpha1.ProviderIstio, v1alpha1.DataPlaneSidecar)
	istioA := SailIstio{Name: "a", Namespace: "mesh-a", Revision: "a"}
	istioB := SailIstio{Name: "b", Namespace: "mesh-b", Revision: "b"}
	for name, tc := range map[string]struct {
		spec    v1alpha1.ServiceMeshSpec
		facts   Facts
		opt     Options
		action  Action
		mgmt    v1alpha1.Management
		blocked v1alpha1.ConditionReason
		istio   string   // the adopted Sail Istio's name
		istiods []string // the adopted istiods' namespaces
	}{
		"managed: a tenant's istiod is not adopted, the Sail Operator is installed": {spec: sidecar, facts: Facts{Istiods: []Istiod{fake}}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged},
		"managed with the Sail API: our own Istio is applied beside a tenant's istiod": {spec: sidecar, facts: Facts{Resources: groups(GroupSail), Istiods: []Istiod{fake}}, opt: install,
			action: ActionApply, mgmt: v1alpha1.ManagementManaged},
		"provider sail: a tenant's istiod is no mismatch": {spec: spec(v1alpha1.ModeManaged, v1alpha1.ProviderSail, v1alpha1.DataPlaneSidecar), facts: Facts{Istiods: []Istiod{fake}}, opt: install,
			action: ActionInstallSail, mgmt: v1alpha1.ManagementManaged},
		"managed auto-adopts the istiod in istio-system, not the tenant's": {spec: sidecar, facts: Facts{Istiods: []Istiod{fake, istiod}}, opt: install,
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istiods: []string{"istio-system"}},
		"adopt: a revisioned istiod in istio-system beats an available fake that lists first": {spec: adoptIstio, facts: Facts{Istiods: []Istiod{fake, revisioned}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istiods: []string{"istio-system"}},
		"adopt: only a tenant's istiod is no mesh": {spec: adoptIstio, facts: Facts{Istiods: []Istiod{fake}},
			action: ActionHold, blocked: v1alpha1.ReasonNoMeshFound},
		"adopt: an istiod behind an injector webhook is trusted": {spec: adoptIstio, facts: Facts{Istiods: []Istiod{fake, meshA}, InjectorNamespaces: []string{"mesh-a"}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istiods: []string{"mesh-a"}},
		"adopt: the namespace the spec names is trusted": {spec: named(adoptIstio, "mesh-b"), facts: Facts{Istiods: []Istiod{fake, meshB}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istiods: []string{"mesh-b"}},
		"adopt: two trusted istiods: ambiguous": {spec: adoptIstio, facts: Facts{Istiods: []Istiod{meshA, meshB}, InjectorNamespaces: []string{"mesh-a", "mesh-b"}},
			action: ActionHold, blocked: v1alpha1.ReasonAmbiguousControlPlane},
		"adopt: two trusted istiods, the spec names one": {spec: named(adoptIstio, "mesh-b"), facts: Facts{Istiods: []Istiod{meshA, meshB}, InjectorNamespaces: []string{"mesh-a", "mesh-b"}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istiods: []string{"mesh-b"}},
		"adopt: two trusted istiods, one in istio-system (the default the spec names)": {spec: adoptIstio, facts: Facts{Istiods: []Istiod{meshA, istiod}, InjectorNamespaces: []string{"mesh-a"}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istiods: []string{"istio-system"}},
		"managed: two trusted istiods, none ours: ambiguous, nothing installed": {spec: sidecar, facts: Facts{Istiods: []Istiod{meshA, meshB}, InjectorNamespaces: []string{"mesh-a", "mesh-b"}}, opt: install,
			action: ActionHold, blocked: v1alpha1.ReasonAmbiguousControlPlane},
		"managed: our own Istio stays ours beside another trusted istiod": {spec: sidecar, facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{ourIstio}, Istiods: []Istiod{istiod, meshA}, InjectorNamespaces: []string{"mesh-a"}}, opt: install,
			action: ActionApply, mgmt: v1alpha1.ManagementManaged},
		"adopt auto: a Sail Istio and an istiod elsewhere: ambiguous": {spec: adopt, facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{istioA}, Istiods: []Istiod{meshB}, InjectorNamespaces: []string{"mesh-b"}},
			action: ActionHold, blocked: v1alpha1.ReasonAmbiguousControlPlane},
		"adopt auto: a Sail Istio and its own istiod are one control plane": {spec: adopt, facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{istioA}, Istiods: []Istiod{meshA}, InjectorNamespaces: []string{"mesh-a"}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istio: "a"},
		"adopt sail: two Sail Istios in two namespaces: ambiguous": {spec: spec(v1alpha1.ModeAdopt, v1alpha1.ProviderSail, v1alpha1.DataPlaneSidecar), facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{istioA, istioB}},
			action: ActionHold, blocked: v1alpha1.ReasonAmbiguousControlPlane},
		"adopt sail: two Sail Istios, the spec names one": {spec: named(spec(v1alpha1.ModeAdopt, v1alpha1.ProviderSail, v1alpha1.DataPlaneSidecar), "mesh-b"), facts: Facts{Resources: groups(GroupSail), Istios: []SailIstio{istioA, istioB}},
			action: ActionObserve, mgmt: v1alpha1.ManagementAdopted, istio: "b"},
		"external: a tenant's istiod is not observed": {spec: external, facts: Facts{Istiods: []Istiod{fake}},
			action: ActionObserve, mgmt: v1alpha1.ManagementExternal},
		"external: two trusted istiods: ambiguous": {spec: external, facts: Facts{Istiods: []Istiod{meshA, meshB}, InjectorNamespaces: []string{"mesh-a", "mesh-b"}},
			action: ActionHold, blocked: v1alpha1.ReasonAmbiguousControlPlane},
	} {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.spec, tc.facts, tc.opt)
			assert.Equal(t, tc.action, p.Action, "action")
			assert.Equal(t, tc.blocked, p.BlockedReason, "blocked: %s", p.BlockedMessage)
			if tc.blocked == "" {
				assert.Equal(t, tc.mgmt, p.Management, "management")
			}
			if tc.blocked == v1alpha1.ReasonAmbiguousControlPlane {
				assert.Contains(t, p.BlockedMessage, "spec.controlPlaneNamespace")
				assert.Nil(t, p.AdoptedIstio)
			}
			var got []string
			for _, d := range p.AdoptedIstiod {
				got = append(got, d.Namespace)
				assert.NotEqual(t, "acme", d.Namespace, "a tenant's istiod is never adopted")
			}
			assert.Equal(t, tc.istiods, got, "adopted istiods")
			if tc.istio != "" {
				if assert.NotNil(t, p.AdoptedIstio) {
					assert.Equal(t, tc.istio, p.AdoptedIstio.Name)
				}
			} else {
				assert.Nil(t, p.AdoptedIstio)
			}
		})
	}
}

func TestTrustedIstiods(t *testing.T) {
	f := Facts{Istiods: []Istiod{{Namespace: "acme", Name: "istiod"}, {Namespace: "istio-system", Name: "istiod"}, {Namespace: "mesh-a", Name: "istiod"}, {Namespace: "sailed", Name: "istiod"}},
		InjectorNamespaces: []string{"mesh-a"}, Istios: []SailIstio{{Name: "default", Namespace: "sailed"}}}
	trusted, ignored := TrustedIstiods(spec(v1alpha1.ModeAdopt, v1alpha1.ProviderAuto, v1alpha1.DataPlaneSidecar), f)
	assert.Equal(t, []Istiod{{Namespace: "acme", Name: "istiod"}}, ignored)
	assert.Len(t, trusted, 3)
	s := spec(v1alpha1.ModeAdopt, v1alpha1.ProviderAuto, v1alpha1.DataPlaneSidecar)
	s.ControlPlaneNamespace = "acme"
	trusted, ignored = TrustedIstiods(s, f)
	assert.Len(t, trusted, 3, "istio-system is trusted only while the spec names it")
	assert.Equal(t, []Istiod{{Namespace: "istio-system", Name: "istiod"}}, ignored)
}
