package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// buildArchives builds kubectl-celld and mesh-license per platform into
// NAME_VERSION_OS_ARCH.tar.gz (the binary and LICENSE), each with its SBOM.
func (r *release) buildArchives() error {
	license, err := os.ReadFile(filepath.Join(r.Root, "LICENSE"))
	if err != nil {
		return err
	}
	for _, c := range archives {
		for _, p := range r.ArchivePlatforms {
			goos, goarch, _ := strings.Cut(p, "/")
			bin, b, err := r.build(c, p)
			if err != nil {
				return err
			}
			tgz, err := tarGz([]tarFile{
				{Name: c.Name, Mode: 0o755, Body: b},
				{Name: "LICENSE", Mode: 0o644, Body: license},
			}, r)
			if err != nil {
				return err
			}
			base := fmt.Sprintf("%s_%s_%s_%s", c.Name, r.Version, goos, goarch)
			if err := r.writeFile(filepath.Join("archives", base+".tar.gz"), tgz); err != nil {
				return err
			}
			sbom, err := binarySBOM(bin, c.Name, r.Version, sbomSubject{Type: "application", OS: goos, Arch: goarch}, r.created)
			if err != nil {
				return err
			}
			if err := r.writeFile(filepath.Join("sbom", base+".cdx.json"), sbom); err != nil {
				return err
			}
		}
	}
	return nil
}

func tarGz(files []tarFile, r *release) ([]byte, error) {
	t, err := layerTar(files, r.created)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(t); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeSums writes SHA256SUMS (sha256sum's format, sorted by path) over
// every file the release lists.
func (r *release) writeSums() error {
	paths := append([]string{}, r.sums...)
	sort.Strings(paths)
	var b strings.Builder
	for _, rel := range paths {
		sum, err := fileSHA256(filepath.Join(r.Out, rel))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, filepath.ToSlash(rel))
	}
	return os.WriteFile(filepath.Join(r.Out, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// verifySums checks every line of dir/SHA256SUMS against the file it names
// and returns the files listed.
func verifySums(dir string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var listed []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, rel, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			return nil, fmt.Errorf("SHA256SUMS line %q", sc.Text())
		}
		got, err := fileSHA256(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, err
		}
		if got != sum {
			return nil, fmt.Errorf("%s: sha256 %s, SHA256SUMS says %s", rel, got, sum)
		}
		listed = append(listed, rel)
	}
	return listed, sc.Err()
}
