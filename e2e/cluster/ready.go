package cluster

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// WaitAPIReady polls the API server's /readyz until it answers "ok" or ctx
// ends. /readyz only passes once post-start hooks (RBAC bootstrap roles,
// priority-and-fairness config, CRD informers) are done, so clients never see
// a half-started server.
func WaitAPIReady(ctx context.Context, cfg *rest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		reqCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(reqCtx)
		if err != nil {
			last = err
			return false, nil
		}
		return string(body) == "ok", nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("API server not ready: %w (last error: %v)", err, last)
	}
	return err
}
