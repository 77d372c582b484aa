package sailinstall

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// Helm runs Helm actions for one release. Its objects go into Namespace;
// its records are Secrets (Helm's secret driver) in StorageNamespace, the
// operator's own namespace. Helm diffs every upgrade and rollback against
// the stored "current" release and deletes what that lists and the new
// one does not, so whoever may write the records decides what the
// installer role deletes: the Sail namespace is writable by its editors,
// the operator's namespace only by its admins.
type Helm struct {
	Config *rest.Config
	// Namespace is the release's namespace (the Sail namespace).
	Namespace string
	// StorageNamespace holds the release records (required).
	StorageNamespace string
	ReleaseName      string
	Log              logr.Logger
	// Timeout bounds one install or uninstall.
	Timeout time.Duration
}

// maxHistory bounds the revisions kept: each is a Secret in the operator's
// namespace, and a few are enough to read what happened and to roll back.
const maxHistory = 5

// Release is what the operator needs to know about the installed release.
type Release struct {
	Status       string
	ChartVersion string
	// Deployed: the release's last operation succeeded.
	Deployed bool
	// Revision counts the release's installs and upgrades.
	Revision int
	// Values are the values given at the last install or upgrade (not the
	// chart's defaults).
	Values map[string]any
	// For a release that is not deployed: DeployedRevision is the newest
	// earlier revision that was deployed (now deployed or superseded),
	// and DeployedChartVersion its chart version; 0 and "" when the release
	// never deployed before this revision.
	DeployedRevision     int
	DeployedChartVersion string
	// TemplateCRDs, for a release that is not deployed, are the CRDs among
	// the objects of its templates (not crds/): an uninstall would delete them.
	TemplateCRDs []string
	// ManifestDigest is the sha256 (hex) of the revision's manifest: what
	// an upgrade, rollback or uninstall acts on.
	ManifestDigest string
	// Record names where the revision is stored (Kind namespace/name).
	Record string
}

// Helm's storage drivers.
const (
	driverSecret    = "secret"
	driverConfigMap = "configmap"
)

func (h *Helm) configuration() (*action.Configuration, error) {
	if h.StorageNamespace == "" {
		return nil, fmt.Errorf("helm: no namespace for the release records of %s/%s", h.Namespace, h.ReleaseName)
	}
	return h.configurationIn(h.StorageNamespace, driverSecret)
}

// legacyConfiguration reads the records an earlier operator version kept:
// ConfigMaps in the release namespace.
func (h *Helm) legacyConfiguration() (*action.Configuration, error) {
	return h.configurationIn(h.Namespace, driverConfigMap)
}

func (h *Helm) configurationIn(storageNamespace, storageDriver string) (*action.Configuration, error) {
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(logr.ToSlogHandler(h.Log.WithName("helm"))))
	if err := cfg.Init(&restGetter{config: h.Config, namespace: h.Namespace}, storageNamespace, storageDriver); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// Get returns the release, or nil when there is none.
func (h *Helm) Get() (*Release, error) {
	cfg, err := h.configuration()
	if err != nil {
		return nil, err
	}
	return h.get(cfg, "Secret "+h.StorageNamespace)
}

// GetLegacy returns the newest revision of the release as an earlier
// operator version stored it (ConfigMaps in the release namespace, which
// that namespace's editors may write), or nil when there is none. Nothing
// acts on it before AdoptLegacy has moved it into the operator's storage.
func (h *Helm) GetLegacy() (*Release, error) {
	cfg, err := h.legacyConfiguration()
	if err != nil {
		return nil, err
	}
	return h.get(cfg, "ConfigMap "+h.Namespace)
}

func (h *Helm) get(cfg *action.Configuration, where string) (*Release, error) {
	r, err := action.NewGet(cfg).Run(h.ReleaseName)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("helm: reading release %s/%s (%s): %w", h.Namespace, h.ReleaseName, where, err)
	}
	rel, ok := r.(*releasev1.Release)
	if !ok {
		return nil, fmt.Errorf("helm: release %s/%s has an unknown format %T", h.Namespace, h.ReleaseName, r)
	}
	out := &Release{Revision: rel.Version, Values: rel.Config, ManifestDigest: Digest([]byte(rel.Manifest)),
		Record: fmt.Sprintf("%s/%s", where, recordKey(h.ReleaseName, rel.Version))}
	if rel.Info != nil {
		out.Status = string(rel.Info.Status)
		out.Deployed = rel.Info.Status == releasecommon.StatusDeployed
	}
	out.ChartVersion = chartVersion(rel)
	if out.Deployed {
		// Only a release to repair needs its history (a request more).
		return out, nil
	}
	out.TemplateCRDs = templateCRDs(rel.Manifest)
	history, err := cfg.Releases.History(h.ReleaseName)
	if err != nil {
		return nil, fmt.Errorf("helm: reading the history of release %s/%s: %w", h.Namespace, h.ReleaseName, err)
	}
	for _, ri := range history {
		old, ok := ri.(*releasev1.Release)
		if !ok || old.Info == nil || old.Version >= rel.Version || old.Version <= out.DeployedRevision {
			continue
		}
		if st := old.Info.Status; st == releasecommon.StatusDeployed || st == releasecommon.StatusSuperseded {
			out.DeployedRevision, out.DeployedChartVersion = old.Version, chartVersion(old)
		}
	}
	return out, nil
}

func chartVersion(rel *releasev1.Release) string {
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		return rel.Chart.Metadata.Version
	}
	return ""
}

// templateCRDs lists the CustomResourceDefinitions in a release manifest.
func templateCRDs(manifest string) []string {
	var out []string
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			// Unreadable: count it, so that no uninstall risks it.
			out = append(out, "(unparsable manifest document)")
			continue
		}
		if head.Kind == "CustomResourceDefinition" {
			out = append(out, head.Metadata.Name)
		}
	}
	sort.Strings(out)
	return out
}

// recordKey is the name Helm's drivers give a revision's record.
func recordKey(name string, revision int) string {
	return fmt.Sprintf("sh.helm.release.v1.%s.v%d", name, revision)
}

// Digest is the hex sha256 of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// AdoptLegacy moves revision from the earlier version's ConfigMap storage
// into the operator's own: it becomes the release's only stored revision
// (older ones are not carried over, since a rollback to a revision nobody
// checked would apply its manifest), and the ConfigMap records of that
// revision and the older ones are deleted. The caller has checked the
// revision first (see JudgeLegacy).
func (h *Helm) AdoptLegacy(revision int) error {
	legacy, err := h.legacyConfiguration()
	if err != nil {
		return err
	}
	cfg, err := h.configuration()
	if err != nil {
		return err
	}
	rel, err := legacy.Releases.Get(h.ReleaseName, revision)
	if err != nil {
		return fmt.Errorf("helm: reading revision %d of %s/%s to adopt: %w", revision, h.Namespace, h.ReleaseName, err)
	}
	if err := cfg.Releases.Create(rel); err != nil && !errors.Is(err, driver.ErrReleaseExists) {
		return fmt.Errorf("helm: storing revision %d of %s/%s in %s: %w", revision, h.Namespace, h.ReleaseName, h.StorageNamespace, err)
	}
	history, err := legacy.Releases.History(h.ReleaseName)
	if err != nil {
		return fmt.Errorf("helm: reading the ConfigMap history of %s/%s: %w", h.Namespace, h.ReleaseName, err)
	}
	for _, ri := range history {
		old, ok := ri.(*releasev1.Release)
		if !ok || old.Version > revision {
			continue
		}
		if _, err := legacy.Releases.Delete(h.ReleaseName, old.Version); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
			return fmt.Errorf("helm: deleting the adopted ConfigMap record %s/%s: %w", h.Namespace, recordKey(h.ReleaseName, old.Version), err)
		}
	}
	return nil
}

// RenderDigest renders ch with values as an upgrade of the release would
// (against the API server's capabilities, changing nothing) and returns
// the digest of the manifest: what a release this operator made of ch and
// values records, to compare a stored release with.
func (h *Helm) RenderDigest(ctx context.Context, ch *chart.Chart, values map[string]any) (string, error) {
	cfg, err := h.configuration()
	if err != nil {
		return "", err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = h.ReleaseName
	in.Namespace = h.Namespace
	in.DryRunStrategy = action.DryRunServer
	// As an upgrade: no check that the objects do not exist yet.
	in.IsUpgrade = true
	in.SkipCRDs = true
	r, err := in.RunWithContext(ctx, ch, values)
	if err != nil {
		return "", fmt.Errorf("helm: rendering chart %s %s: %w", ch.Metadata.Name, ch.Metadata.Version, err)
	}
	rel, ok := r.(*releasev1.Release)
	if !ok {
		return "", fmt.Errorf("helm: rendering chart %s: unknown release format %T", ch.Metadata.Name, r)
	}
	return Digest([]byte(rel.Manifest)), nil
}

// Install installs ch as the release with the user's values. It does not wait for the operator's
// Deployment (readiness shows in the Sail CRs' conditions instead); Helm
// itself waits for the chart's CRDs to be established.
func (h *Helm) Install(ctx context.Context, ch *chart.Chart, values map[string]any) error {
	cfg, err := h.configuration()
	if err != nil {
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName = h.ReleaseName
	in.Namespace = h.Namespace
	in.WaitStrategy = kube.HookOnlyStrategy
	in.Timeout = h.Timeout
	in.Description = "installed by mesh-operator for the ServiceMesh"
	// values are the user's (sail.values), coalesced with the chart's own
	// defaults by Helm as `helm install -f` would.
	if _, err := in.RunWithContext(ctx, ch, values); err != nil {
		return fmt.Errorf("helm install %s/%s: %w", h.Namespace, h.ReleaseName, err)
	}
	return nil
}

// Upgrade moves the release to ch with exactly values (the chart's
// defaults, then values: what was given before is not reused, so a value
// the user removed goes away). Like Install it does not wait for the
// Deployment. Helm leaves the CRDs under crds/ as they are; the caller
// applies them first.
func (h *Helm) Upgrade(ctx context.Context, ch *chart.Chart, values map[string]any) error {
	cfg, err := h.configuration()
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace = h.Namespace
	up.WaitStrategy = kube.HookOnlyStrategy
	up.Timeout = h.Timeout
	up.ResetValues = true
	up.MaxHistory = maxHistory
	up.Description = "upgraded by mesh-operator for the ServiceMesh"
	if _, err := up.RunWithContext(ctx, h.ReleaseName, ch, values); err != nil {
		return fmt.Errorf("helm upgrade %s/%s: %w", h.Namespace, h.ReleaseName, err)
	}
	return nil
}

// Rollback returns the release to revision (a new revision with that
// revision's chart and values). Helm rolls back a pending release too,
// which is how an upgrade the operator did not live to finish is undone.
func (h *Helm) Rollback(revision int) error {
	cfg, err := h.configuration()
	if err != nil {
		return err
	}
	rb := action.NewRollback(cfg)
	rb.Version = revision
	rb.WaitStrategy = kube.HookOnlyStrategy
	rb.Timeout = h.Timeout
	rb.MaxHistory = maxHistory
	rb.Description = "rolled back by mesh-operator for the ServiceMesh"
	if err := rb.Run(h.ReleaseName); err != nil {
		return fmt.Errorf("helm rollback %s/%s to revision %d: %w", h.Namespace, h.ReleaseName, revision, err)
	}
	return nil
}

// Uninstall removes the release (not its CRDs: Helm never deletes those).
// A missing release is not an error.
func (h *Helm) Uninstall() error {
	cfg, err := h.configuration()
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.IgnoreNotFound = true
	un.WaitStrategy = kube.HookOnlyStrategy
	un.Timeout = h.Timeout
	un.DeletionPropagation = "background"
	if _, err := un.Run(h.ReleaseName); err != nil {
		return fmt.Errorf("helm uninstall %s/%s: %w", h.Namespace, h.ReleaseName, err)
	}
	return nil
}

// restGetter hands Helm the operator's own rest.Config. Discovery is cached
// per action only: the Sail CRDs appear during an install.
type restGetter struct {
	config    *rest.Config
	namespace string
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(g.config), nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(g.config))
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := g.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

// ToRawKubeConfigLoader only has to answer the namespace: the operator has
// no kubeconfig file.
func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}})
}
