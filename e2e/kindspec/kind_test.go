//go:build e2e && kind

// Package kindspec is the kind tier (GitHub Actions, `make e2e-kind`): a
// real cluster with a NetworkPolicy-enforcing CNI (kindnet), the operator
// images and the celld stand-in image loaded, both charts installed with
// helm. It checks what only a real data plane can show: members become
// Ready in real Pods with /state read over the Pod network, and the fleet
// NetworkPolicy is enforced. It cannot run on the development sandbox (no
// Docker engine).
package kindspec

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ericdev/fleetmesh/e2e/cluster"
	"github.com/ericdev/fleetmesh/e2e/cluster/kind"
	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

func image(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

func TestKindFleet(t *testing.T) {
	if os.Getenv("FLEETMESH_E2E_KIND") != "1" {
		t.Skip("set FLEETMESH_E2E_KIND=1 (the e2e-kind workflow does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	require.NoError(t, kind.DockerAvailable(ctx), "the kind tier needs a Docker engine")
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	crds, err := cluster.DefaultCRDPaths(ctx)
	require.NoError(t, err)
	fleetImage := image("E2E_FLEET_IMAGE", "fleet-operator:e2e")
	meshImage := image("E2E_MESH_IMAGE", "mesh-operator:e2e")
	standinImage := image("E2E_STANDIN_IMAGE", "celld-standin:e2e")
	repoTag := func(img string) []string {
		i := len(img) - 1
		for i >= 0 && img[i] != ':' {
			i--
		}
		return []string{"image.repository=" + img[:i], "image.tag=" + img[i+1:], "image.pullPolicy=Never"}
	}
	p := kind.New(kind.Options{
		Name: "fleetmesh-e2e", Workers: 1,
		Images:   []string{fleetImage, meshImage, standinImage},
		CRDPaths: crds,
		Charts: []cluster.HelmRelease{
			{Name: "fleet-operator", Namespace: "fleet-system", Chart: filepath.Join(root, "charts/fleet-operator"), Wait: true, Timeout: 5 * time.Minute,
				Set: append(repoTag(fleetImage), "networkPolicyEnforced=true")},
			{Name: "mesh-operator", Namespace: "mesh-system", Chart: filepath.Join(root, "charts/mesh-operator"), Wait: true, Timeout: 5 * time.Minute,
				Set: append(repoTag(meshImage), "sail.install=false")},
		},
	})
	c, err := p.Up(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Down(context.Background()) })

	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, fleetv1.AddToScheme(scheme))
	k8s, err := client.New(c.REST, client.Options{Scheme: scheme})
	require.NoError(t, err)

	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleets"}}))
	f := &fleetv1.CelldFleet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleets", Name: "kind-fleet"},
		Spec: fleetv1.CelldFleetSpec{
			Replicas: ptr.To[int32](3), Image: standinImage, ImagePullPolicy: corev1.PullNever,
			Storage: &fleetv1.Storage{Size: resource.MustParse("64Mi")},
		},
	}
	require.NoError(t, k8s.Create(ctx, f))
	require.Eventually(t, func() bool {
		got := &fleetv1.CelldFleet{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(f), got) != nil {
			return false
		}
		if !meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") {
			return false
		}
		for _, m := range got.Status.Members {
			if m.State == nil || !m.State.Reachable || !m.State.Healthy {
				return false
			}
		}
		return len(got.Status.Members) == 3
	}, 10*time.Minute, 5*time.Second, "the fleet becomes Ready with /state read over the Pod network")

	// The NetworkPolicy is enforced by kindnet: a labelled client reaches the
	// application port, an unlabelled one does not.
	url := "http://kind-fleet.fleets.svc:8080/"
	require.True(t, probe(ctx, t, k8s, "client", map[string]string{"celld.eric.dev/client-of": "kind-fleet"}, standinImage, url), "labelled client")
	require.False(t, probe(ctx, t, k8s, "stranger", nil, standinImage, url), "unlabelled Pod must be refused")
}

// probe runs the stand-in image as a one-shot client Job and reports whether it succeeded.
func probe(ctx context.Context, t *testing.T, k8s client.Client, name string, podLabels map[string]string, img, url string) bool {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleets", Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "probe", Image: img, ImagePullPolicy: corev1.PullNever,
						Args: []string{"--probe", url}}},
				},
			},
		},
	}
	require.NoError(t, k8s.Create(ctx, job))
	var done *batchv1.Job
	require.Eventually(t, func() bool {
		j := &batchv1.Job{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(job), j) != nil {
			return false
		}
		done = j
		return j.Status.Succeeded > 0 || j.Status.Failed > 0
	}, 3*time.Minute, 2*time.Second)
	return done.Status.Succeeded > 0
}
