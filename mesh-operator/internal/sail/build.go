package sail

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ericdev/fleetmesh/mesh-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/shared/labels"
)

// Names the operator gives the Sail CRs it owns. IstioCNI and ZTunnel must
// be named default (Sail enforces it). The Istio is named default too, and
// with the InPlace strategy its revision is "default", so the plain
// istio-injection=enabled namespace label selects it without a revision tag.
const (
	IstioName       = "default"
	IstioCNIName    = "default"
	ZTunnelName     = "default"
	DefaultRevision = "default"
)

// Namespaces the managed components run in (the Sail defaults, spelled out
// so the operator can create them: Sail requires them to exist).
const (
	IstioNamespace   = "istio-system"
	CNINamespace     = "istio-cni"
	ZTunnelNamespace = "ztunnel"
)

// ManagedBy is the app.kubernetes.io/managed-by value on everything the operator creates.
const ManagedBy = "mesh-operator"

// Params are the inputs of Build: the ServiceMesh spec plus what detection found.
type Params struct {
	// Owner is the ServiceMesh; every built object is controlled by it.
	Owner metav1.Object
	// Version is spec.version (MAJOR.MINOR or MAJOR.MINOR.PATCH, optional v prefix).
	Version   string
	DataPlane v1alpha1.DataPlane
	// OpenShift selects the openshift profiles; OpenShift also needs the
	// CNI plugin for sidecars (pods may not hold NET_ADMIN there).
	OpenShift bool
}

// Desired is the complete control plane the operator owns for a ServiceMesh.
type Desired struct {
	Istio *Istio
	// CNI is nil when the data plane needs none (sidecar off OpenShift).
	CNI *IstioCNI
	// ZTunnel is nil for sidecars.
	ZTunnel *ZTunnel
	// Namespaces the components run in; the operator creates those that are
	// missing (and only those are removed again on delete).
	Namespaces []string
}

// Objects returns the built Sail CRs in apply order (Istio first: IstioCNI
// and ZTunnel follow its version and are only useful with it).
func (d Desired) Objects() []Object {
	objs := []Object{d.Istio}
	if d.CNI != nil {
		objs = append(objs, d.CNI)
	}
	if d.ZTunnel != nil {
		objs = append(objs, d.ZTunnel)
	}
	return objs
}

// Build returns the Sail CRs for p. It is pure: no API calls, same input,
// same output (golden-tested).
func Build(p Params) Desired {
	ambient := p.DataPlane == v1alpha1.DataPlaneAmbient
	version := SailVersion(p.Version)
	d := Desired{Namespaces: []string{IstioNamespace}}

	istio := &Istio{
		TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: KindIstio},
		ObjectMeta: objectMeta(IstioName, p.Owner),
		Spec: IstioSpec{
			Version:   version,
			Namespace: IstioNamespace,
			Profile:   profile(ambient, p.OpenShift),
			// InPlace keeps the revision named "default" across upgrades, so
			// enrolled namespaces never need relabelling.
			UpdateStrategy: &UpdateStrategy{Type: "InPlace"},
		},
	}
	if ambient {
		// istiod only trusts ztunnel identities from this namespace.
		istio.Spec.Values = map[string]any{"pilot": map[string]any{"trustedZtunnelNamespace": ZTunnelNamespace}}
	}
	d.Istio = istio

	if ambient || p.OpenShift {
		d.CNI = &IstioCNI{
			TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: KindIstioCNI},
			ObjectMeta: objectMeta(IstioCNIName, p.Owner),
			Spec:       ComponentSpec{Version: version, Namespace: CNINamespace, Profile: profile(ambient, p.OpenShift)},
		}
		d.Namespaces = append(d.Namespaces, CNINamespace)
	}
	if ambient {
		d.ZTunnel = &ZTunnel{
			TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: KindZTunnel},
			ObjectMeta: objectMeta(ZTunnelName, p.Owner),
			Spec:       ComponentSpec{Version: version, Namespace: ZTunnelNamespace},
		}
		d.Namespaces = append(d.Namespaces, ZTunnelNamespace)
	}
	return d
}

// profile picks the Sail profile; empty means Sail's own default (which is
// "openshift" when the Sail Operator runs on OpenShift).
func profile(ambient, openshift bool) string {
	switch {
	case ambient && openshift:
		return "openshift-ambient"
	case ambient:
		return "ambient"
	case openshift:
		return "openshift"
	}
	return ""
}

// SailVersion maps spec.version to Sail's spelling: "1.30" becomes the alias
// "v1.30-latest" (newest patch the Sail Operator knows), "1.30.2" becomes
// "v1.30.2", and empty stays empty (Sail's default version).
func SailVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	switch strings.Count(v, ".") {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("v%s-latest", v)
	}
	return "v" + v
}

func objectMeta(name string, owner metav1.Object) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			labels.ManagedBy: ManagedBy,
			labels.PartOf:    "servicemesh",
		},
	}
	if owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, v1alpha1.GroupVersion.WithKind("ServiceMesh"))}
	}
	return m
}
