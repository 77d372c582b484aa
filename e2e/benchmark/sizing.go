package benchmark

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
)

// The sizing table of docs/install.md sits between these markers; make
// bench rewrites it from the newest results, and TestInstallSizingIsCurrent
// fails when the committed table is not what the newest results give.
const (
	sizingStart = "<!-- sizing:start -->"
	sizingEnd   = "<!-- sizing:end -->"
)

// MemoryLimitShare is the part of the container's memory limit the
// operators set GOMEMLIMIT to (shared/manager); a limit "fits" a
// measured peak RSS when this part of it holds the peak.
const MemoryLimitShare = 0.9

// UpdateSizing rewrites the sizing block of the document at path (docs/install.md)
// from the newest result with fleets and the newest with mesh namespaces in dir.
func UpdateSizing(path, dir string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := SizedDoc(string(doc), dir)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// SizedDoc is doc with its sizing block generated from the newest results in dir.
func SizedDoc(doc, dir string) (string, error) {
	fleetFile, fleetRun, err := newestWith(dir, func(r *Run) bool { return len(okResults(r)) > 0 })
	if err != nil {
		return "", fmt.Errorf("fleets: %w", err)
	}
	meshFile, meshRun, err := newestWith(dir, func(r *Run) bool { return len(okMesh(r)) > 0 })
	if err != nil {
		return "", fmt.Errorf("mesh namespaces: %w", err)
	}
	block := sizingBlock(fleetRun, resultBase(fleetFile), meshRun, resultBase(meshFile))
	return replaceBetween(doc, sizingStart, sizingEnd, block)
}

func okResults(r *Run) []Result {
	var out []Result
	for _, x := range r.Results {
		if x.Error == "" && x.N > 0 && x.PeakRSSMiB > 0 {
			out = append(out, x)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].N < out[j].N })
	return out
}

func okMesh(r *Run) []MeshResult {
	var out []MeshResult
	for _, m := range r.Mesh {
		if m.Error == "" && m.Namespaces > 0 && m.PeakRSSMiB > 0 {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Namespaces < out[j].Namespaces })
	return out
}

// fittingLimit is the smallest memory limit, in steps of 64Mi, whose
// MemoryLimitShare holds peakMiB.
func fittingLimit(peakMiB float64) string {
	mib := int(math.Ceil(peakMiB/MemoryLimitShare/64)) * 64
	if mib%1024 == 0 {
		return fmt.Sprintf("%dGi", mib/1024)
	}
	return fmt.Sprintf("%dMi", mib)
}

// cores is the CPU a phase used on average, in cores.
func cores(p Phase) float64 {
	if p.Seconds <= 0 {
		return 0
	}
	return p.CPUSeconds / p.Seconds
}

// sizingBlock is the sizing table: per fleet count of the fleet run and
// per namespace count of the mesh run (the largest of repeated runs), the
// peak RSS, per 100 fleets or namespaces, the memory limit that fits it,
// and the CPU while converging and once settled.
func sizingBlock(fleets *Run, fleetBase string, mesh *Run, meshBase string) string {
	var s strings.Builder
	src := fmt.Sprintf("[%s.md](../%s.md) (commit `%.7s`, %s)", fleetBase, fleetBase, fleets.Commit, fleets.Started)
	if meshBase != fleetBase {
		src += fmt.Sprintf(" and [%s.md](../%s.md) (commit `%.7s`, %s)", meshBase, meshBase, mesh.Commit, mesh.Started)
	}
	fmt.Fprintf(&s, "Generated from %s by `make bench`; `FLEETMESH_UPDATE_SIZING=1 go test ./benchmark -run TestInstallSizingIsCurrent` "+
		"in `e2e` rewrites it from the newest results. Do not edit by hand.\n\n", src)
	s.WriteString("| fleet-operator: fleets | peak RSS MiB | MiB per 100 fleets | memory limit that fits | CPU while converging, cores | CPU settled, millicores | settled millicores per 100 fleets |\n")
	s.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, x := range okResults(fleets) {
		steady := cores(x.Steady) * 1000
		fmt.Fprintf(&s, "| %d | %.1f | %.1f | `%s` | %.2f | %.0f | %.1f |\n", x.N, x.PeakRSSMiB, x.PeakRSSMiB/float64(x.N)*100,
			fittingLimit(x.PeakRSSMiB), cores(x.Create), steady, steady/float64(x.N)*100)
	}
	s.WriteString("\n| mesh-operator: namespaces | peak RSS MiB | MiB per 100 namespaces | memory limit that fits | CPU while enrolling, cores | CPU settled, millicores | runs |\n")
	s.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	ms := okMesh(mesh)
	for i := 0; i < len(ms); {
		j, peak, enroll, settled := i, 0.0, 0.0, 0.0
		for ; j < len(ms) && ms[j].Namespaces == ms[i].Namespaces; j++ {
			peak, enroll, settled = max(peak, ms[j].PeakRSSMiB), max(enroll, cores(ms[j].Enroll)), max(settled, cores(ms[j].Settle)*1000)
		}
		n := ms[i].Namespaces
		fmt.Fprintf(&s, "| %d | %.1f | %.1f | `%s` | %.2f | %.0f | %d |\n", n, peak, peak/float64(n)*100, fittingLimit(peak), enroll, settled, j-i)
		i = j
	}
	return s.String()
}

// replaceBetween puts block between the one pair of markers in doc.
func replaceBetween(doc, start, end, block string) (string, error) {
	if strings.Count(doc, start) != 1 || strings.Count(doc, end) != 1 {
		return "", fmt.Errorf("want exactly one %s and one %s", start, end)
	}
	i, j := strings.Index(doc, start), strings.Index(doc, end)
	if j < i {
		return "", fmt.Errorf("%s comes before %s", end, start)
	}
	return doc[:i+len(start)] + "\n" + strings.TrimSpace(block) + "\n" + doc[j:], nil
}
