package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
)

// LoadImages copies images from the local Docker engine into every node,
// what `kind load docker-image` does. kind exports the per-node half
// (nodeutils.LoadImageArchive) but not the command's own logic, so the
// `docker save` half is done here.
func (p *Provider) LoadImages(ctx context.Context, images ...string) error {
	if len(images) == 0 {
		return nil
	}
	nodeList, err := p.kind.ListInternalNodes(p.opts.Name)
	if err != nil {
		return err
	}
	if len(nodeList) == 0 {
		return fmt.Errorf("kind cluster %s has no nodes", p.opts.Name)
	}
	dir, err := os.MkdirTemp("", "fleetmesh-images-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	archive := filepath.Join(dir, "images.tar")
	if err := dockerSave(ctx, archive, images); err != nil {
		return err
	}
	return loadArchive(archive, nodeList)
}

func dockerSave(ctx context.Context, dest string, images []string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", append([]string{"save", "-o", dest}, images...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker save %v: %w: %s", images, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// loadArchive imports the archive on all nodes in parallel.
func loadArchive(archive string, nodeList []nodes.Node) error {
	var wg sync.WaitGroup
	errs := make([]error, len(nodeList))
	for i, node := range nodeList {
		wg.Go(func() {
			f, err := os.Open(archive)
			if err != nil {
				errs[i] = err
				return
			}
			defer func() { _ = f.Close() }()
			if err := nodeutils.LoadImageArchive(node, f); err != nil {
				errs[i] = fmt.Errorf("load images into %s: %w", node.String(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
