package controller

import (
	"crypto/ed25519"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ericdev/fleetmesh/mesh-operator/internal/license"
	"github.com/ericdev/fleetmesh/mesh-operator/internal/sailinstall"
)

// Upstream defaults for the Sail Operator chart; an air-gapped cluster points
// --sail-chart-repository at its internal mirror instead.
const (
	DefaultSailChartRepository = "https://istio-ecosystem.github.io/sail-operator"
	DefaultSailChartName       = "sail-operator"
	DefaultSailNamespace       = "sail-operator"
	// DefaultSailChartVersion is the Sail Operator chart version this
	// release is tested with (the integration tests install a chart of this
	// version), installed unless --sail-chart-version says otherwise.
	DefaultSailChartVersion = "1.30.0"
	// DefaultSailChartDigest is the sha256 of the DefaultSailChartVersion
	// archive this release is tested with: the chart is installed only when
	// the archive fetched has it, whatever the repository's index says.
	// --sail-chart-version and --sail-chart-digest override the pair
	// together; a version without a digest is refused (SailChartUntrusted).
	//
	// The value is the digest the Sail project publishes for 1.30.0 in its
	// chart repository's index.yaml (entry sail-operator 1.30.0, generated
	// 2026-09-29); Helm writes there the sha256 of the archive. Recheck it
	// with sha256sum on the archive when DefaultSailChartVersion changes.
	DefaultSailChartDigest = "5e6be71498354df945bd4d7259e1f692552d1103999eb6655c7bd872b716c20f"
	// SailReleaseName is the Helm release (and Deployment) name of a Sail
	// Operator the mesh operator installs.
	SailReleaseName = "sail-operator"
	// DefaultCNIReleaseTimeout bounds how long a teardown waits for
	// istio-cni to release the Pods of namespaces that left the mesh.
	DefaultCNIReleaseTimeout = 2 * time.Minute
)

// The environment variables holding the Sail chart repository's credentials
// (chart value sail.chart.credentialsSecret).
const (
	EnvSailChartUsername = "SAIL_CHART_USERNAME"
	EnvSailChartPassword = "SAIL_CHART_PASSWORD"
)

// Config is the operator-wide configuration that comes from flags (set by the chart).
type Config struct {
	// OperatorNamespace holds the license Secret.
	OperatorNamespace string
	// LicenseSecret names the license Secret in OperatorNamespace.
	LicenseSecret string
	// Keys are the license public keys this build trusts (set by Validate).
	Keys []ed25519.PublicKey

	// SailInstall allows mode managed to install the Sail Operator when it is absent.
	SailInstall bool
	// SailChart is where the Sail Operator chart is fetched from.
	SailChart sailinstall.ChartSource
	// SailChartCAFile is a PEM bundle of CAs trusted, besides the
	// system's, for the chart repository (an internal mirror or registry).
	SailChartCAFile string
	// SailValues are the user's values for the Sail Operator chart (chart
	// value sail.values, --sail-values as JSON), e.g. image registries for an
	// air-gapped cluster. They apply when the operator installs the chart.
	SailValues map[string]any
	// SailNamespace is the namespace of the Sail Operator release and its holders record.
	SailNamespace string
	// HelmTimeout bounds one Helm install or uninstall.
	HelmTimeout time.Duration
	// CNIReleaseTimeout bounds the teardown's wait for istio-cni to release
	// Pods (0: DefaultCNIReleaseTimeout).
	CNIReleaseTimeout time.Duration

	keyOptions license.KeyOptions
	// KeyWarning is set when a test key was configured for a release build.
	KeyWarning error
}

// BindFlags registers the operator's own flags.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.LicenseSecret, "license-secret", "mesh-operator-license", "name of the license Secret in the operator's namespace")
	fs.BoolVar(&c.SailInstall, "sail-install", true, "let mode managed install the Sail Operator from its Helm chart when it is absent (needs the installer RBAC, see docs/servicemesh.md)")
	fs.StringVar(&c.SailChart.Repository, "sail-chart-repository", DefaultSailChartRepository, "Helm chart repository (serving index.yaml) holding the Sail Operator chart, e.g. an internal mirror; oci://HOST/PATH for an OCI registry (the chart is HOST/PATH/NAME:VERSION); a URL ending in .tgz is used as the chart archive itself. Credentials: $SAIL_CHART_USERNAME and $SAIL_CHART_PASSWORD")
	fs.StringVar(&c.SailChart.Name, "sail-chart-name", DefaultSailChartName, "name of the Sail Operator chart in the repository")
	fs.StringVar(&c.SailChart.Version, "sail-chart-version", DefaultSailChartVersion, "Sail Operator chart version to install; the default is the version this release is tested with (another version needs --sail-chart-digest too)")
	fs.StringVar(&c.SailChart.Digest, "sail-chart-digest", "", "sha256 of the chart archive of --sail-chart-version; a chart with another digest is refused. Empty: the digest this release ships for its default version (no other version is installed without one)")
	fs.BoolVar(&c.SailChart.InsecureHTTP, "sail-chart-insecure-http", false, "allow fetching the Sail Operator chart over plain http (test repositories only: the chart gets escalate and bind, and over http its digest proves nothing)")
	fs.StringVar(&c.SailChart.Keyring, "sail-chart-keyring", "", "OpenPGP keyring; when set, the Sail chart is installed only with a provenance file (.prov) signed by one of its keys (helm install --verify)")
	fs.StringVar(&c.SailChartCAFile, "sail-chart-ca-file", "", "PEM file of CAs to trust, besides the system's, for the Sail chart repository or OCI registry (an internal mirror signed by a private CA)")
	fs.Func("sail-values", "values for the Sail Operator chart as a JSON object (e.g. {\"image\":\"mirror.example/sail-operator:1.30.0\"}), used when the operator installs it", func(s string) error {
		return c.parseSailValues(s)
	})
	fs.StringVar(&c.SailNamespace, "sail-namespace", DefaultSailNamespace, "namespace the Sail Operator is installed into")
	fs.DurationVar(&c.HelmTimeout, "sail-install-timeout", 5*time.Minute, "upper bound for one Helm install or uninstall of the Sail Operator")
	fs.DurationVar(&c.CNIReleaseTimeout, "cni-release-timeout", DefaultCNIReleaseTimeout, "at teardown, how long ZTunnel and IstioCNI wait for istio-cni to release the Pods of namespaces that left the mesh")
	c.keyOptions.BindFlags(fs)
}

// Validate checks the flags and resolves the trusted license keys.
func (c *Config) Validate() error {
	if c.OperatorNamespace == "" || c.LicenseSecret == "" {
		return fmt.Errorf("the operator namespace and --license-secret are required")
	}
	if c.SailInstall {
		// The repository's credentials come from the environment (the chart
		// sets them from a Secret the kubelet reads), never from a flag that
		// anyone who may list Pods could read.
		c.SailChart.Username, c.SailChart.Password = os.Getenv(EnvSailChartUsername), os.Getenv(EnvSailChartPassword)
		u, err := url.Parse(c.SailChart.Repository)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "oci") || u.Host == "" {
			return fmt.Errorf("--sail-chart-repository must be an https or oci URL, got %q", c.SailChart.Repository)
		}
		if u.Scheme == "http" && !c.SailChart.InsecureHTTP {
			return fmt.Errorf("--sail-chart-repository %q is plain http, which lets anyone on the path replace the chart the operator installs with escalate and bind: "+
				"use https, or set --sail-chart-insecure-http (test repositories only)", c.SailChart.Repository)
		}
		if c.SailChart.Name == "" || c.SailNamespace == "" {
			return fmt.Errorf("--sail-chart-name and --sail-namespace must not be empty")
		}
		// The compiled-in digest vouches for the compiled-in version only.
		if c.SailChart.Digest == "" && c.SailChart.Version == DefaultSailChartVersion {
			c.SailChart.Digest = DefaultSailChartDigest
		}
	}
	keys, err := c.keyOptions.TrustedKeys()
	switch {
	case err == license.ErrTestKeysDisabled:
		c.KeyWarning = err
	case err != nil:
		return err
	}
	c.Keys = keys
	return nil
}

// parseSailValues reads --sail-values: a JSON object (the chart renders
// sail.values with toJson); empty or null means none.
func (c *Config) parseSailValues(s string) error {
	c.SailValues = nil
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return fmt.Errorf("--sail-values must be a JSON object: %w", err)
	}
	c.SailValues = v
	return nil
}
