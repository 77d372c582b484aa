package real

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Release is what BuildImages made: one docker-archive tar with every image
// the real node runs, and the packaged charts.
type Release struct {
	// Archive holds the operators' and the celld stand-in's images (as the
	// release dry run builds them, linux/amd64 only, tagged
	// ghcr.io/ericdev/NAME:VERSION as the charts name them; the mesh
	// operator's is its licensetestkey build, see docs/development.md),
	// PauseImage and CoreDNSImage.
	Archive string
	// Charts are the packaged charts (.tgz) by operator name.
	Charts map[string]string
	// Version is the release version (the charts' appVersion, the images' tag).
	Version string
	// Took is the wall time of the build.
	Took time.Duration
}

// BuildImages builds the images offline, without Docker: the release builder
// (tools/release, as `make release-dry-run` runs it) compiles the operators
// and the stand-in, builds their images and packages both charts, and also
// writes the node archive with the pause image (e2e/cmd/pause) and CoreDNS
// (bin/node/coredns) built the same way.
func BuildImages(ctx context.Context, root, binDir, out string) (*Release, error) {
	start := time.Now()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	pause := filepath.Join(out, "pause")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", pause, "./cmd/pause")
	build.Dir = filepath.Join(root, "e2e")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build pause: %v\n%s", err, b)
	}
	rel := filepath.Join(out, "release")
	archive := filepath.Join(out, "node-images.tar")
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-root", root, "-out", rel, "-only", "images,charts",
		"-image-platforms", "linux/amd64", "-node-archive", archive,
		// The node's mesh operator trusts a license key the tier mints
		// (the release images trust only the vendor's).
		"-node-mesh-license-test-key",
		"-extra-image", PauseImage+"="+pause,
		"-extra-image", CoreDNSImage+"="+filepath.Join(binDir, "node", "coredns"))
	cmd.Dir = filepath.Join(root, "tools", "release")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tools/release: %v\n%s", err, b)
	}
	r := &Release{Archive: archive, Charts: map[string]string{}}
	for _, op := range []string{"fleet-operator", "mesh-operator"} {
		m, err := filepath.Glob(filepath.Join(rel, "charts", op+"-*.tgz"))
		if err != nil || len(m) != 1 {
			return nil, fmt.Errorf("want one packaged %s chart in %s/charts, found %v (%v)", op, rel, m, err)
		}
		r.Charts[op] = m[0]
		r.Version = filepath.Base(m[0])[len(op)+1 : len(filepath.Base(m[0]))-len(".tgz")]
	}
	r.Took = time.Since(start).Round(100 * time.Millisecond)
	return r, nil
}
