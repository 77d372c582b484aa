package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/ericdev/fleetmesh/shared/golden"
	"github.com/ericdev/fleetmesh/shared/version"
)

var allStates = []string{"fleet-only", "no-mesh", "routing", "sidecar-meshed", "sidecar-mixed-roll", "ambient-namespace-isolation", "ambient-namespace-permissive", "ambient-strict-isolation"}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), args, &out, &errOut); code != exitOK {
		t.Fatalf("%q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out.String(), errOut.String())
	}
	return out.String()
}

// Help, version and completion are not errors.
func TestHelpVersionCompletionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"access", "--help"}, {"help", "access"}, {"version"}, {"completion", "bash"}, {"completion", "zsh"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out := runOK(t, args...)
			if out == "" {
				t.Errorf("nothing printed")
			}
			if args[0] == "version" && !strings.Contains(out, version.Version) {
				t.Errorf("version printed %q, want it to name %q", out, version.Version)
			}
		})
	}
	// Usage errors still exit 2.
	for _, args := range [][]string{{"nonsense"}, {"access", "--no-such-flag", "vault"}, {"access", "a", "b", "--snapshot", state("routing")}, {"access", "vault", "-o", "xml", "--snapshot", state("routing")}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != exitError {
			t.Errorf("%q: exit %d, want %d\n%s", args, code, exitError, errOut.String())
		}
	}
}

// The default table fits a 120-column terminal for every recorded state;
// -o wide carries the long rule text.
func TestDefaultTableFits120Columns(t *testing.T) {
	for _, name := range allStates {
		t.Run(name, func(t *testing.T) {
			out := runOK(t, "access", "vault", "--snapshot", state(name))
			for i, line := range strings.Split(out, "\n") {
				if n := utf8.RuneCountInString(line); n > 120 {
					t.Errorf("line %d is %d columns:\n%s", i+1, n, line)
				}
			}
			wide := runOK(t, "access", "vault", "--snapshot", state(name), "-o", "wide")
			if len(wide) <= len(out) {
				t.Errorf("-o wide (%d bytes) is not wider than the default (%d bytes)", len(wide), len(out))
			}
		})
	}
}

// Golden files for every output format the plugin prints.
func TestOutputGolden(t *testing.T) {
	st := state("ambient-namespace-isolation")
	golden.AssertFile(t, "ambient-namespace-isolation.txt", []byte(runOK(t, "access", "vault", "--snapshot", st)))
	golden.AssertFile(t, "ambient-namespace-isolation.wide.txt", []byte(runOK(t, "access", "vault", "--snapshot", st, "-o", "wide")))
	pair := []string{"access", "vault", "--snapshot", st, "--from", "team-a/web-1", "--to", "vault-0"}
	golden.AssertFile(t, "ambient-namespace-isolation.web-1.json", []byte(runOK(t, append(pair, "-o", "json")...)))
	golden.AssertFile(t, "ambient-namespace-isolation.web-1.yaml", []byte(runOK(t, append(pair, "-o", "yaml")...)))
	golden.AssertFile(t, "routing.txt", []byte(runOK(t, "access", "vault", "--snapshot", state("routing"))))
	// -o table is the default's old name.
	if got, want := runOK(t, "access", "vault", "--snapshot", st, "-o", "table"), runOK(t, "access", "vault", "--snapshot", st); got != want {
		t.Errorf("-o table differs from the default")
	}
}

// kubectl's connection flags reach the API server: --context picks the
// cluster, --as impersonates, --token authenticates, --request-timeout
// bounds each request.
func TestKubeFlagsReachTheAPIServer(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Clone(context.Background()))
		mu.Unlock()
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
current-context: unreachable
clusters:
- name: unreachable
  cluster: {server: "https://127.0.0.1:1"}
- name: fake
  cluster: {server: "`+srv.URL+`", insecure-skip-tls-verify: true}
users:
- name: nobody
  user: {}
contexts:
- name: unreachable
  context: {cluster: unreachable, user: nobody}
- name: fake
  context: {cluster: fake, user: nobody, namespace: team-a}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"access", "vault", "--kubeconfig", kubeconfig, "--context", "fake", "--as", "alice", "--as-group", "team-a", "--token", "s3cret", "--request-timeout", "7s"}, &out, &errOut)
	if code != exitError {
		t.Errorf("exit %d, want %d (the fake server knows no fleet)", code, exitError)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatalf("no request reached the --context cluster; stderr:\n%s", errOut.String())
	}
	for _, r := range seen {
		if got := r.Header.Get("Impersonate-User"); got != "alice" {
			t.Errorf("%s: Impersonate-User %q, want alice", r.URL, got)
		}
		if got := r.Header.Values("Impersonate-Group"); len(got) != 1 || got[0] != "team-a" {
			t.Errorf("%s: Impersonate-Group %q, want [team-a]", r.URL, got)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer s3cret" {
			t.Errorf("%s: Authorization %q", r.URL, got)
		}
		if got := r.URL.Query().Get("timeout"); got != "7s" {
			t.Errorf("%s: timeout %q, want 7s", r.URL, got)
		}
	}
}
