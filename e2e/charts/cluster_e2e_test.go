//go:build e2e

package charts

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/local"
)

// logWriter forwards the provider's start-up lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// upAPIServer starts an API-server-only local control plane (etcd and
// kube-apiserver on 127.0.0.1) with the given CRD paths and no third-party
// CRDs, and stops it when the test ends.
func upAPIServer(t *testing.T, crdPaths ...string) *cluster.Cluster {
	t.Helper()
	dir, err := cluster.BinDir()
	require.NoError(t, err)
	require.NoError(t, cluster.RequireBinaries(dir, "etcd", "kube-apiserver", "helm"))
	p := local.New(local.Options{Nodes: 0, NoDefaultCRDs: true, CRDPaths: crdPaths, Log: logWriter{t}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	started := time.Now()
	c, err := p.Up(ctx)
	require.NoError(t, err, "starting the local control plane")
	t.Logf("control plane up in %s", time.Since(started).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := p.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	return c
}

// operatorCRDPaths are the CRDs controller-gen generates for both operators.
func operatorCRDPaths(t *testing.T) []string {
	root := repoRoot(t)
	return []string{
		filepath.Join(root, "fleet-operator", "config", "crd", "bases"),
		filepath.Join(root, "mesh-operator", "config", "crd", "bases"),
	}
}

func clientset(t *testing.T, c *cluster.Cluster) kubernetes.Interface {
	t.Helper()
	cs, err := c.Clientset()
	require.NoError(t, err)
	return cs
}

func createNamespaces(t *testing.T, cs kubernetes.Interface, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := cs.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// applyYAML server-side applies a rendered manifest (CRDs first, then the
// rest), so the real API server validates every object.
func applyYAML(t *testing.T, c *cluster.Cluster, yaml string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return cluster.InstallManifests(ctx, c.REST, path)
}

// access is one question to the API server's RBAC authorizer about a
// ServiceAccount.
type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += "/" + a.name
	}
	if a.namespace != "" {
		return s + " in " + a.namespace
	}
	return s + " cluster-wide"
}

// allowed asks the API server (SubjectAccessReview) whether the
// ServiceAccount namespace/name may do a.
func allowed(t *testing.T, cs kubernetes.Interface, saNamespace, sa string, a access) bool {
	t.Helper()
	review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:" + saNamespace + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: resourceOnly(a.resource), Subresource: subresource(a.resource),
				Namespace: a.namespace, Name: a.name,
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return review.Status.Allowed
}

func resourceOnly(r string) string { res, _, _ := strings.Cut(r, "/"); return res }
func subresource(r string) string  { _, sub, _ := strings.Cut(r, "/"); return sub }

// assertAccess checks grants and denials of one ServiceAccount. RBAC is
// served from an informer cache, so it first waits for the first grant.
func assertAccess(t *testing.T, cs kubernetes.Interface, saNamespace, sa string, grants, denials []access) {
	t.Helper()
	require.NotEmpty(t, grants)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 15*time.Second, true,
		func(context.Context) (bool, error) { return allowed(t, cs, saNamespace, sa, grants[0]), nil })
	require.NoError(t, err, "%s/%s never got %s", saNamespace, sa, grants[0])
	for _, a := range grants {
		if !allowed(t, cs, saNamespace, sa, a) {
			t.Errorf("%s/%s may not %s, but must", saNamespace, sa, a)
		}
	}
	for _, a := range denials {
		if allowed(t, cs, saNamespace, sa, a) {
			t.Errorf("%s/%s may %s, but must not", saNamespace, sa, a)
		}
	}
}
