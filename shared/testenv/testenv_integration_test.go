//go:build integration

package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// fatalRecorder is a TB whose Fatalf ends the goroutine, as t.Fatalf does,
// and records the message instead of failing the test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestStartStopsWhatItStartedWhenCRDsFail: a CRD the API server refuses
// (here a CEL rule that does not compile) fails Start, and etcd and
// kube-apiserver do not outlive it. envtest leaves them running; on a
// shared machine each such failure left two orphans behind.
func TestStartStopsWhatItStartedWhenCRDsFail(t *testing.T) {
	dir := t.TempDir()
	crd := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-validations:
        - rule: "self.spec.(("
`
	if err := os.WriteFile(filepath.Join(dir, "widgets.yaml"), []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec, clientgoscheme.Scheme, dir)
	}()
	<-done
	if !strings.Contains(rec.fatal, "install CRDs") {
		t.Fatalf("Start did not fail on the CRD: %q", rec.fatal)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := children("etcd", "kube-apiserver")
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running after the failed Start: %v", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// children are this process's live child processes with one of names.
func children(names ...string) []string {
	entries, _ := os.ReadDir("/proc")
	me := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(s[end+1:])
		if len(fields) < 2 || fields[1] != me || fields[0] == "Z" {
			continue
		}
		for _, n := range names {
			if comm := s[open+1 : end]; strings.HasPrefix(n, comm) {
				out = append(out, e.Name()+" "+comm)
			}
		}
	}
	return out
}
