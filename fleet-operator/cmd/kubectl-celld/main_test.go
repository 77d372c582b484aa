package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ericdev/fleetmesh/fleet-operator/access"
)

func state(name string) string { return "../../access/testdata/states/" + name + ".golden.yaml" }

func TestExitStatus(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"allowed pair", []string{"access", "vault", "--snapshot", state("ambient-namespace-isolation"), "--from", "team-a/web-1", "--to", "vault-0:8080"}, exitOK},
		{"denied pair", []string{"access", "--snapshot", state("ambient-namespace-isolation"), "vault", "--from", "team-a/web-1", "--to", "vault-0:8081"}, exitDenied},
		{"isolation keeps a lookalike out", []string{"access", "vault", "--snapshot", state("ambient-namespace-isolation"), "--from", "shop/shop-1", "--to", "vault-1:8080"}, exitDenied},
		{"nothing outside the fleet reaches 8081", []string{"access", "vault", "--snapshot", state("ambient-namespace-isolation"), "--only", "8081=member,operator,kubelet-probe"}, exitOK},
		{"clients reach 8080", []string{"access", "vault", "--snapshot", state("fleet-only"), "--only", "8080=member"}, exitDenied},
		{"a class as --from", []string{"access", "vault", "--snapshot", state("routing"), "--from", "routing-source", "--to", ":8080"}, exitOK},
		{"unknown class", []string{"access", "vault", "--snapshot", state("routing"), "--only", "8080=nobody"}, exitError},
		{"not a member", []string{"access", "vault", "--snapshot", state("routing"), "--to", "web-1:8080"}, exitError},
		{"no fleet named", []string{"access", "--snapshot", state("routing")}, exitError},
		{"wrong fleet", []string{"access", "orders", "--snapshot", state("routing")}, exitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := run(context.Background(), tt.args, &out, &errOut); got != tt.want {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", got, tt.want, out.String(), errOut.String())
			}
		})
	}
}

func TestJSONIsTheReport(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"access", "vault", "-o", "json", "--snapshot", state("no-mesh"), "--to", "vault-0"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var r access.Report
	dec := json.NewDecoder(strings.NewReader(out.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.SchemaVersion != access.SchemaVersion || len(r.Ingress) == 0 || len(r.Egress) == 0 {
		t.Fatalf("report %+v", r)
	}
	for _, e := range r.Ingress {
		if e.Member != "vault-0" {
			t.Errorf("--to vault-0 kept a row for %s", e.Member)
		}
	}
}

// The schema promises arrays: a filter that keeps no egress row still
// prints an empty list, never null.
func TestJSONListsAreNeverNull(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"access", "vault", "-o", "json", "--snapshot", state("no-mesh"), "--from", "team-a/web-1", "--to", "vault-0:8080"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if strings.Contains(out.String(), "null") {
		t.Errorf("null in the JSON:\n%s", out.String())
	}
}
