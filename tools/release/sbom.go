package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"runtime/debug"
	"time"
)

// CycloneDX 1.5 JSON, the part of it these SBOMs use.
type cdxBOM struct {
	BOMFormat    string          `json:"bomFormat"`
	SpecVersion  string          `json:"specVersion"`
	SerialNumber string          `json:"serialNumber"`
	Version      int             `json:"version"`
	Metadata     cdxMetadata     `json:"metadata"`
	Components   []cdxComponent  `json:"components"`
	Dependencies []cdxDependency `json:"dependencies"`
}

type cdxMetadata struct {
	Timestamp string       `json:"timestamp"`
	Tools     cdxTools     `json:"tools"`
	Component cdxComponent `json:"component"`
}

type cdxTools struct {
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Type       string         `json:"type"`
	BOMRef     string         `json:"bom-ref,omitempty"`
	Name       string         `json:"name"`
	Version    string         `json:"version,omitempty"`
	PURL       string         `json:"purl,omitempty"`
	Hashes     []cdxHash      `json:"hashes,omitempty"`
	Licenses   []cdxLicense   `json:"licenses,omitempty"`
	Properties []cdxProperty  `json:"properties,omitempty"`
	Components []cdxComponent `json:"components,omitempty"`
}

type cdxHash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

type cdxLicense struct {
	License struct {
		ID string `json:"id"`
	} `json:"license"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// sbomSubject is what an SBOM describes: a binary ("application") or an
// image ("container", with its manifest digest).
type sbomSubject struct {
	Type, Name, Digest, OS, Arch string
}

func goPURL(path, version string, qualifiers url.Values) string {
	p := "pkg:golang/" + path
	if version != "" {
		p += "@" + url.PathEscape(version)
	}
	if len(qualifiers) > 0 {
		p += "?" + qualifiers.Encode()
	}
	return p
}

func moduleComponent(m *debug.Module) cdxComponent {
	if m.Replace != nil {
		m = m.Replace
	}
	c := cdxComponent{Type: "library", Name: m.Path, Version: m.Version,
		PURL: goPURL(m.Path, m.Version, url.Values{"type": {"module"}})}
	c.BOMRef = c.PURL
	if m.Sum != "" {
		// go.sum's h1: hash of the module tree (not a file hash).
		c.Properties = []cdxProperty{{Name: "golang:module:sum", Value: m.Sum}}
	}
	return c
}

// binarySBOM reads the Go build information of the binary at path (the
// modules linked in, as `go version -m` prints them) and describes it as
// CycloneDX: the subject (the binary, or the image holding it), the binary
// with its SHA-256, and every module it was built from.
func binarySBOM(path, name, version string, subject sbomSubject, created time.Time) ([]byte, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("build info of %s: %w", path, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	q := url.Values{"type": {"module"}, "goos": {subject.OS}, "goarch": {subject.Arch}}
	app := cdxComponent{Type: "application", Name: name, Version: version,
		PURL:     goPURL(info.Main.Path, version, q),
		Hashes:   []cdxHash{{Alg: "SHA-256", Content: hex.EncodeToString(sum[:])}},
		Licenses: []cdxLicense{apache()},
		Properties: []cdxProperty{
			{Name: "golang:main:path", Value: info.Main.Path},
			{Name: "golang:go:version", Value: info.GoVersion},
		},
	}
	app.BOMRef = app.PURL
	for _, s := range info.Settings {
		app.Properties = append(app.Properties, cdxProperty{Name: "golang:build:" + s.Key, Value: s.Value})
	}
	var deps []string
	var libs []cdxComponent
	for _, m := range info.Deps {
		c := moduleComponent(m)
		libs = append(libs, c)
		deps = append(deps, c.BOMRef)
	}
	// The toolchain's standard library is linked in too.
	std := cdxComponent{Type: "library", Name: "stdlib", Version: info.GoVersion,
		PURL: goPURL("stdlib", info.GoVersion, nil)}
	std.BOMRef = std.PURL
	libs = append(libs, std)
	deps = append(deps, std.BOMRef)

	top := app
	comps := append([]cdxComponent{}, libs...)
	dependencies := []cdxDependency{{Ref: app.BOMRef, DependsOn: deps}}
	if subject.Type == "container" {
		top = cdxComponent{Type: "container", Name: subject.Name, Version: version,
			BOMRef: "pkg:oci/" + subject.Name + "@" + url.PathEscape(subject.Digest) + "?" + url.Values{"arch": {subject.Arch}, "os": {subject.OS}}.Encode(),
			Hashes: []cdxHash{{Alg: "SHA-256", Content: trimAlg(subject.Digest)}}, Licenses: []cdxLicense{apache()}}
		top.PURL = top.BOMRef
		comps = append([]cdxComponent{app}, comps...)
		dependencies = append([]cdxDependency{{Ref: top.BOMRef, DependsOn: []string{app.BOMRef}}}, dependencies...)
	}
	for _, l := range libs {
		dependencies = append(dependencies, cdxDependency{Ref: l.BOMRef, DependsOn: []string{}})
	}
	serial := sha256.Sum256(append([]byte(top.BOMRef+"\n"), sum[:]...))
	bom := cdxBOM{
		BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		SerialNumber: "urn:uuid:" + uuidOf(serial[:16]),
		Metadata: cdxMetadata{
			Timestamp: created.UTC().Format(time.RFC3339),
			Tools:     cdxTools{Components: []cdxComponent{{Type: "application", Name: "fleetmesh tools/release"}}},
			Component: top,
		},
		Components:   comps,
		Dependencies: dependencies,
	}
	return json.MarshalIndent(bom, "", "  ")
}

func apache() cdxLicense {
	var l cdxLicense
	l.License.ID = "Apache-2.0"
	return l
}

func trimAlg(d string) string {
	if len(d) > 7 && d[:7] == "sha256:" {
		return d[7:]
	}
	return d
}

// uuidOf formats 16 bytes as a version-4-shaped UUID (deterministic: the
// same binary gets the same serial number).
func uuidOf(b []byte) string {
	u := make([]byte, 16)
	copy(u, b)
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	h := hex.EncodeToString(u)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
