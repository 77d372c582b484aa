package main

import (
	"debug/buildinfo"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyModule writes a main package the release builder can compile in a
// second: a stand-in for an operator, so the build path itself is tested.
func tinyModule(t *testing.T) (root string, c component) {
	t.Helper()
	root = t.TempDir()
	dir := filepath.Join(root, "tiny")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod":  "module example.com/tiny\n\ngo 1.22\n",
		"main.go": "package main\n\nfunc main() {}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, component{Name: "mesh-operator", Module: "tiny", Pkg: "."}
}

func buildTagsOf(t *testing.T, path string) string {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info.Settings {
		if s.Key == "-tags" {
			return s.Value
		}
	}
	return ""
}

// TestReleaseBuildNeverCarriesTheLicenseTestKey: a release binary must never
// be built with the licensetestkey tag (docs/licensing.md: it would trust a
// key from a flag or the environment). The builder passes no tags, but go
// build also reads GOFLAGS from the environment, so a release run from a
// shell that exports GOFLAGS=-tags=licensetestkey (as a developer running
// the local e2e might) must fail rather than publish such a binary.
func TestReleaseBuildNeverCarriesTheLicenseTestKey(t *testing.T) {
	root, c := tinyModule(t)
	r := &release{Root: root, Out: filepath.Join(root, "out"), Version: "0.0.0", Log: io.Discard}
	for _, goflags := range []string{"-tags=licensetestkey", "-tags=foo,licensetestkey -trimpath"} {
		t.Setenv("GOFLAGS", goflags)
		path, _, err := r.build(c, "linux/amd64")
		if err == nil {
			t.Errorf("GOFLAGS=%q: the release build of %s succeeded with tags %q; want a refusal", goflags, c.Name, buildTagsOf(t, path))
		} else if !strings.Contains(err.Error(), "licensetestkey") {
			t.Errorf("GOFLAGS=%q: %v; want the refusal to name licensetestkey", goflags, err)
		}
	}
	t.Setenv("GOFLAGS", "")
	path, _, err := r.build(c, "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	if tags := buildTagsOf(t, path); strings.Contains(tags, "licensetestkey") {
		t.Errorf("release build tags %q", tags)
	}
}

// TestLicenseTestKeyOnlyForTheNodeArchive: the real-node tier's test-key
// variant of the mesh operator is an option of -node-archive alone; a
// release (or its dry run) asking for it is refused before anything is
// built, and the release entry points never pass it.
func TestLicenseTestKeyOnlyForTheNodeArchive(t *testing.T) {
	err := run([]string{"-root", t.TempDir(), "-check-repo=false", "-version", "0.0.0", "-node-mesh-license-test-key"})
	if err == nil || !strings.Contains(err.Error(), "-node-archive") {
		t.Errorf("-node-mesh-license-test-key without -node-archive: %v; want a refusal naming -node-archive", err)
	}
	root := filepath.Join("..", "..")
	for _, f := range []string{"Makefile", ".github/workflows/release.yaml", ".ci/run"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			t.Fatal(err)
		}
		if strings.Contains(string(b), "license-test-key") {
			t.Errorf("%s mentions the license test key: release entry points must never build it", f)
		}
	}
}
