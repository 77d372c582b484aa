// Package sailinstall installs and uninstalls the Sail Operator from its
// Helm chart, and keeps the holders record that reference-counts the
// installation (see Record).
package sailinstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/downloader"
	"helm.sh/helm/v4/pkg/getter"
	"helm.sh/helm/v4/pkg/provenance"
	"helm.sh/helm/v4/pkg/registry"
	helmrepo "helm.sh/helm/v4/pkg/repo/v1"
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
	// Version pins the chart version (required).
	Version string
	// Digest is the sha256 (hex, "sha256:" prefix allowed) of the chart
	// archive of Version: the operator ships the pair it is tested with,
	// and a chart whose archive has another digest is refused
	// (ErrChartNotPinned), whatever the repository's index says.
	Digest string
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
		v = "(no version)"
	}
	return fmt.Sprintf("%s %s (%s)", s.Name, v, s.Repository)
}

// maxChartBytes bounds the archive the operator reads into memory: the
// real chart is well under a megabyte.
const maxChartBytes = 32 << 20

// Fetch downloads the chart with Helm's downloader (a chart repository) or
// registry client (OCI), checks the archive's sha256 against the pinned
// Digest and loads it. Helm works in a temporary directory (os.TempDir: the
// chart mounts a writable emptyDir there), removed afterwards. Credentials
// go only to the configured repository's scheme and host: Helm's getter
// sends them to the URL an index names only when it is on that host.
func (s ChartSource) Fetch(ctx context.Context, hc *http.Client) (*chart.Chart, error) {
	ch, _, err := s.FetchWithDigest(ctx, hc)
	return ch, err
}

// FetchWithDigest is Fetch, and returns the archive's sha256 (hex) too: the
// operator records which chart it installed. Helm's getters take no
// context: hc's Timeout bounds each of their requests instead.
func (s ChartSource) FetchWithDigest(ctx context.Context, hc *http.Client) (*chart.Chart, string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	if s.Version == "" {
		return nil, "", fmt.Errorf("%w: no chart version is configured (--sail-chart-version)", ErrChartNotPinned)
	}
	var data []byte
	var from string
	var err error
	if strings.HasPrefix(s.Repository, ociScheme) {
		data, from, err = s.fetchOCI(hc)
	} else {
		data, from, err = s.fetchHTTP(hc)
	}
	if err != nil {
		return nil, "", err
	}
	if err := s.checkPinned(data, from); err != nil {
		return nil, "", err
	}
	ch, err := s.load(from, data)
	if err != nil {
		return nil, "", err
	}
	return ch, Digest(data), nil
}

// fetchHTTP downloads the archive from a classic chart repository (or the
// archive URL itself) as `helm repo add` + `helm pull REPO/NAME --version`
// would, and returns it with the URL it came from.
func (s ChartSource) fetchHTTP(hc *http.Client) ([]byte, string, error) {
	if err := s.checkScheme(s.Repository); err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "sail-chart-")
	if err != nil {
		return nil, "", fmt.Errorf("the Sail chart's download directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	getters := getter.Getters(s.getterOptions(hc)...)
	cd := downloader.ChartDownloader{
		Out:              io.Discard,
		Verify:           downloader.VerifyNever,
		Keyring:          s.Keyring,
		Getters:          getters,
		RepositoryConfig: filepath.Join(dir, "repositories.yaml"),
		RepositoryCache:  filepath.Join(dir, "repository"),
		ContentCache:     filepath.Join(dir, "content"),
	}
	if s.Keyring != "" {
		cd.Verify = downloader.VerifyAlways
	}
	ref := s.Repository
	if strings.HasSuffix(s.Repository, ".tgz") {
		// The archive itself: its credentials go to its own host.
		cd.Options = append(cd.Options, getter.WithURL(s.Repository), getter.WithBasicAuth(s.Username, s.Password))
	} else {
		// A repository, configured as `helm repo add` would: the
		// downloader then sends its credentials only where its URL's
		// scheme and host are.
		entry := &helmrepo.Entry{Name: "sail", URL: s.Repository, Username: s.Username, Password: s.Password}
		cr, err := helmrepo.NewChartRepository(entry, getters)
		if err != nil {
			return nil, "", fmt.Errorf("chart repository %s: %w", s.Repository, err)
		}
		cr.CachePath = cd.RepositoryCache
		if _, err := cr.DownloadIndexFile(); err != nil {
			return nil, "", fmt.Errorf("chart repository %s: index.yaml: %w", s.Repository, err)
		}
		rf := helmrepo.NewFile()
		rf.Update(entry)
		if err := rf.WriteFile(cd.RepositoryConfig, 0o600); err != nil {
			return nil, "", fmt.Errorf("chart repository %s: %w", s.Repository, err)
		}
		ref = entry.Name + "/" + s.Name
	}
	saved, _, err := cd.DownloadTo(ref, strings.TrimPrefix(s.Version, "v"), dir)
	if err != nil && s.Keyring != "" {
		return nil, "", fmt.Errorf("chart %s %s from %s, with the provenance file (.prov) the keyring requires: %w", s.Name, s.Version, s.Repository, err)
	}
	if err != nil {
		return nil, "", fmt.Errorf("chart %s %s from %s: %w", s.Name, s.Version, s.Repository, err)
	}
	data, err := readBounded(saved)
	if err != nil {
		return nil, "", err
	}
	return data, s.Repository + " " + path.Base(saved), nil
}

// getterOptions: hc's transport (its CAs) and timeout for Helm's getters.
func (s ChartSource) getterOptions(hc *http.Client) []getter.Option {
	var opts []getter.Option
	if tr, ok := hc.Transport.(*http.Transport); ok && tr != nil {
		opts = append(opts, getter.WithTransport(tr))
	}
	if hc.Timeout > 0 {
		opts = append(opts, getter.WithTimeout(hc.Timeout))
	}
	return opts
}

func readBounded(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxChartBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxChartBytes {
		return nil, fmt.Errorf("chart archive %s is larger than %d bytes", file, maxChartBytes)
	}
	return data, nil
}

// ErrChartNotPinned: the chart's archive is not the one the operator
// pins (or no digest is pinned): it is not installed.
var ErrChartNotPinned = errors.New("the Sail chart is not the pinned one")

// checkPinned compares data's sha256 with the pinned digest.
func (s ChartSource) checkPinned(data []byte, from string) error {
	want := strings.ToLower(strings.TrimPrefix(s.Digest, "sha256:"))
	if want == "" {
		return fmt.Errorf("%w: no digest is pinned for chart %s %s (set sail.chart.digest together with sail.chart.version)", ErrChartNotPinned, s.Name, s.Version)
	}
	if got := Digest(data); got != want {
		return fmt.Errorf("%w: chart %s is sha256 %s, not the pinned %s of %s %s", ErrChartNotPinned, from, got, want, s.Name, s.Version)
	}
	return nil
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
func (s ChartSource) fetchOCI(hc *http.Client) ([]byte, string, error) {
	if s.Version == "" {
		return nil, "", fmt.Errorf("chart repository %s: an OCI registry needs a chart version (--sail-chart-version)", s.Repository)
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
		return nil, "", fmt.Errorf("chart repository %s: %w", s.Repository, err)
	}
	ref := strings.TrimSuffix(strings.TrimPrefix(s.Repository, ociScheme), "/") + "/" + s.Name + ":" + strings.TrimPrefix(s.Version, "v")
	var pullOpts []registry.PullOption
	if s.Keyring != "" {
		pullOpts = append(pullOpts, registry.PullOptWithProv(true))
	}
	res, err := rc.Pull(ref, pullOpts...)
	if err != nil {
		return nil, "", fmt.Errorf("pulling chart %s%s: %w", ociScheme, ref, err)
	}
	if res.Chart == nil || len(res.Chart.Data) > maxChartBytes {
		return nil, "", fmt.Errorf("pulling chart %s%s: no chart layer, or larger than %d bytes", ociScheme, ref, maxChartBytes)
	}
	if s.Keyring != "" {
		if res.Prov == nil || len(res.Prov.Data) == 0 {
			return nil, "", fmt.Errorf("pulling chart %s%s: the keyring requires its provenance (.prov) layer, which the registry does not have", ociScheme, ref)
		}
		if err := s.verify(res.Chart.Data, res.Prov.Data, s.Name+"-"+strings.TrimPrefix(s.Version, "v")+".tgz"); err != nil {
			return nil, "", err
		}
	}
	return res.Chart.Data, ociScheme + ref + "@" + res.Manifest.Digest, nil
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
