// Package sailinstall installs and uninstalls the Sail Operator from its
// Helm chart, and keeps the holders record that reference-counts the
// installation (see Record).
package sailinstall

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/provenance"
	"helm.sh/helm/v4/pkg/registry"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Chart is a loaded Helm chart.
type Chart = chart.Chart

// ChartSource says where the Sail Operator chart comes from. Repository is a
// classic Helm chart repository (it serves index.yaml), so an internal
// mirror works the same as the upstream one; a URL ending in .tgz is taken
// as the chart archive itself.
type ChartSource struct {
	Repository string
	Name       string
	// Version pins the chart version; empty takes the newest stable version
	// the repository lists.
	Version string
	// InsecureHTTP allows plain-http URLs (tests serving a chart on
	// 127.0.0.1). Without it every URL fetched must be https.
	InsecureHTTP bool
	// Username and Password authenticate to the repository (HTTP basic
	// auth; for an OCI registry, its token exchange). Empty: anonymous.
	Username, Password string
	// Keyring is an OpenPGP keyring file; when set, the chart must come with
	// a provenance file (.prov) signed by one of its keys and naming the
	// archive's sha256, as `helm install --verify` requires.
	Keyring string
}

func (s ChartSource) String() string {
	v := s.Version
	if v == "" {
		v = "newest"
	}
	return fmt.Sprintf("%s %s (%s)", s.Name, v, s.Repository)
}

// maxChartBytes bounds what is read from the repository: the real chart is
// well under a megabyte, and the index lists every version ever released.
const maxChartBytes = 32 << 20

// Fetch downloads and loads the chart. Nothing is written to disk (the
// operator's root file system is read-only); the archive's sha256 is checked
// against the index's digest when the index has one.
func (s ChartSource) Fetch(ctx context.Context, hc *http.Client) (*chart.Chart, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	if strings.HasPrefix(s.Repository, ociScheme) {
		return s.fetchOCI(hc)
	}
	if err := s.checkScheme(s.Repository); err != nil {
		return nil, err
	}
	archiveURL, digest := s.Repository, ""
	if !strings.HasSuffix(s.Repository, ".tgz") {
		var err error
		archiveURL, digest, err = s.resolve(ctx, hc)
		if err != nil {
			return nil, err
		}
	}
	// The index may point anywhere: the archive must be https too, or the
	// digest from an https index would not protect what is installed.
	if err := s.checkScheme(archiveURL); err != nil {
		return nil, err
	}
	data, err := s.get(ctx, hc, archiveURL)
	if err != nil {
		return nil, err
	}
	if digest != "" {
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != digest {
			return nil, fmt.Errorf("chart %s: sha256 %s does not match the repository index's digest %s", archiveURL, got, digest)
		}
	}
	if s.Keyring != "" {
		// The .prov sits next to the archive (helm package --sign).
		prov, err := s.get(ctx, hc, archiveURL+".prov")
		if err != nil {
			return nil, fmt.Errorf("chart %s: the keyring requires its provenance file (.prov): %w", archiveURL, err)
		}
		if err := s.verify(data, prov, path.Base(archiveURL)); err != nil {
			return nil, err
		}
	}
	return s.load(archiveURL, data)
}

// verify checks that prov is signed by a key of the keyring and names
// data's sha256 for filename.
func (s ChartSource) verify(data, prov []byte, filename string) error {
	sig, err := provenance.NewFromKeyring(s.Keyring, "")
	if err != nil {
		return fmt.Errorf("the Sail chart keyring %s: %w", s.Keyring, err)
	}
	if _, err := sig.Verify(data, prov, filename); err != nil {
		return fmt.Errorf("chart %s: provenance verification failed: %w", filename, err)
	}
	return nil
}

// load reads the archive and checks it is the configured version.
func (s ChartSource) load(from string, data []byte) (*chart.Chart, error) {
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", from, err)
	}
	if s.Version != "" && ch.Metadata.Version != strings.TrimPrefix(s.Version, "v") && ch.Metadata.Version != s.Version {
		return nil, fmt.Errorf("chart %s is version %s, not the configured %s", from, ch.Metadata.Version, s.Version)
	}
	return ch, nil
}

const ociScheme = "oci://"

// fetchOCI pulls the chart from an OCI registry with Helm's registry client,
// in memory. The registry addresses content by digest (the manifest names
// the chart layer's sha256, which the client checks), so no index digest is
// needed; the version must be given, since a tag list is no release list.
// Credentials are Username/Password when set; otherwise the pull is
// anonymous (Helm's credential store is pointed at an empty file, and the
// operator's image carries no Docker configuration).
func (s ChartSource) fetchOCI(hc *http.Client) (*chart.Chart, error) {
	if s.Version == "" {
		return nil, fmt.Errorf("chart repository %s: an OCI registry needs a chart version (--sail-chart-version)", s.Repository)
	}
	opts := []registry.ClientOption{
		registry.ClientOptHTTPClient(hc),
		registry.ClientOptWriter(io.Discard),
		// An empty store: no credentials are read from files.
		registry.ClientOptCredentialsFile(os.DevNull),
	}
	if s.Username != "" || s.Password != "" {
		opts = append(opts, registry.ClientOptBasicAuth(s.Username, s.Password))
	}
	if s.InsecureHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	rc, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("chart repository %s: %w", s.Repository, err)
	}
	ref := strings.TrimSuffix(strings.TrimPrefix(s.Repository, ociScheme), "/") + "/" + s.Name + ":" + strings.TrimPrefix(s.Version, "v")
	var pullOpts []registry.PullOption
	if s.Keyring != "" {
		pullOpts = append(pullOpts, registry.PullOptWithProv(true))
	}
	res, err := rc.Pull(ref, pullOpts...)
	if err != nil {
		return nil, fmt.Errorf("pulling chart %s%s: %w", ociScheme, ref, err)
	}
	if res.Chart == nil || len(res.Chart.Data) > maxChartBytes {
		return nil, fmt.Errorf("pulling chart %s%s: no chart layer, or larger than %d bytes", ociScheme, ref, maxChartBytes)
	}
	if s.Keyring != "" {
		if res.Prov == nil || len(res.Prov.Data) == 0 {
			return nil, fmt.Errorf("pulling chart %s%s: the keyring requires its provenance (.prov) layer, which the registry does not have", ociScheme, ref)
		}
		if err := s.verify(res.Chart.Data, res.Prov.Data, s.Name+"-"+strings.TrimPrefix(s.Version, "v")+".tgz"); err != nil {
			return nil, err
		}
	}
	return s.load(ociScheme+ref+"@"+res.Manifest.Digest, res.Chart.Data)
}

// index is the part of a repository's index.yaml the operator reads.
type index struct {
	Entries map[string][]struct {
		Version string   `json:"version"`
		URLs    []string `json:"urls"`
		Digest  string   `json:"digest"`
	} `json:"entries"`
}

// resolve finds the archive URL and digest of the wanted version.
func (s ChartSource) resolve(ctx context.Context, hc *http.Client) (string, string, error) {
	base, err := url.Parse(strings.TrimSuffix(s.Repository, "/") + "/")
	if err != nil {
		return "", "", fmt.Errorf("chart repository %q: %w", s.Repository, err)
	}
	raw, err := s.get(ctx, hc, base.JoinPath("index.yaml").String())
	if err != nil {
		return "", "", err
	}
	var idx index
	if err := yaml.Unmarshal(raw, &idx); err != nil {
		return "", "", fmt.Errorf("chart repository %s: index.yaml: %w", s.Repository, err)
	}
	entries := idx.Entries[s.Name]
	type candidate struct {
		v   *semver.Version
		url string
		dig string
	}
	var found []candidate
	for _, e := range entries {
		if len(e.URLs) == 0 {
			continue
		}
		v, err := semver.NewVersion(e.Version)
		if err != nil {
			continue
		}
		if s.Version != "" {
			want, err := semver.NewVersion(s.Version)
			if err != nil || !v.Equal(want) {
				continue
			}
		} else if v.Prerelease() != "" {
			continue
		}
		found = append(found, candidate{v, e.URLs[0], e.Digest})
	}
	if len(found) == 0 {
		return "", "", fmt.Errorf("chart repository %s has no chart %s %s", s.Repository, s.Name, s.Version)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].v.GreaterThan(found[j].v) })
	u, err := base.Parse(found[0].url) // index URLs may be relative to the repository
	if err != nil {
		return "", "", fmt.Errorf("chart repository %s: bad chart URL %q: %w", s.Repository, found[0].url, err)
	}
	return u.String(), found[0].dig, nil
}

// checkScheme refuses a URL that is not https unless InsecureHTTP is set:
// the chart's templates get escalate and bind, so whoever can alter it in
// transit could take over the cluster, and over plain http the index's
// digest comes from the same untrusted channel.
func (s ChartSource) checkScheme(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("chart URL %q: %w", raw, err)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && s.InsecureHTTP:
		return nil
	case u.Scheme == "http":
		return fmt.Errorf("chart URL %s is plain http: the Sail chart is fetched over https only (--sail-chart-insecure-http allows http, for a test repository)", raw)
	}
	return fmt.Errorf("chart URL %q must be https", raw)
}

func (s ChartSource) get(ctx context.Context, hc *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if s.Username != "" || s.Password != "" {
		req.SetBasicAuth(s.Username, s.Password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	// A redirect may have left https; what it served is not trusted.
	if err := s.checkScheme(resp.Request.URL.String()); err != nil {
		return nil, fmt.Errorf("fetching %s: redirected: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching %s: %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxChartBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", u, err)
	}
	if len(data) > maxChartBytes {
		return nil, fmt.Errorf("fetching %s: larger than %d bytes", u, maxChartBytes)
	}
	return data, nil
}

// CRDNames lists the CustomResourceDefinitions in the chart's crds/
// directory: what Helm installs but never removes, so the last holder
// removes them itself.
func CRDNames(ch *chart.Chart) ([]string, error) {
	objs, err := CRDs(ch)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	sort.Strings(names)
	return names, nil
}

// CRDs returns the CustomResourceDefinitions in the chart's crds/
// directory, as objects to apply: Helm installs them but leaves them as
// they are on upgrade.
func CRDs(ch *chart.Chart) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, crd := range ch.CRDObjects() {
		for _, doc := range bytes.Split(crd.File.Data, []byte("\n---")) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				return nil, fmt.Errorf("chart file %s: %w", crd.Filename, err)
			}
			if u.GetKind() == "CustomResourceDefinition" && u.GetName() != "" {
				out = append(out, u)
			}
		}
	}
	return out, nil
}
