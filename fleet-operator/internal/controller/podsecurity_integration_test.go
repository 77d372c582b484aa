//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/ericdev/fleetmesh/fleet-operator/api/v1alpha1"
	"github.com/ericdev/fleetmesh/fleet-operator/internal/members"
	"github.com/ericdev/fleetmesh/shared/testenv"
)

// TestRestrictedNamespace runs the real StatefulSet controller against a
// namespace that enforces Pod Security "restricted", so member Pods are
// really created, or refused by the API server's PodSecurity admission.
// A default fleet's members are admitted; members the namespace refuses
// (here: a containerSecurityContext that runs as root) are reported in the
// fleet's status with the StatefulSet controller's FailedCreate message,
// not as a fleet merely waiting in CreatingMembers.
func TestRestrictedNamespace(t *testing.T) {
	ctx := context.Background()
	env := testenv.Start(t, newScheme(t), "fleet-operator/config/crd/bases")
	env.RunControllers(t, "statefulset")
	const ns = "hardened"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}))
	h := newHarness(t, env, true)
	admitted := func(t *testing.T, pod string) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{}
		if !assert.Eventually(t, func() bool { return h.get(p, ns, pod) == nil }, 30*time.Second, 100*time.Millisecond,
			"the StatefulSet controller never created %s", pod) {
			t.Fatalf("the StatefulSet's events: %s", statefulSetEvents(t, env.Client, ns, strings.TrimSuffix(pod, "-0")))
		}
		return p
	}
	refused := func(t *testing.T, fleet string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(statefulSetEvents(t, env.Client, ns, fleet), "FailedCreate") },
			30*time.Second, 100*time.Millisecond, "the StatefulSet controller never tried to create %s-0", fleet)
	}

	t.Run("default members are admitted", func(t *testing.T) {
		f := fleet(ns, "plain") // persistent: a claim, owned by fsGroup 65532
		f.Spec.Replicas = ptr.To[int32](1)
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		sc := admitted(t, "plain-0").Spec.SecurityContext
		assert.Equal(t, ptr.To(true), sc.RunAsNonRoot)
		assert.Equal(t, ptr.To(members.RuntimeUID), sc.RunAsUser)
		assert.Equal(t, ptr.To(members.RuntimeGID), sc.FSGroup)
	})

	t.Run("securityContext {} lets the platform choose the user, and still meets restricted", func(t *testing.T) {
		f := fleet(ns, "platform")
		f.Spec.Replicas = ptr.To[int32](1)
		f.Spec.PodTemplate.SecurityContext = &corev1.PodSecurityContext{}
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		sc := admitted(t, "platform-0").Spec.SecurityContext
		assert.Equal(t, ptr.To(true), sc.RunAsNonRoot)
		assert.Nil(t, sc.RunAsUser, "the image's user, or the one the platform assigns")
		assert.Nil(t, sc.FSGroup)
	})

	f := refusedFleet(ns, "rooted")
	t.Run("refused members are reported with the API server's reason", func(t *testing.T) {
		require.NoError(t, env.Client.Create(ctx, f))
		h.reconcile(f)
		refused(t, "rooted")
		h.reconcileOnce(f)
		prov := condition(t, h, f, v1alpha1.ConditionProvisioning)
		require.NotNil(t, prov)
		t.Logf("Provisioning: %s: %s", prov.Reason, prov.Message)
		assert.Equal(t, string(v1alpha1.ReasonMembersRefused), prov.Reason)
		assert.Contains(t, prov.Message, `violates PodSecurity "restricted:latest"`, "the API server's own words")
		assert.Contains(t, prov.Message, "rooted-0")
		assert.Equal(t, PhaseProvisioning, f.Status.Phase)
		stalled := condition(t, h, f, v1alpha1.ConditionStalled)
		require.NotNil(t, stalled)
		assert.Equal(t, metav1.ConditionTrue, stalled.Status, "a GitOps health check fails now: someone must act")
		assert.Equal(t, string(v1alpha1.ReasonMembersRefused), stalled.Reason)
	})

	t.Run("fixed, the member is created and the refusal is gone from status", func(t *testing.T) {
		require.NoError(t, h.get(f, ns, "rooted"))
		f.Spec.PodTemplate.ContainerSecurityContext = nil
		require.NoError(t, env.Client.Update(ctx, f))
		h.reconcileOnce(f)
		admitted(t, "rooted-0")
		h.reconcileOnce(f)
		prov := condition(t, h, f, v1alpha1.ConditionProvisioning)
		require.NotNil(t, prov)
		assert.NotEqual(t, string(v1alpha1.ReasonMembersRefused), prov.Reason, "%s: %s", prov.Reason, prov.Message)
		stalled := condition(t, h, f, v1alpha1.ConditionStalled)
		require.NotNil(t, stalled)
		assert.Equal(t, metav1.ConditionFalse, stalled.Status)
	})

	t.Run("events that cannot be read leave the cause unknown, and say so", func(t *testing.T) {
		g := refusedFleet(ns, "unread")
		require.NoError(t, env.Client.Create(ctx, g))
		h.reconcile(g)
		refused(t, "unread")
		blind := newHarness(t, env, true)
		wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
		require.NoError(t, err)
		blind.r.Reader = interceptor.NewClient(wc, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if _, ok := list.(*corev1.EventList); ok {
					return errors.New(`events is forbidden: User "fleet-operator" cannot list resource "events"`)
				}
				return c.List(ctx, list, opts...)
			},
		})
		blind.reconcileOnce(g)
		prov := condition(t, blind, g, v1alpha1.ConditionProvisioning)
		require.NotNil(t, prov)
		assert.Equal(t, string(v1alpha1.ReasonCreatingMembers), prov.Reason)
		assert.Contains(t, prov.Message, "unknown")
		assert.Contains(t, prov.Message, "cannot list resource \"events\"")
	})

	t.Run("the CRD refuses exactly what the Pod API refuses", func(t *testing.T) {
		createNamespace(t, env.Client, "open")
		for _, tc := range []struct {
			name   string
			mutate func(*v1alpha1.PodTemplateMetadata)
			// refused is what the CRD says; "" for a template the Pod API
			// accepts (whatever Pod Security thinks of it).
			refused string
		}{
			{"negative runAsUser", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](-1)}
			}, "runAsUser, runAsGroup and fsGroup must be between 0 and 2147483647"},
			{"fsGroup too large", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To[int64](1 << 32)}
			}, "runAsUser, runAsGroup and fsGroup must be between 0 and 2147483647"},
			{"negative supplemental group", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{SupplementalGroups: []int64{1000, -5}}
			}, "supplementalGroups must be between 0 and 2147483647"},
			{"unknown fsGroupChangePolicy", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{FSGroupChangePolicy: ptr.To(corev1.PodFSGroupChangePolicy("Sometimes"))}
			}, "fsGroupChangePolicy must be OnRootMismatch or Always"},
			{"Localhost seccomp without a profile", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}
			}, "localhostProfile is required with Localhost"},
			{"a profile without Localhost", func(p *v1alpha1.PodTemplateMetadata) {
				p.ContainerSecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault, LocalhostProfile: ptr.To("x.json")}}
			}, "localhostProfile is required with Localhost and forbidden otherwise"},
			{"privileged without escalation", func(p *v1alpha1.PodTemplateMetadata) {
				p.ContainerSecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false)}
			}, "privileged true cannot be combined with allowPrivilegeEscalation false"},
			{"CAP_SYS_ADMIN without escalation", func(p *v1alpha1.PodTemplateMetadata) {
				p.ContainerSecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_ADMIN"}}, AllowPrivilegeEscalation: ptr.To(false)}
			}, "adding CAP_SYS_ADMIN cannot be combined with allowPrivilegeEscalation false"},
			// The Pod API checks that one spelling only.
			{"SYS_ADMIN without escalation", func(p *v1alpha1.PodTemplateMetadata) {
				p.ContainerSecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}, AllowPrivilegeEscalation: ptr.To(false)}
			}, ""},
			{"unmasked /proc", func(p *v1alpha1.PodTemplateMetadata) {
				p.ContainerSecurityContext = &corev1.SecurityContext{ProcMount: ptr.To(corev1.UnmaskedProcMount)}
			}, "procMount must be Default"},
			{"host process", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}}
			}, "windowsOptions.hostProcess cannot be true"},
			// Accepted by the Pod API; only a namespace's Pod Security level
			// may refuse them, and that is reported, not prevented.
			{"root", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false)}
			}, ""},
			{"privileged (escalation left to the API's default)", func(p *v1alpha1.PodTemplateMetadata) {
				p.ContainerSecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			}, ""},
			{"CAP_SYS_ADMIN (escalation left to the API's default)", func(p *v1alpha1.PodTemplateMetadata) {
				p.ContainerSecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_ADMIN"}}}
			}, ""},
			{"OpenShift-style ids and a Localhost profile", func(p *v1alpha1.PodTemplateMetadata) {
				p.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000700000), FSGroup: ptr.To[int64](1000700000),
					SupplementalGroups: []int64{1000700000}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("celld.json")}}
			}, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := fleet("open", "sc")
				tc.mutate(&f.Spec.PodTemplate)
				err := env.Client.Create(ctx, f.DeepCopy(), client.DryRunAll)
				// The StatefulSet the operator would write for it, as the
				// API server judges it.
				f.UID = "11111111-2222-3333-4444-555555555555"
				stsErr := env.Client.Create(ctx, members.StatefulSet(f), client.DryRunAll)
				if tc.refused == "" {
					assert.NoError(t, err, "the CRD refuses what the Pod API accepts")
					assert.NoError(t, stsErr)
					return
				}
				if assert.Error(t, err, "the CRD accepts what the Pod API refuses (%v)", stsErr) {
					assert.Contains(t, err.Error(), tc.refused)
				}
				assert.Error(t, stsErr, "the Pod API accepts it: the CRD must not refuse it")
			})
		}
	})
}

// refusedFleet is a fleet whose members a restricted namespace refuses:
// its container runs as root, which the Pod API accepts and Pod Security
// "restricted" does not.
func refusedFleet(ns, name string) *v1alpha1.CelldFleet {
	f := fleet(ns, name)
	f.Spec.Replicas = ptr.To[int32](1)
	f.Spec.PodTemplate.ContainerSecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](0)}
	return f
}

// statefulSetEvents are the events about a StatefulSet, one per line.
func statefulSetEvents(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	list := &corev1.EventList{}
	require.NoError(t, c.List(context.Background(), list, client.InNamespace(ns)))
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "StatefulSet" && e.InvolvedObject.Name == name {
			out = append(out, fmt.Sprintf("%s: %s", e.Reason, e.Message))
		}
	}
	return strings.Join(out, "\n")
}
