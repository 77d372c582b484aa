// Package krew renders kubectl-celld's krew plugin manifest (celld.yaml)
// for a release from the release's checksums file.
package krew

import (
	"bytes"
	_ "embed"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strings"
	"text/template"
)

//go:embed celld.yaml
var manifestTemplate string

// Platforms are the OS/arch pairs a release builds kubectl-celld for (the
// release workflow's matrix).
var Platforms = []Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}, {OS: "darwin", Arch: "amd64"}, {OS: "darwin", Arch: "arm64"}}

// Platform is one archive of the plugin.
type Platform struct {
	OS, Arch string
	// Archive is the release file's name, SHA256 its checksum (filled in
	// by Manifest).
	Archive, SHA256 string
}

// Archive is the release file of the plugin for os/arch.
func Archive(version, os, arch string) string {
	return fmt.Sprintf("kubectl-celld_%s_%s_%s.tar.gz", version, os, arch)
}

var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// Manifest renders the krew manifest of release version (X.Y.Z, no "v")
// from checksums, the release's checksums file as sha256sum writes it
// ("HEX  FILE" per line; other files' lines are ignored). Every platform's
// archive must be listed.
func Manifest(version string, checksums []byte) ([]byte, error) {
	if !semver.MatchString(version) {
		return nil, fmt.Errorf("version %q: want X.Y.Z", version)
	}
	sums, err := ParseChecksums(checksums)
	if err != nil {
		return nil, err
	}
	data := struct {
		Version   string
		Platforms []Platform
	}{Version: version}
	for _, p := range Platforms {
		p.Archive = Archive(version, p.OS, p.Arch)
		sum, err := archiveSum(sums, p.Archive)
		if err != nil {
			return nil, err
		}
		p.SHA256 = sum
		data.Platforms = append(data.Platforms, p)
	}
	tmpl, err := template.New("celld.yaml").Option("missingkey=error").Parse(manifestTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, data); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// archiveSum is the sum of the file named archive, listed at the top or
// under a directory (the dry run's one SHA256SUMS over its output tree); a
// release uploads it by that name, so two different files of it are refused.
func archiveSum(sums map[string]string, archive string) (string, error) {
	found := ""
	for file, sum := range sums {
		if path.Base(file) != archive {
			continue
		}
		if found != "" && found != sum {
			return "", fmt.Errorf("the checksums list two different %s", archive)
		}
		found = sum
	}
	if found == "" {
		return "", fmt.Errorf("the checksums list no %s", archive)
	}
	return found, nil
}

// ParseChecksums reads sha256sum output: file name (as listed, directories
// included) to lower-case hex sum.
func ParseChecksums(raw []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		sum, file, ok := strings.Cut(line, " ")
		// sha256sum marks binary mode with '*' before the name.
		file = strings.TrimPrefix(strings.TrimSpace(file), "*")
		if b, err := hex.DecodeString(sum); !ok || err != nil || len(b) != 32 || file == "" {
			return nil, fmt.Errorf("checksums line %d: want \"SHA256  FILE\", got %q", i+1, line)
		}
		if prev, dup := out[file]; dup && prev != strings.ToLower(sum) {
			return nil, fmt.Errorf("checksums: %s listed twice with different sums", file)
		}
		out[file] = strings.ToLower(sum)
	}
	return out, nil
}
