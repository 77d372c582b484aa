package charts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestReleaseSignsEveryPublishedFile plays the release workflow's shell
// steps for each operator's tag in a scratch workspace, with stand-ins for
// the tools that would build, push or sign (go, helm, cosign) and the real
// tar and sha256sum, then looks at exactly the files the GitHub release step
// would publish: every one must have a Sigstore bundle published next to it,
// made by `cosign sign-blob --yes` (keyless: no --key) of its final content;
// the checksums file must list every other published file with its sha256;
// the tools must be there for each OS/arch, and mesh-license in the customer
// build (no licensevendor tag). Steps that use actions are not run; a
// pushing action's digest output is given a fixed value.
func TestReleaseSignsEveryPublishedFile(t *testing.T) {
	for _, tc := range []struct{ operator, tool string }{
		{"fleet-operator", "kubectl-celld"},
		{"mesh-operator", "mesh-license"},
	} {
		t.Run(tc.operator, func(t *testing.T) {
			const version = "1.2.3"
			r := playRelease(t, tc.operator+"/v"+version)
			var want []string
			for _, osArch := range []string{"linux_amd64", "linux_arm64", "darwin_amd64", "darwin_arm64"} {
				want = append(want, fmt.Sprintf("%s_%s_%s.tar.gz", tc.tool, version, osArch))
			}
			want = append(want, tc.operator+"-"+version+".tgz", tc.operator+"_"+version+"_checksums.txt")
			if tc.tool == "kubectl-celld" {
				// The krew manifest, rendered from the archives' checksums.
				want = append(want, "celld.yaml")
				assert.Len(t, r.calls("go run ./krew/render -version "+version+" -checksums ../dist/"+tc.operator+"_"+version+"_checksums.txt"), 1,
					"the krew manifest is rendered from the release's checksums")
			}
			var files, bundles []string
			for _, f := range r.published {
				if strings.HasSuffix(f, ".sigstore.json") {
					bundles = append(bundles, f)
				} else {
					files = append(files, f)
				}
			}
			assert.ElementsMatch(t, want, files, "the files the release publishes")

			for _, f := range files {
				b, ok := r.content[f+".sigstore.json"]
				if !assert.True(t, ok, "%s is published without its signature bundle %s.sigstore.json", f, f) {
					continue
				}
				var signed struct{ File, SHA256 string }
				require.NoError(t, json.Unmarshal(b, &signed), "%s.sigstore.json was not written by cosign sign-blob", f)
				assert.Equal(t, sha256Hex(r.content[f]), signed.SHA256, "%s changed after it was signed", f)
			}
			for _, b := range bundles {
				assert.Contains(t, files, strings.TrimSuffix(b, ".sigstore.json"), "bundle %s signs nothing published", b)
			}
			for _, call := range r.calls("cosign sign-blob") {
				assert.Contains(t, call, " --yes", "keyless signing in CI: %s", call)
				assert.NotContains(t, call, "--key", "keyless signing, no long-lived key: %s", call)
			}

			sums := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(r.content[tc.operator+"_"+version+"_checksums.txt"])), "\n") {
				if f := strings.Fields(line); len(f) == 2 {
					sums[strings.TrimPrefix(f[1], "*")] = f[0]
				}
			}
			for _, f := range files {
				if !strings.HasSuffix(f, "_checksums.txt") {
					assert.Equal(t, sha256Hex(r.content[f]), sums[f], "checksums file entry for %s", f)
				}
			}

			builds := 0
			for _, call := range r.calls("go build") {
				if strings.HasSuffix(call, "./cmd/"+tc.tool) {
					builds++
					assert.NotContains(t, call, "licensevendor", "released binaries are the customer build")
					assert.Contains(t, call, "-X github.com/ericdev/fleetmesh/shared/version.Version="+version)
				}
			}
			assert.Equal(t, 4, builds, "%s built once per OS/arch", tc.tool)
		})
	}
}

type playedRelease struct {
	published []string          // base names of the files the release step would upload
	content   map[string][]byte // their content, by base name
	log       string            // the stand-ins' calls, one per line
}

func (r playedRelease) calls(prefix string) []string {
	var out []string
	for _, l := range strings.Split(r.log, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// releaseStubs stand in for what the release job would run against the
// network or a builder. Each logs its call to $STUB_LOG.
var releaseStubs = map[string]string{
	// go build writes a small file at -o naming its target; other go
	// commands (the tests) succeed.
	"go": `echo "go $*" >> "$STUB_LOG"
if [ "$1" = build ]; then
  out=; prev=
  for a in "$@"; do [ "$prev" = -o ] && out=$a; prev=$a; done
  [ -n "$out" ] || { echo "stub go build: no -o" >&2; exit 1; }
  mkdir -p "$(dirname "$out")"
  printf 'GOOS=%s GOARCH=%s %s\n' "$GOOS" "$GOARCH" "$*" > "$out"
fi`,
	// cosign sign-blob --bundle B FILE writes B recording FILE's sha256.
	"cosign": `echo "cosign $*" >> "$STUB_LOG"
if [ "$1" = sign-blob ]; then
  bundle=; prev=; file=
  for a in "$@"; do [ "$prev" = --bundle ] && bundle=$a; prev=$a; file=$a; done
  [ -f "$file" ] || { echo "stub cosign: no file $file" >&2; exit 1; }
  [ -n "$bundle" ] || { echo "stub cosign: no --bundle" >&2; exit 1; }
  printf '{"file":"%s","sha256":"%s"}\n' "$file" "$(sha256sum "$file" | cut -d' ' -f1)" > "$bundle"
fi`,
}

// releaseWorkspaceStubs are the repository files the steps call by path.
var releaseWorkspaceStubs = map[string]string{
	"hack/build-tools.sh": `echo "build-tools $*" >> "$STUB_LOG"`,
	// helm package CHART --version V ... -d DIR writes DIR/NAME-V.tgz; push
	// reports a digest as helm does.
	"bin/helm": `echo "helm $*" >> "$STUB_LOG"
case "$1" in
  package)
    chart=$2; version=; dir=.; prev=
    for a in "$@"; do [ "$prev" = --version ] && version=$a; [ "$prev" = -d ] && dir=$a; prev=$a; done
    mkdir -p "$dir"; echo "chart $chart $version" > "$dir/$(basename "$chart")-$version.tgz" ;;
  push) echo "Pushed: $3"; echo "Digest: sha256:$(printf '%064d' 1)" ;;
  registry) cat > /dev/null ;;
esac`,
}

func playRelease(t *testing.T, tag string) playedRelease {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), ".github", "workflows", "release.yaml"))
	require.NoError(t, err)
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				workflowStep
				If               string `json:"if"`
				WorkingDirectory string `json:"working-directory"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &wf))
	require.Len(t, wf.Jobs, 1, "one release job")

	tmp := t.TempDir()
	ws, stubs := filepath.Join(tmp, "workspace"), filepath.Join(tmp, "stubs")
	stubLog := filepath.Join(tmp, "stub.log")
	for dir, files := range map[string]map[string]string{stubs: releaseStubs, ws: releaseWorkspaceStubs} {
		for name, body := range files {
			p := filepath.Join(dir, name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte("#!/usr/bin/env bash\nset -e\n"+body+"\n"), 0o755))
		}
	}
	for _, d := range []string{"fleet-operator", "mesh-operator", "charts"} {
		require.NoError(t, os.MkdirAll(filepath.Join(ws, d), 0o755))
	}

	outputs := map[string]map[string]string{}
	expr := regexp.MustCompile(`\$\{\{\s*(.*?)\s*\}\}`)
	eval := func(e string) string {
		switch {
		case e == "github.actor":
			return "release-bot"
		case e == "secrets.GITHUB_TOKEN":
			return "token"
		case strings.HasPrefix(e, "steps."):
			parts := strings.Split(e, ".")
			require.Len(t, parts, 4, "expression %s", e)
			require.Equal(t, "outputs", parts[2], "expression %s", e)
			v, ok := outputs[parts[1]][parts[3]]
			require.True(t, ok, "expression %s: no such output (yet)", e)
			return v
		}
		t.Fatalf("the release play does not know the expression %q: teach it", e)
		return ""
	}
	subst := func(s string) string {
		return expr.ReplaceAllStringFunc(s, func(m string) string { return eval(expr.FindStringSubmatch(m)[1]) })
	}
	cond := regexp.MustCompile(`^\s*([a-z][a-zA-Z0-9_.-]*)\s*(==|!=)\s*'([^']*)'\s*$`)
	var uploads []string
	for _, job := range wf.Jobs {
		for i, s := range job.Steps {
			if s.If != "" {
				m := cond.FindStringSubmatch(s.If)
				require.NotNil(t, m, "step %d: the release play reads only `EXPR == 'value'` conditions, not %q", i, s.If)
				if (eval(m[1]) == m[3]) != (m[2] == "==") {
					continue
				}
			}
			if s.Uses != "" {
				if strings.HasPrefix(s.Uses, "softprops/action-gh-release@") {
					for _, g := range strings.Split(fmt.Sprint(s.With["files"]), "\n") {
						if g = strings.TrimSpace(g); g != "" {
							uploads = append(uploads, g)
						}
					}
				}
				if s.ID != "" { // e.g. the image push: its digest output
					outputs[s.ID] = map[string]string{"digest": "sha256:" + strings.Repeat("2", 64)}
				}
				continue
			}
			outFile := filepath.Join(tmp, fmt.Sprintf("output-%d", i))
			script := filepath.Join(tmp, fmt.Sprintf("step-%d.sh", i))
			require.NoError(t, os.WriteFile(script, []byte(subst(s.Run)), 0o644))
			dir := filepath.Join(ws, s.WorkingDirectory)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", script)
			cmd.Dir = dir
			cmd.Env = []string{
				"PATH=" + stubs + ":/usr/bin:/bin", "HOME=" + tmp, "STUB_LOG=" + stubLog,
				"GITHUB_REF=refs/tags/" + tag, "GITHUB_REPOSITORY_OWNER=EricDev", "GITHUB_OUTPUT=" + outFile,
			}
			for k, v := range s.Env {
				cmd.Env = append(cmd.Env, k+"="+subst(v))
			}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "step %d %q:\n%s", i, s.Name, out)
			if s.ID != "" {
				outputs[s.ID] = map[string]string{}
				if b, err := os.ReadFile(outFile); err == nil {
					for _, line := range strings.Split(string(b), "\n") {
						if k, v, ok := strings.Cut(line, "="); ok {
							outputs[s.ID][k] = v
						}
					}
				}
			}
		}
	}
	require.NotEmpty(t, uploads, "the release job publishes files")
	r := playedRelease{content: map[string][]byte{}}
	for _, g := range uploads {
		matches, err := filepath.Glob(filepath.Join(ws, g))
		require.NoError(t, err)
		for _, m := range matches {
			b, err := os.ReadFile(m)
			require.NoError(t, err)
			name := filepath.Base(m)
			if _, dup := r.content[name]; !dup {
				r.published = append(r.published, name)
			}
			r.content[name] = b
		}
	}
	sort.Strings(r.published)
	if b, err := os.ReadFile(stubLog); err == nil {
		r.log = string(b)
	}
	return r
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
