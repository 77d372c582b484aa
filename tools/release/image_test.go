package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var testCreated = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func testImage(t *testing.T, arch string) v1.Image {
	t.Helper()
	img, err := buildImage(imageSpec{
		Name: "fleet-operator", Version: "0.1.0", Revision: "abc123", Source: "https://github.com/ericdev/fleetmesh",
		OS: "linux", Arch: arch, Binary: []byte("#!binary " + arch), CA: []byte("-----BEGIN CERTIFICATE-----\n"), Created: testCreated,
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// layerFiles reads a layer's tar: name -> header and body.
func layerFiles(t *testing.T, l v1.Layer) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hs, bodies := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs, bodies
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		hs[h.Name], bodies[h.Name] = h, b
	}
}

func TestImageConfig(t *testing.T) {
	img := testImage(t, "arm64")
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// A numeric user: the kubelet can check runAsNonRoot without /etc/passwd.
	if !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(cf.Config.User) || cf.Config.User != "65532:65532" {
		t.Errorf("User = %q, want 65532:65532", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if strings.Join(cf.Config.Entrypoint, " ") != "/fleet-operator" {
		t.Errorf("Entrypoint = %v", cf.Config.Entrypoint)
	}
	want := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/ericdev/fleetmesh",
		"org.opencontainers.image.version":  "0.1.0",
		"org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	for k, v := range want {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}
	if !cf.Created.Equal(testCreated) {
		t.Errorf("created %v, want the commit time %v", cf.Created, testCreated)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("media types %s, %s: want OCI", m.MediaType, m.Config.MediaType)
	}
	for k, v := range want {
		if m.Annotations[k] != v {
			t.Errorf("manifest annotation %s = %q, want %q", k, m.Annotations[k], v)
		}
	}
	// The same input gives the same image: a rebuild of a commit is identical.
	d1, _ := img.Digest()
	d2, _ := testImage(t, "arm64").Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same input: %s, %s", d1, d2)
	}
}

func TestImageLayers(t *testing.T) {
	img := testImage(t, "amd64")
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want base and binary", len(layers))
	}
	for _, l := range layers {
		mt, _ := l.MediaType()
		if mt != types.OCILayer {
			t.Errorf("layer media type %s", mt)
		}
	}
	hs, bodies := layerFiles(t, layers[0])
	if !strings.Contains(string(bodies["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", bodies["etc/passwd"])
	}
	if !strings.Contains(string(bodies["etc/group"]), "nonroot:x:65532:") {
		t.Errorf("/etc/group:\n%s", bodies["etc/group"])
	}
	if h := hs["home/nonroot/"]; h == nil || h.Uid != nonroot || h.Gid != nonroot {
		t.Errorf("home/nonroot/ is not 65532's: %+v", h)
	}
	if h := hs["tmp/"]; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("tmp/ is not 1777: %+v", h)
	}
	if _, ok := bodies["etc/ssl/certs/ca-certificates.crt"]; !ok {
		t.Error("no CA bundle")
	}
	for name, h := range hs {
		if !h.ModTime.Equal(testCreated) {
			t.Errorf("%s mtime %v, want the commit time", name, h.ModTime)
		}
	}
	hs, bodies = layerFiles(t, layers[1])
	if len(hs) != 1 || hs["fleet-operator"] == nil {
		t.Fatalf("binary layer holds %v, want fleet-operator alone", keysOf(hs))
	}
	if h := hs["fleet-operator"]; h.Mode != 0o755 || h.Uid != 0 {
		t.Errorf("binary mode %o uid %d, want 0755 root-owned (not writable by the user it runs as)", h.Mode, h.Uid)
	}
	if string(bodies["fleet-operator"]) != "#!binary amd64" {
		t.Errorf("binary content %q", bodies["fleet-operator"])
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestIndexPlatformsAndLayout(t *testing.T) {
	idx, err := buildIndex([]v1.Image{testImage(t, "amd64"), testImage(t, "arm64")}, map[string]string{"org.opencontainers.image.version": "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "fleet-operator")
	d, err := writeLayout(dir, "0.1.0", idx)
	if err != nil {
		t.Fatal(err)
	}
	// Read it back as a consumer (crane, skopeo, a registry push) does.
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != d || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "0.1.0" {
		t.Fatalf("index.json: %+v, want the index %s tagged 0.1.0", tm.Manifests, d)
	}
	got, err := top.ImageIndex(d)
	if err != nil {
		t.Fatal(err)
	}
	im, err := got.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", im.MediaType)
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.OS+"/"+m.Platform.Architecture)
		img, err := got.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS+"/"+cf.Architecture != m.Platform.OS+"/"+m.Platform.Architecture {
			t.Errorf("index says %s/%s, image config %s/%s", m.Platform.OS, m.Platform.Architecture, cf.OS, cf.Architecture)
		}
	}
	if strings.Join(platforms, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %v", platforms)
	}
}

func TestSBOMFromBuildInfo(t *testing.T) {
	// The test binary carries build information like a release binary.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := binarySBOM(self, "release.test", "0.1.0", sbomSubject{Type: "container", Name: "ghcr.io/ericdev/x", Digest: "sha256:" + strings.Repeat("a", 64), OS: "linux", Arch: "amd64"}, testCreated)
	if err != nil {
		t.Fatal(err)
	}
	var bom cdxBOM
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.5" || !strings.HasPrefix(bom.SerialNumber, "urn:uuid:") {
		t.Errorf("header %s %s %s", bom.BOMFormat, bom.SpecVersion, bom.SerialNumber)
	}
	if bom.Metadata.Component.Type != "container" || !strings.HasPrefix(bom.Metadata.Component.PURL, "pkg:oci/") {
		t.Errorf("subject %+v", bom.Metadata.Component)
	}
	names := map[string]string{}
	for _, c := range bom.Components {
		names[c.Name] = c.Version
	}
	// A module this tool links (go.mod), at its version.
	if names["github.com/google/go-containerregistry"] != "v0.22.1" {
		t.Errorf("go-containerregistry v0.22.1 missing from %v", names)
	}
	if names["release.test"] != "0.1.0" || !strings.HasPrefix(names["stdlib"], "go1.") {
		t.Errorf("the binary and stdlib components: %v", names)
	}
	refs := map[string]bool{}
	for _, c := range bom.Components {
		refs[c.BOMRef] = true
	}
	for _, d := range bom.Dependencies {
		for _, on := range d.DependsOn {
			if !refs[on] {
				t.Errorf("dependency on %s, which no component is", on)
			}
		}
	}
	if !bytes.Contains(b, []byte(`"alg": "SHA-256"`)) {
		t.Error("no SHA-256 of the binary")
	}
}

func TestChecksumsMatchFiles(t *testing.T) {
	dir := t.TempDir()
	r := &release{Out: dir, created: testCreated}
	for _, f := range []string{"charts/a-0.1.0.tgz", "archives/x_0.1.0_linux_amd64.tar.gz", "images.txt"} {
		if err := r.writeFile(f, []byte("content of "+f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.writeSums(); err != nil {
		t.Fatal(err)
	}
	listed, err := verifySums(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(listed, ",") != "archives/x_0.1.0_linux_amd64.tar.gz,charts/a-0.1.0.tgz,images.txt" {
		t.Errorf("listed %v", listed)
	}
	// sha256sum -c reads the same format: "<hex>  <path>".
	raw, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if !regexp.MustCompile(`(?m)^[0-9a-f]{64}  charts/a-0\.1\.0\.tgz$`).Match(raw) {
		t.Errorf("SHA256SUMS:\n%s", raw)
	}
	if err := os.WriteFile(filepath.Join(dir, "images.txt"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := verifySums(dir); err == nil || !strings.Contains(err.Error(), "images.txt") {
		t.Errorf("a changed file passes: %v", err)
	}
}

func TestArchiveHoldsBinaryAndLicense(t *testing.T) {
	b, err := tarGz([]tarFile{{Name: "kubectl-celld", Mode: 0o755, Body: []byte("bin")}, {Name: "LICENSE", Mode: 0o644, Body: []byte("Apache")}}, &release{created: testCreated})
	if err != nil {
		t.Fatal(err)
	}
	l, err := layerOf(mustGunzip(t, b))
	if err != nil {
		t.Fatal(err)
	}
	hs, _ := layerFiles(t, l)
	if hs["kubectl-celld"] == nil || hs["kubectl-celld"].Mode != 0o755 || hs["LICENSE"] == nil {
		t.Errorf("archive holds %v", keysOf(hs))
	}
}

func mustGunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
