package sailinstall

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/shared/labels"
)

// Installed is the operator's own record of the Sail release revision it
// last installed, upgraded, rolled back or adopted. Before it upgrades,
// rolls back or uninstalls the release (each deletes what the stored
// release lists), the stored release must be that revision with that
// manifest.
//
// It is the ConfigMap InstalledName in the operator's namespace, which
// only the operator's admins may write (tenants may write the Sail
// namespace, so nothing there is trusted for this).
type Installed struct {
	Revision       int
	ChartVersion   string
	ChartDigest    string
	ManifestDigest string
}

// InstalledName is the ConfigMap holding Installed.
const InstalledName = "sail-operator-installed"

// The keys of the Installed ConfigMap.
const (
	keyRevision       = "revision"
	keyChartVersion   = "chartVersion"
	keyChartDigest    = "chartDigest"
	keyManifestDigest = "manifestDigest"
)

// GetInstalled reads the operator's record in namespace (its own), or nil.
func (rs Records) GetInstalled(ctx context.Context, namespace string) (*Installed, error) {
	cm, err := rs.configMap(ctx, namespace, InstalledName, "the operator's Sail release record")
	if cm == nil || err != nil {
		return nil, err
	}
	rev, _ := strconv.Atoi(cm.Data[keyRevision])
	return &Installed{Revision: rev, ChartVersion: cm.Data[keyChartVersion], ChartDigest: cm.Data[keyChartDigest], ManifestDigest: cm.Data[keyManifestDigest]}, nil
}

// PutInstalled writes the operator's record in namespace.
func (rs Records) PutInstalled(ctx context.Context, namespace string, in Installed) error {
	data := map[string]string{keyRevision: strconv.Itoa(in.Revision), keyChartVersion: in.ChartVersion, keyChartDigest: in.ChartDigest, keyManifestDigest: in.ManifestDigest}
	cm := &corev1.ConfigMap{}
	err := rs.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: InstalledName}, cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: InstalledName,
				Labels: map[string]string{labels.ManagedBy: "mesh-operator", labels.PartOf: "sail-operator"}},
			Data: data,
		}
		return rs.Client.Create(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("reading the operator's Sail release record %s/%s: %w", namespace, InstalledName, err)
	}
	cm.Data = data
	return rs.Client.Update(ctx, cm)
}

// DeleteInstalled deletes the operator's record (none is fine).
func (rs Records) DeleteInstalled(ctx context.Context, namespace string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: InstalledName}}
	return client.IgnoreNotFound(rs.Client.Delete(ctx, cm))
}

// Recorded reports whether rel is the revision the operator's record names,
// with the manifest it recorded.
func Recorded(rel *Release, rec *Installed) bool {
	return rel != nil && rec != nil && rec.ManifestDigest != "" &&
		rel.Revision == rec.Revision && rel.ManifestDigest == rec.ManifestDigest
}

// JudgeStored decides whether the operator may upgrade, roll back or
// uninstall rel, stored in its own namespace: when it is the revision the
// operator recorded, or when its manifest is exactly what the operator
// renders from its chart and values (renderedDigest; "" when it could not
// render), which is how an action whose record the operator did not live
// to write is recognised. Otherwise why says what disagrees.
func JudgeStored(rel *Release, rec *Installed, renderedDigest string) (ok bool, why string) {
	if rel == nil || Recorded(rel, rec) {
		return true, ""
	}
	if renderedDigest != "" && rel.ManifestDigest == renderedDigest {
		return true, ""
	}
	recorded := "no record of the operator's"
	if rec != nil {
		recorded = fmt.Sprintf("the operator recorded revision %d with manifest sha256 %s", rec.Revision, rec.ManifestDigest)
	}
	return false, fmt.Sprintf("the stored release %s is revision %d with manifest sha256 %s; %s, and the configured chart and values render a different manifest",
		rel.Record, rel.Revision, rel.ManifestDigest, recorded)
}

// JudgeLegacy decides whether a release an earlier operator version stored
// as ConfigMaps in the Sail namespace (writable by its editors) may be
// adopted: only a deployed revision of the configured chart version whose
// manifest is exactly what the operator renders from that chart (verified)
// and its configured values. Anything else may be a forged record, whose
// manifest an upgrade or uninstall would delete; it is refused.
func JudgeLegacy(legacy *Release, chartVersion, renderedDigest string) (ok bool, why string) {
	switch {
	case legacy.Status != statusDeployed:
		return false, fmt.Sprintf("its newest record %s (revision %d) is %s, not deployed", legacy.Record, legacy.Revision, legacy.Status)
	case legacy.ChartVersion != chartVersion:
		return false, fmt.Sprintf("its newest record %s (revision %d) is chart %s, not the configured %s", legacy.Record, legacy.Revision, legacy.ChartVersion, chartVersion)
	case renderedDigest == "" || legacy.ManifestDigest != renderedDigest:
		return false, fmt.Sprintf("its newest record %s (revision %d) has manifest sha256 %s, not the %s that chart %s renders with the configured sail.values",
			legacy.Record, legacy.Revision, legacy.ManifestDigest, renderedDigest, chartVersion)
	}
	return true, ""
}
