//go:build e2e

package specs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
)

const rejectedNS = "e2e-rejected"

// TestRejectedRouteKeepsRolling: an admission policy of the edge team (a
// ValidatingAdmissionPolicy on the API server's real admission path)
// refuses the fleet's Ingress. The fleet still becomes Ready, and an image
// bump replaces every member once, never more than one unavailable, while
// every state of the fleet seen through a watch says RoutingReady=False,
// RouteRejected.
func TestRejectedRouteKeepsRolling(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rejectedNS}}))
	const refusal = "edge policy: hosts under rejected. are not served here"
	denyIngressHosts(t, rejectedNS, refusal)

	f := persistentFleet(rejectedNS, "shop")
	f.Spec.Routing = &fleetv1.Routing{
		Hostnames: []string{"rejected.example.com"},
		Ingress:   &fleetv1.IngressRouting{ClassName: "nginx"},
		Source:    fleetv1.RoutingSource{Namespace: "ingress-nginx", PodLabels: map[string]fleetv1.LabelValue{"app": "ingress"}},
	}
	require.NoError(t, k8s.Create(ctx, f))
	rejected := func(f *fleetv1.CelldFleet) (bool, string) {
		c := meta.FindStatusCondition(f.Status.Conditions, string(fleetv1.ConditionRoutingReady))
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == string(fleetv1.ReasonRouteRejected), fmt.Sprintf("RoutingReady=%+v", c)
	}
	waitFleet(t, f, 2*time.Minute, func(f *fleetv1.CelldFleet) (bool, string) {
		if ok, msg := rejected(f); !ok {
			return false, msg
		}
		return readyOn("1.0.0")(f)
	})
	c := meta.FindStatusCondition(getFleet(t, f).Status.Conditions, string(fleetv1.ConditionRoutingReady))
	assert.Contains(t, c.Message, refusal, "the API server's answer is quoted")
	assert.Error(t, k8s.Get(ctx, client.ObjectKey{Namespace: rejectedNS, Name: "shop-routing"}, &networkingv1.Ingress{}))

	states := watchFleetStates(t, f, rejected)
	members := watchMembers(t, f)
	patchFleet(t, f, `{"spec":{"image":"registry.example/celld:1.1.0"}}`)
	waitFleet(t, f, 3*time.Minute, readyOn("1.1.0"))
	members.stop()
	seen, bad := states.stop()
	assert.LessOrEqual(t, members.maxUnavailable(), 1, "never more than one member unavailable")
	members.assertReplacedOnce(t)
	assert.Greater(t, seen, 3, "the watch saw the roll's states")
	assert.Empty(t, bad, "every state during the roll says RouteRejected")
	require.NoError(t, k8s.Delete(ctx, f))
}

// denyIngressHosts installs a ValidatingAdmissionPolicy and its binding
// that refuse Ingresses in ns with a host under "rejected.", and waits until
// the API server enforces them.
func denyIngressHosts(t *testing.T, ns, message string) {
	t.Helper()
	ctx := context.Background()
	name := "deny-hosts-" + ns
	vap := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"networking.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"ingresses"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.spec.rules) || !object.spec.rules.exists(r, has(r.host) && r.host.startsWith('rejected.'))",
				Message:    message,
			}},
		},
	}
	require.NoError(t, k8s.Create(ctx, vap))
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	require.NoError(t, k8s.Create(ctx, binding))
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, binding)
		_ = k8s.Delete(ctx, vap)
	})
	probe := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
		Spec:       networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "rejected.example.com"}}},
	}
	waitTrue(t, 30*time.Second, func() (bool, string) {
		err := k8s.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil, "the admission policy is not enforced yet"
	})
}

// fleetStates judges every state of a fleet a watch delivers.
type fleetStates struct {
	mu     sync.Mutex
	seen   int
	bad    []string
	cancel context.CancelFunc
	done   chan struct{}
}

func watchFleetStates(t *testing.T, f *fleetv1.CelldFleet, judge func(*fleetv1.CelldFleet) (bool, string)) *fleetStates {
	ctx, cancel := context.WithCancel(context.Background())
	wc, err := client.NewWithWatch(bed.Cluster.REST, client.Options{Scheme: k8s.Scheme()})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &fleetv1.CelldFleetList{}, client.InNamespace(f.Namespace), client.MatchingFields{"metadata.name": f.Name})
	require.NoError(t, err)
	o := &fleetStates{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				got, isFleet := ev.Object.(*fleetv1.CelldFleet)
				if !isFleet {
					continue
				}
				ok, msg := judge(got)
				o.mu.Lock()
				o.seen++
				if !ok {
					o.bad = append(o.bad, fmt.Sprintf("rv %s phase %s: %s", got.ResourceVersion, got.Status.Phase, msg))
				}
				o.mu.Unlock()
			}
		}
	}()
	return o
}

func (o *fleetStates) stop() (int, []string) {
	o.cancel()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen, o.bad
}
