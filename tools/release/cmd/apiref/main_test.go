package main

import (
	"os"
	"testing"
)

// TestReferenceIsCurrent: docs/api-reference.md is what the CRDs generate
// (after an API change: make manifests api-reference, and commit).
func TestReferenceIsCurrent(t *testing.T) {
	want, err := render("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../../docs/api-reference.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Error("docs/api-reference.md is stale: run make api-reference and commit it")
	}
}
