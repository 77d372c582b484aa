package krew

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ericdev/fleetmesh/shared/golden"
)

// checksums is a checksums file as the release writes it: sha256sum over
// the chart and every archive.
func checksums(version string, skip ...string) (string, map[string]string) {
	var b strings.Builder
	sums := map[string]string{}
	files := []string{"fleet-operator-" + version + ".tgz"}
	for _, p := range Platforms {
		files = append(files, Archive(version, p.OS, p.Arch))
	}
	for _, f := range files {
		s := sha256.Sum256([]byte("content of " + f))
		sums[f] = hex.EncodeToString(s[:])
		if !strings.Contains(strings.Join(skip, " "), f) {
			fmt.Fprintf(&b, "%s  %s\n", sums[f], f)
		}
	}
	return b.String(), sums
}

// The fields krew reads (krew's index validation: apiVersion, kind, name,
// a v-prefixed semver, per platform an os/arch selector, an https uri, a
// 64-hex sha256 and the binary).
type plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		Homepage         string `json:"homepage"`
		ShortDescription string `json:"shortDescription"`
		Description      string `json:"description"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

func TestManifest(t *testing.T) {
	const version = "0.1.0"
	text, sums := checksums(version)
	raw, err := Manifest(version, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var p plugin
	if err := yaml.UnmarshalStrict(raw, &p); err != nil {
		t.Fatalf("the manifest is not a krew Plugin: %v\n%s", err, raw)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "celld" ||
		p.Spec.Version != "v"+version || p.Spec.ShortDescription == "" || len(p.Spec.ShortDescription) > 50 {
		t.Errorf("manifest header %+v", p)
	}
	if len(p.Spec.Platforms) != len(Platforms) {
		t.Fatalf("%d platforms, want %d", len(p.Spec.Platforms), len(Platforms))
	}
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, pl := range p.Spec.Platforms {
		want := Platforms[i]
		archive := Archive(version, want.OS, want.Arch)
		if pl.Selector.MatchLabels["os"] != want.OS || pl.Selector.MatchLabels["arch"] != want.Arch {
			t.Errorf("platform %d selector %v", i, pl.Selector.MatchLabels)
		}
		if pl.URI != "https://github.com/ericdev/fleetmesh/releases/download/fleet-operator/v"+version+"/"+archive {
			t.Errorf("platform %d uri %s", i, pl.URI)
		}
		if !hex64.MatchString(pl.SHA256) || pl.SHA256 != sums[archive] {
			t.Errorf("platform %d sha256 %s, want %s", i, pl.SHA256, sums[archive])
		}
		if pl.Bin != "kubectl-celld" || len(pl.Files) != 1 || pl.Files[0].From != "kubectl-celld" {
			t.Errorf("platform %d bin %q files %+v", i, pl.Bin, pl.Files)
		}
	}
	golden.AssertYAML(t, "celld-0.1.0", yamlDoc(t, raw))
}

func yamlDoc(t *testing.T, raw []byte) any {
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestManifestRefuses(t *testing.T) {
	text, _ := checksums("0.1.0", Archive("0.1.0", "darwin", "arm64"))
	if _, err := Manifest("0.1.0", []byte(text)); err == nil || !strings.Contains(err.Error(), "darwin_arm64") {
		t.Errorf("a platform missing from the checksums: %v", err)
	}
	full, _ := checksums("0.1.0")
	if _, err := Manifest("v0.1.0", []byte(full)); err == nil {
		t.Errorf("a v-prefixed version was taken")
	}
	if _, err := Manifest("0.1.0", []byte(full+"nothex  kubectl-celld_0.1.0_linux_amd64.tar.gz\n")); err == nil {
		t.Errorf("a malformed checksums line was taken")
	}
	// sha256sum's binary mode marker.
	bin := strings.ReplaceAll(full, "  kubectl", " *kubectl")
	if _, err := Manifest("0.1.0", []byte(bin)); err != nil {
		t.Errorf("sha256sum -b output: %v", err)
	}
}

// TestManifestFromTheDryRunsChecksums: `make release-dry-run` writes one
// SHA256SUMS over its whole output tree, so the archives are listed under
// archives/; the manifest is rendered from that file as it is.
func TestManifestFromTheDryRunsChecksums(t *testing.T) {
	text, sums := checksums("0.1.0")
	var tree strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		sum, file, _ := strings.Cut(line, "  ")
		fmt.Fprintf(&tree, "%s  archives/%s\n", sum, file)
	}
	fmt.Fprintf(&tree, "%s  images.txt\n", strings.Repeat("ab", 32))
	// Two files of one name in other directories: not the plugin's.
	fmt.Fprintf(&tree, "%s  bundle/fleet-operator/metadata/annotations.yaml\n", strings.Repeat("cd", 32))
	fmt.Fprintf(&tree, "%s  bundle/mesh-operator/metadata/annotations.yaml\n", strings.Repeat("ef", 32))
	raw, err := Manifest("0.1.0", []byte(tree.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Platforms {
		if sum := sums[Archive("0.1.0", p.OS, p.Arch)]; !strings.Contains(string(raw), sum) {
			t.Errorf("the manifest lacks %s/%s's sha256 %s", p.OS, p.Arch, sum)
		}
	}
}
