//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/fleet-operator/access"
	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/network"
	"github.com/ericdev/fleetmesh/shared/labels"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestAccessThroughKubectlFlags runs the plugin against a real
// kube-apiserver with a kubeconfig file and kubectl's flags: the recorded
// fleet-only world read with full rights; then --as a user who may read
// only in the fleet's namespace (impersonation really reaches the API
// server: the report says what that user could not read); --as a user with
// no rights fails; shell completion lists the namespace's fleets.
func TestAccessThroughKubectlFlags(t *testing.T) {
	scheme := access.Scheme()
	if err := rbacv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := authorizationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, scheme, "fleet-operator/config/crd/bases")
	ctx := context.Background()
	c := env.Client

	raw, err := os.ReadFile(state("fleet-only"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := access.ParseSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range rec.Namespaces {
		if err := c.Create(ctx, ns.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	f := rec.Fleet.DeepCopy()
	f.UID, f.ResourceVersion = "", ""
	f.Spec.Image = "registry.example/celld:1.0.0"
	f.Spec.Storage = &v1alpha1.Storage{Size: resource.MustParse("1Gi")}
	if err := c.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	np, err := network.NetworkPolicy(f, network.Params{OperatorNamespace: "fleet-system",
		OperatorPodLabels: map[string]string{labels.Name: "fleet-operator", labels.Instance: "fleet-operator"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	for _, p := range rec.Pods {
		p := p.DeepCopy()
		st := p.Status
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = st
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "access-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"celldfleets"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list"}},
	}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "access-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "team-a-viewer"}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitAllowed(t, c, "team-a-viewer", authorizationv1.ResourceAttributes{
		Verb: "get", Group: v1alpha1.GroupVersion.Group, Resource: "celldfleets", Namespace: f.Namespace})

	// A kubeconfig as an admin would have it; its context's namespace is
	// not the fleet's, so -n matters.
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "test"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	plugin := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		// --kubeconfig first: __complete completes the last argument.
		code := run(ctx, append([]string{"--kubeconfig", kubeconfig}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	t.Run("full rights", func(t *testing.T) {
		code, out, errOut := plugin("access", "vault", "-n", "team-a")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if strings.Contains(out, "Could not read") || !strings.Contains(out, "Istio: no Istio API on this cluster (fleet-only)") {
			t.Errorf("table:\n%s", out)
		}
		code, out, errOut = plugin("access", "vault", "-n", "team-a", "-o", "json", "--from", "team-a/web-1", "--to", "vault-0:8080")
		if code != exitOK {
			t.Fatalf("-o json --from/--to an allowed pair: exit %d: %s", code, errOut)
		}
		var r access.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Kind != access.Kind || len(r.Ingress) != 1 || !r.Ingress[0].Allowed {
			t.Errorf("-o json: %v\n%s", err, out)
		}
	})

	t.Run("--as a user who reads only the fleet's namespace", func(t *testing.T) {
		code, out, errOut := plugin("access", "vault", "-n", "team-a", "--as", "team-a-viewer")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		for _, u := range []string{"NetworkPolicy in fleet-system: forbidden", "Namespace team-a: forbidden", "Pod in fleet-system: forbidden"} {
			if !strings.Contains(out, "Could not read: "+u) {
				t.Errorf("the table does not say %q:\n%s", u, out)
			}
		}
		// The operator's rows depend on what it could not read.
		code, _, _ = plugin("access", "vault", "-n", "team-a", "--as", "team-a-viewer", "--from", "operator", "--to", "vault-0:8081")
		if code != exitError {
			t.Errorf("an unknown verdict asked about: exit %d, want %d", code, exitError)
		}
	})

	t.Run("--as a user with no rights", func(t *testing.T) {
		code, _, errOut := plugin("access", "vault", "-n", "team-a", "--as", "nobody")
		if code != exitError || !strings.Contains(errOut, "forbidden") {
			t.Errorf("exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("completion lists the namespace's fleets", func(t *testing.T) {
		code, out, errOut := plugin("__complete", "access", "-n", "team-a", "")
		if code != exitOK || !strings.HasPrefix(out, "vault\n") {
			t.Errorf("exit %d: %q %s", code, out, errOut)
		}
		_, out, _ = plugin("__complete", "access", "-n", "team-a", "--as", "nobody", "")
		if strings.Contains(out, "vault") {
			t.Errorf("--as nobody completed %q", out)
		}
	})
}
