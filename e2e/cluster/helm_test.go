package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHelmArgs(t *testing.T) {
	args := HelmArgs("/tmp/kc", HelmRelease{
		Name: "fleet", Namespace: "fleet-system", Chart: "charts/fleet-operator",
		ValuesFiles: []string{"v.yaml"}, Set: []string{"image.tag=dev"}, Wait: true, Timeout: 2 * time.Minute,
	})
	require.Equal(t, []string{"upgrade", "--install", "fleet", "charts/fleet-operator",
		"--namespace", "fleet-system", "--create-namespace", "--kubeconfig", "/tmp/kc",
		"--values", "v.yaml", "--set", "image.tag=dev", "--wait", "--timeout", "2m0s"}, args)
}
