package main

import (
	"os"
	"path/filepath"
	"testing"
)

// `testbed wait` polls the pid file while `testbed up &` writes it; a file
// that exists but is still empty is "not written yet", not an error that
// ends the wait (CI of 7a19ba6 failed TestDemo on exactly that).
func TestReadPIDOfAFileStillBeingWritten(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, pidFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pid, err := readPID(dir, pidFile)
	if err != nil || pid != 0 {
		t.Fatalf("readPID of an empty file = %d, %v; want 0, nil", pid, err)
	}
}

func TestReadPIDRejectsGarbage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte("not-a-pid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPID(dir, pidFile); err == nil {
		t.Fatal("readPID accepted a pid file that is not a number")
	}
}

// The markers are replaced whole, so a reader never sees a torn file.
func TestWritePIDLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	if err := writePID(dir); err != nil {
		t.Fatal(err)
	}
	pid, err := readPID(dir, pidFile)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("readPID after writePID = %d, %v; want %d", pid, err, os.Getpid())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries after writePID, want only %s", len(entries), pidFile)
	}
}
