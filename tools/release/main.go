// Command release builds every artifact a tagged release publishes, offline
// and without a container runtime (docs/release.md):
//
//   - both operator images and the celld stand-in image as OCI image layouts
//     (multi-arch index, linux/amd64 and linux/arm64): static binaries on a
//     minimal base made here (an empty image plus /etc/passwd with nonroot
//     65532 and the CA bundle), numeric USER, OCI labels;
//   - both charts, packaged with bin/helm;
//   - the kubectl-celld plugin and the mesh-license tool as archives for
//     linux and darwin on amd64 and arm64;
//   - a CycloneDX SBOM per binary and per image;
//   - an OLM bundle per operator (and its bundle image);
//   - SHA256SUMS over every file above, and images.txt naming each image's
//     index digest.
//
// `make release-dry-run` runs it into bin/release; `make bundle` runs only the
// bundles. The release workflow (.github/workflows/release.yaml) publishes the
// same artifacts from a tag.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	root := fs.String("root", "../..", "repository root")
	out := fs.String("out", "", "output directory (default ROOT/bin/release); emptied first")
	version := fs.String("version", "", "release version X.Y.Z (default: both charts' version, which must agree)")
	platforms := fs.String("image-platforms", "linux/amd64,linux/arm64", "image platforms")
	archPlatforms := fs.String("archive-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "kubectl-celld and mesh-license archive platforms")
	only := fs.String("only", "", "comma-separated steps to run (images,charts,archives,bundles; default all)")
	source := fs.String("source", "https://github.com/ericdev/fleetmesh", "org.opencontainers.image.source")
	registry := fs.String("registry", "ghcr.io/ericdev", "image repository prefix the chart and the bundle name")
	checkRepo := fs.Bool("check-repo", true, "fail unless the charts and CHANGELOG.md carry this version")
	nodeArchive := fs.String("node-archive", "", "also write the images (first platform) as one docker-archive tar a node's containerd imports (`ctr images import`), for the real-node tier")
	nodeTestKey := fs.Bool("node-mesh-license-test-key", false, "build -node-archive's mesh-operator image with the licensetestkey tag (trusts a license key from --license-test-public-key): the real-node tier only; refused without -node-archive, never in a release")
	var extra extraImages
	fs.Var(&extra, "extra-image", "REF=BINARY: also build an image of a prebuilt static binary (entrypoint /NAME) into -node-archive; repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodeTestKey && *nodeArchive == "" {
		return fmt.Errorf("-node-mesh-license-test-key applies only to -node-archive (the real-node tier): a release never builds the mesh operator with the licensetestkey tag")
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	r := &release{
		Root: absRoot, Out: *out, Version: *version, Source: *source, Registry: *registry,
		ImagePlatforms: splitList(*platforms), ArchivePlatforms: splitList(*archPlatforms),
		Log: os.Stderr, NodeArchive: *nodeArchive, ExtraImages: extra, NodeLicenseTestKey: *nodeTestKey,
	}
	if r.Out == "" {
		r.Out = filepath.Join(absRoot, "bin", "release")
	}
	if r.Version == "" {
		if r.Version, err = chartVersions(absRoot); err != nil {
			return err
		}
	}
	if *checkRepo {
		if err := checkRepoCarries(absRoot, r.Version); err != nil {
			return err
		}
	}
	steps := map[string]bool{"images": true, "charts": true, "archives": true, "bundles": true}
	if *only != "" {
		steps = map[string]bool{}
		for _, s := range splitList(*only) {
			steps[s] = true
		}
	}
	start := time.Now()
	if err := r.Run(steps); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "release %s: %s in %s\n", r.Version, r.Out, time.Since(start).Round(time.Second))
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// extraImages collects -extra-image REF=BINARY flags.
type extraImages []extraImage

type extraImage struct{ Ref, Binary string }

func (e *extraImages) String() string { return fmt.Sprint(*e) }

func (e *extraImages) Set(v string) error {
	ref, bin, ok := strings.Cut(v, "=")
	if !ok || ref == "" || bin == "" {
		return fmt.Errorf("-extra-image wants REF=BINARY, got %q", v)
	}
	*e = append(*e, extraImage{Ref: ref, Binary: bin})
	return nil
}
