package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

// versionPkg is where the version is stamped (shared/version, as the Makefile
// and the Dockerfiles do).
const versionPkg = "github.com/ericdev/fleetmesh/shared/version.Version"

// component is one binary the release builds.
type component struct {
	// Name is the binary's (and image's or archive's) name.
	Name string
	// Module is the directory of its Go module under the root; Pkg its
	// main package there.
	Module, Pkg string
	// Workspace builds it with the repository's go.work (the stand-in
	// imports the operators' API packages); the operators build alone, as
	// they are released.
	Workspace bool
}

var (
	images = []component{
		{Name: "fleet-operator", Module: "fleet-operator", Pkg: "./cmd/fleet-operator"},
		{Name: "mesh-operator", Module: "mesh-operator", Pkg: "./cmd/mesh-operator"},
		{Name: "celld-standin", Module: "e2e", Pkg: "./cmd/celld-standin", Workspace: true},
	}
	// archives are the tools released as files. mesh-license is the
	// customer build (no licensevendor tag: it cannot sign).
	archives = []component{
		{Name: "kubectl-celld", Module: "fleet-operator", Pkg: "./cmd/kubectl-celld"},
		{Name: "mesh-license", Module: "mesh-operator", Pkg: "./cmd/mesh-license"},
	}
	operators = []string{"fleet-operator", "mesh-operator"}
)

type release struct {
	Root, Out, Version, Source, Registry string
	ImagePlatforms, ArchivePlatforms     []string
	Log                                  io.Writer
	// NodeArchive, when set, is a docker-archive tar of the images' first
	// platform plus ExtraImages, for a real node to import (the real-node
	// tier, e2e/cluster/real): no registry is involved.
	NodeArchive string
	ExtraImages []extraImage
	// NodeLicenseTestKey builds the node archive's mesh-operator image from
	// a binary with the license test-key tag, so the real-node tier can
	// license it with a key of its own (docs/development.md). Only with
	// NodeArchive; the release's own images, layouts and binaries stay
	// release builds.
	NodeLicenseTestKey bool

	revision string
	created  time.Time
	// sums are the files SHA256SUMS lists (paths relative to Out).
	sums []string
	// imageLines name each image built by digest (images.txt).
	imageLines []string
	// nodeImages are the images NodeArchive holds, by reference.
	nodeImages map[string]v1.Image
}

// Run builds the selected steps into a fresh Out.
func (r *release) Run(steps map[string]bool) error {
	var err error
	if r.revision, r.created, err = gitRevision(r.Root); err != nil {
		return err
	}
	if err := os.RemoveAll(r.Out); err != nil {
		return err
	}
	if err := os.MkdirAll(r.Out, 0o755); err != nil {
		return err
	}
	if steps["images"] {
		if err := r.buildImages(); err != nil {
			return err
		}
		if err := r.writeNodeArchive(); err != nil {
			return err
		}
	}
	if steps["archives"] {
		if err := r.buildArchives(); err != nil {
			return err
		}
	}
	if steps["charts"] {
		if err := r.packageCharts(); err != nil {
			return err
		}
	}
	if steps["bundles"] {
		for _, op := range operators {
			dir := filepath.Join(r.Out, "bundle", op)
			if err := r.writeBundle(op, dir); err != nil {
				return fmt.Errorf("bundle %s: %w", op, err)
			}
			if err := r.bundleImage(op, dir); err != nil {
				return fmt.Errorf("bundle image %s: %w", op, err)
			}
		}
	}
	if len(r.imageLines) > 0 {
		if err := r.writeFile("images.txt", []byte(strings.Join(r.imageLines, "\n")+"\n")); err != nil {
			return err
		}
	}
	return r.writeSums()
}

func (r *release) logf(format string, args ...any) {
	fmt.Fprintf(r.Log, format+"\n", args...)
}

// licenseTestKeyTag is the mesh operator's test-key build tag
// (mesh-operator/internal/license/testkeys_enabled.go): a binary built with
// it also trusts a license key from a flag or the environment. No release
// artifact may carry it; only the real-node tier's node archive does, on
// request (NodeLicenseTestKey).
const licenseTestKeyTag = "licensetestkey"

// build compiles c for platform ("os/arch") into bin/OS_ARCH/NAME under
// Out: static (CGO off), trimmed paths, stripped, with the version stamped.
// It returns the binary's path and content. It refuses a binary that came
// out with the license test-key tag (go build also takes tags from GOFLAGS).
func (r *release) build(c component, platform string) (string, []byte, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok {
		return "", nil, fmt.Errorf("platform %q is not os/arch", platform)
	}
	path := filepath.Join(r.Out, "bin", goos+"_"+goarch, c.Name)
	b, err := r.compile(c, platform, path)
	if err != nil {
		return "", nil, err
	}
	if hasTag(path, licenseTestKeyTag) {
		return "", nil, fmt.Errorf("%s for %s was built with the %s tag (from GOFLAGS=%q?): a release binary must trust only the compiled-in license key; unset it",
			c.Name, platform, licenseTestKeyTag, os.Getenv("GOFLAGS"))
	}
	return path, b, nil
}

// buildLicenseTestKey compiles c with the license test-key tag, for the
// node archive only, outside the release's bin/ (node-testkey/OS_ARCH/NAME).
func (r *release) buildLicenseTestKey(c component, platform string) ([]byte, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok {
		return nil, fmt.Errorf("platform %q is not os/arch", platform)
	}
	path := filepath.Join(r.Out, "node-testkey", goos+"_"+goarch, c.Name)
	b, err := r.compile(c, platform, path, licenseTestKeyTag)
	if err != nil {
		return nil, err
	}
	if !hasTag(path, licenseTestKeyTag) {
		return nil, fmt.Errorf("%s for the node archive lacks the %s tag", c.Name, licenseTestKeyTag)
	}
	return b, nil
}

func (r *release) compile(c component, platform, path string, tags ...string) ([]byte, error) {
	goos, goarch, _ := strings.Cut(platform, "/")
	ldflags := fmt.Sprintf("-s -w -X %s=%s", versionPkg, r.Version)
	args := []string{"build", "-trimpath", "-ldflags", ldflags}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "-o", path, c.Pkg)...)
	cmd.Dir = filepath.Join(r.Root, c.Module)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	if !c.Workspace {
		cmd.Env = append(cmd.Env, "GOWORK=off")
	}
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s for %s: %v\n%s", c.Name, platform, err, out)
	}
	r.logf("built %s %s in %s%s", c.Name, platform, time.Since(start).Round(time.Millisecond), map[bool]string{true: " (tags " + strings.Join(tags, ",") + ")"}[len(tags) > 0])
	return os.ReadFile(path)
}

// hasTag reports whether the Go binary at path was built with tag (its
// build information's -tags setting, as `go version -m` prints it).
func hasTag(path, tag string) bool {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			for _, t := range strings.FieldsFunc(s.Value, func(r rune) bool { return r == ',' || r == ' ' }) {
				if t == tag {
					return true
				}
			}
		}
	}
	return false
}

// packageCharts packages both charts with bin/helm, stamped with the version.
func (r *release) packageCharts() error {
	dir := filepath.Join(r.Out, "charts")
	for _, op := range operators {
		cmd := exec.Command(filepath.Join(r.Root, "bin", "helm"), "package", filepath.Join(r.Root, "charts", op),
			"--version", r.Version, "--app-version", r.Version, "-d", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("helm package %s: %v\n%s", op, err, out)
		}
		r.sums = append(r.sums, filepath.Join("charts", fmt.Sprintf("%s-%s.tgz", op, r.Version)))
	}
	return nil
}

// gitRevision is HEAD's commit and commit time (the images' created time,
// so that a rebuild of one commit is byte-identical); "-dirty" marks a
// tree with uncommitted changes.
func gitRevision(root string) (string, time.Time, error) {
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("git log: %v", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		return "", time.Time{}, fmt.Errorf("git log printed %q", out)
	}
	sec, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return "", time.Time{}, err
	}
	rev := fields[0]
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "-dirty"
	}
	return rev, time.Unix(sec, 0).UTC(), nil
}

type chartMeta struct {
	Version     string            `json:"version"`
	AppVersion  string            `json:"appVersion"`
	KubeVersion string            `json:"kubeVersion"`
	Annotations map[string]string `json:"annotations"`
}

func readChart(root, op string) (chartMeta, error) {
	var m chartMeta
	b, err := os.ReadFile(filepath.Join(root, "charts", op, "Chart.yaml"))
	if err != nil {
		return m, err
	}
	return m, yaml.Unmarshal(b, &m)
}

// chartVersions is the version both charts carry; they must agree.
func chartVersions(root string) (string, error) {
	seen := map[string]bool{}
	var v string
	for _, op := range operators {
		m, err := readChart(root, op)
		if err != nil {
			return "", err
		}
		v = m.Version
		seen[v] = true
	}
	if len(seen) != 1 {
		return "", fmt.Errorf("the charts carry different versions %v: pass -version", keys(seen))
	}
	return v, nil
}

// checkRepoCarries fails unless the repository has cut version: each chart's
// version and appVersion, and a CHANGELOG.md section per operator.
func checkRepoCarries(root, version string) error {
	var problems []string
	for _, op := range operators {
		m, err := readChart(root, op)
		if err != nil {
			return err
		}
		if m.Version != version || m.AppVersion != version {
			problems = append(problems, fmt.Sprintf("charts/%s/Chart.yaml: version %q appVersion %q, want %q", op, m.Version, m.AppVersion, version))
		}
	}
	sections, err := changelogSections(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	for _, op := range operators {
		if !sections[op+" "+version] {
			problems = append(problems, fmt.Sprintf("CHANGELOG.md has no section %q", "## "+op+" "+version))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("the repository has not cut %s:\n  %s", version, strings.Join(problems, "\n  "))
	}
	return nil
}

var sectionRE = regexp.MustCompile(`^## ([a-z-]+ \d+\.\d+\.\d+\S*)`)

// changelogSections are the "## OPERATOR X.Y.Z" headings of CHANGELOG.md.
func changelogSections(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := sectionRE.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = true
		}
	}
	return out, sc.Err()
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
