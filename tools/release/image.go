package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is the images' user, as in distroless's nonroot images and the
// fleet members' default (docs/fleet.md "Security context").
const nonroot = 65532

// caBundle is the CA bundle copied into the base layer: the mesh operator
// fetches the Sail chart over HTTPS.
var caBundle = "/etc/ssl/certs/ca-certificates.crt"

// tarFile is one entry of a layer.
type tarFile struct {
	Name     string
	Mode     int64
	UID, GID int
	Dir      bool
	Body     []byte
}

// layerTar writes files as a tar with fixed owners and times, so a layer's
// digest depends only on its content.
func layerTar(files []tarFile, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Uid: f.UID, Gid: f.GID, ModTime: mtime, Format: tar.FormatPAX}
		if f.Dir {
			h.Typeflag = tar.TypeDir
			h.Name = strings.TrimSuffix(f.Name, "/") + "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !f.Dir {
			if _, err := tw.Write(f.Body); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// baseFiles is the minimal base: the nonroot user and group, a writable
// home and /tmp, and the CA bundle when ca is not empty.
func baseFiles(ca []byte) []tarFile {
	files := []tarFile{
		{Name: "etc", Mode: 0o755, Dir: true},
		{Name: "etc/passwd", Mode: 0o644, Body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Name: "etc/group", Mode: 0o644, Body: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Name: "home", Mode: 0o755, Dir: true},
		{Name: "home/nonroot", Mode: 0o700, UID: nonroot, GID: nonroot, Dir: true},
		{Name: "tmp", Mode: 0o1777, Dir: true},
	}
	if len(ca) > 0 {
		files = append(files,
			tarFile{Name: "etc/ssl", Mode: 0o755, Dir: true},
			tarFile{Name: "etc/ssl/certs", Mode: 0o755, Dir: true},
			tarFile{Name: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Body: ca})
	}
	return files
}

func layerOf(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// imageSpec is one platform's image of a binary.
type imageSpec struct {
	Name, Version, Revision, Source string
	OS, Arch                        string
	Binary                          []byte
	CA                              []byte
	Created                         time.Time
}

// labels are the OCI annotations each image (and index) carries.
func (s imageSpec) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   s.Source,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    s.Name,
		"org.opencontainers.image.created":  s.Created.Format(time.RFC3339),
	}
}

// buildImage is the base layer plus the binary as /NAME, run as 65532:65532.
func buildImage(s imageSpec) (v1.Image, error) {
	base, err := layerTar(baseFiles(s.CA), s.Created)
	if err != nil {
		return nil, err
	}
	app, err := layerTar([]tarFile{{Name: s.Name, Mode: 0o755, Body: s.Binary}}, s.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, l := range []struct {
		b  []byte
		by string
	}{{base, "fleetmesh base: /etc/passwd (nonroot 65532), /etc/group, /home/nonroot, /tmp, CA bundle"}, {app, "/" + s.Name}} {
		layer, err := layerOf(l.b)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{CreatedBy: l.by, Created: v1.Time{Time: s.Created}}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = s.OS, s.Arch
	cf.Created = v1.Time{Time: s.Created}
	cf.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cf.Config.Entrypoint = []string{"/" + s.Name}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.Labels = s.labels()
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, s.labels()).(v1.Image), nil
}

// buildIndex is the multi-arch index over one image per platform.
func buildIndex(imgs []v1.Image, annotations map[string]string) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		}})
	}
	return mutate.Annotations(idx, annotations).(v1.ImageIndex), nil
}

// writeLayout writes idx as an OCI image layout at dir, its index.json
// naming it by tag (org.opencontainers.image.ref.name).
func writeLayout(dir, tag string, idx v1.ImageIndex) (v1.Hash, error) {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

// buildImages builds each image's binary per platform, its image, index,
// OCI layout under images/NAME, and an SBOM per platform image.
func (r *release) buildImages() error {
	var ca []byte
	if caBundle != "" {
		b, err := os.ReadFile(caBundle)
		if err != nil {
			return fmt.Errorf("the CA bundle for the base layer: %w", err)
		}
		ca = b
	}
	for _, c := range images {
		var imgs []v1.Image
		for _, p := range r.ImagePlatforms {
			goos, goarch, _ := strings.Cut(p, "/")
			bin, b, err := r.build(c, p)
			if err != nil {
				return err
			}
			spec := imageSpec{Name: c.Name, Version: r.Version, Revision: r.revision, Source: r.Source,
				OS: goos, Arch: goarch, Binary: b, CA: ca, Created: r.created}
			img, err := buildImage(spec)
			if err != nil {
				return fmt.Errorf("image %s %s: %w", c.Name, p, err)
			}
			imgs = append(imgs, img)
			if r.NodeArchive != "" && len(imgs) == 1 {
				nodeImg := img
				if r.NodeLicenseTestKey && c.Name == "mesh-operator" {
					tb, err := r.buildLicenseTestKey(c, p)
					if err != nil {
						return err
					}
					tspec := spec
					tspec.Binary = tb
					if nodeImg, err = buildImage(tspec); err != nil {
						return fmt.Errorf("image %s %s (license test key): %w", c.Name, p, err)
					}
				}
				r.addNodeImage(fmt.Sprintf("%s/%s:%s", r.Registry, c.Name, r.Version), nodeImg)
			}
			d, err := img.Digest()
			if err != nil {
				return err
			}
			sbom, err := binarySBOM(bin, c.Name, r.Version, sbomSubject{Type: "container", Name: r.Registry + "/" + c.Name, Digest: d.String(), OS: goos, Arch: goarch}, r.created)
			if err != nil {
				return err
			}
			name := filepath.Join("sbom", fmt.Sprintf("%s_%s_%s_%s.image.cdx.json", c.Name, r.Version, goos, goarch))
			if err := r.writeFile(name, sbom); err != nil {
				return err
			}
		}
		idx, err := buildIndex(imgs, imageSpec{Name: c.Name, Version: r.Version, Revision: r.revision, Source: r.Source, Created: r.created}.labels())
		if err != nil {
			return err
		}
		d, err := writeLayout(filepath.Join(r.Out, "images", c.Name), r.Version, idx)
		if err != nil {
			return fmt.Errorf("layout %s: %w", c.Name, err)
		}
		r.imageLines = append(r.imageLines, fmt.Sprintf("%s/%s:%s@%s", r.Registry, c.Name, r.Version, d))
		r.logf("image %s:%s %s (%s)", c.Name, r.Version, d, strings.Join(r.ImagePlatforms, ", "))
	}
	return nil
}

// writeFile writes a release file under Out and lists it in SHA256SUMS.
func (r *release) writeFile(rel string, b []byte) error {
	path := filepath.Join(r.Out, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	r.sums = append(r.sums, rel)
	return nil
}

// bundleImage packs the bundle directory (manifests/, metadata/) into a
// one-layer image whose labels are the bundle's annotations, as
// `operator-sdk run bundle` and opm expect, written as images/OPERATOR-bundle.
func (r *release) bundleImage(op, dir string) error {
	var files []tarFile
	for _, sub := range []string{"manifests", "metadata"} {
		files = append(files, tarFile{Name: sub, Mode: 0o755, Dir: true})
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return err
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, sub, e.Name()))
			if err != nil {
				return err
			}
			files = append(files, tarFile{Name: sub + "/" + e.Name(), Mode: 0o644, Body: b})
		}
	}
	t, err := layerTar(files, r.created)
	if err != nil {
		return err
	}
	layer, err := layerOf(t)
	if err != nil {
		return err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: r.created}
	labels := bundleAnnotations(op)
	for k, v := range (imageSpec{Name: op + "-bundle", Version: r.Version, Revision: r.revision, Source: r.Source, Created: r.created}).labels() {
		labels[k] = v
	}
	cf.Config.Labels = labels
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	p, err := layout.Write(filepath.Join(r.Out, "images", op+"-bundle"), empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": r.Version})); err != nil {
		return err
	}
	r.imageLines = append(r.imageLines, fmt.Sprintf("%s/%s-bundle:%s@%s", r.Registry, op, r.Version, d))
	return nil
}

func (r *release) addNodeImage(ref string, img v1.Image) {
	if r.nodeImages == nil {
		r.nodeImages = map[string]v1.Image{}
	}
	r.nodeImages[ref] = img
}

// writeNodeArchive writes NodeArchive: the release images' first platform and
// the extra images, each a base layer plus its binary as /NAME, run as
// 65532:65532, as one docker-archive tar that `ctr images import` reads.
// It is not a release file (not in SHA256SUMS).
func (r *release) writeNodeArchive() error {
	if r.NodeArchive == "" {
		return nil
	}
	goos, goarch, _ := strings.Cut(r.ImagePlatforms[0], "/")
	for _, e := range r.ExtraImages {
		b, err := os.ReadFile(e.Binary)
		if err != nil {
			return fmt.Errorf("extra image %s: %w", e.Ref, err)
		}
		img, err := buildImage(imageSpec{Name: filepath.Base(e.Binary), Version: r.Version, Revision: r.revision,
			Source: r.Source, OS: goos, Arch: goarch, Binary: b, Created: r.created})
		if err != nil {
			return fmt.Errorf("extra image %s: %w", e.Ref, err)
		}
		r.addNodeImage(e.Ref, img)
	}
	refs := map[name.Reference]v1.Image{}
	for ref, img := range r.nodeImages {
		tag, err := name.NewTag(ref)
		if err != nil {
			return err
		}
		refs[tag] = img
	}
	if err := os.MkdirAll(filepath.Dir(r.NodeArchive), 0o755); err != nil {
		return err
	}
	if err := tarball.MultiRefWriteToFile(r.NodeArchive, refs); err != nil {
		return fmt.Errorf("node archive: %w", err)
	}
	r.logf("node archive %s: %d image(s)", r.NodeArchive, len(refs))
	return nil
}
