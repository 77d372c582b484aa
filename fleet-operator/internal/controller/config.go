package controller

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Config is the operator-wide configuration that comes from flags (set by the chart).
type Config struct {
	// OperatorNamespace is where the operator's own Pods run; the fleet
	// NetworkPolicy admits /state reads from there.
	OperatorNamespace string
	// OperatorServiceAccount is the operator's ServiceAccount name, admitted
	// by the fleets' mesh authorization policies.
	OperatorServiceAccount string
	// OperatorPodSelector selects the operator's Pods in OperatorNamespace.
	OperatorPodSelector string
	// NetworkPolicyEnforced is the administrator's assertion that the
	// cluster's CNI enforces NetworkPolicy. Until it is true no member Pod is
	// created: the fleet's security rests on its NetworkPolicy.
	NetworkPolicyEnforced bool
	// WatchNamespaces limits the operator to these namespaces (the chart's
	// fleetNamespaces, each with its own Role); empty watches all.
	WatchNamespaces []string
	// IstioTrustDomain is the mesh trust domain used in SPIFFE principals.
	IstioTrustDomain string
	// StateTimeout bounds one /state read.
	StateTimeout time.Duration
	// StateInterval is how often a Ready fleet's /state is read again.
	StateInterval time.Duration
	// Workers is how many fleets are reconciled at once (0: DefaultWorkers).
	Workers int
	// AllowedIngressAnnotations are the glob patterns ('*' matches any run
	// of characters) of the spec.routing.ingress.annotations keys the
	// operator writes; empty allows none. The operator writes them with its
	// own rights, past admission policies keyed on the fleet's author
	// (docs/security.md).
	AllowedIngressAnnotations []string
}

// DefaultWorkers: a reconcile mostly waits (on members' /state, on the API
// server), so several run at once; with one, a thousand fleets' periodic
// /state reads keep the queue busy and a spec change or a restart's first
// pass waits behind all of them. The same fleet is never reconciled twice
// at once (the work queue guarantees it).
const DefaultWorkers = 8

// BindFlags registers the operator's own flags.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.OperatorServiceAccount, "operator-service-account", "fleet-operator", "the operator's ServiceAccount name, admitted to members' peer port by mesh policies")
	fs.StringVar(&c.OperatorPodSelector, "operator-pod-selector", "app.kubernetes.io/name=fleet-operator", "label selector of the operator's Pods in its namespace; fleet NetworkPolicies admit /state reads from them")
	fs.BoolVar(&c.NetworkPolicyEnforced, "network-policy-enforced", false, "administrator assertion that the CNI enforces NetworkPolicy; fleets stay in Provisioning without it")
	fs.Func("watch-namespaces", "comma-separated namespaces holding CelldFleets (default: all namespaces)", func(v string) error {
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				c.WatchNamespaces = append(c.WatchNamespaces, ns)
			}
		}
		return nil
	})
	fs.StringVar(&c.IstioTrustDomain, "istio-trust-domain", "cluster.local", "Istio trust domain of the mesh, used in the principals of fleets' AuthorizationPolicies")
	fs.DurationVar(&c.StateTimeout, "state-timeout", 2*time.Second, "timeout of one /state read from a member")
	fs.DurationVar(&c.StateInterval, "state-interval", 30*time.Second, "how often members' /state is read when nothing else changes")
	fs.IntVar(&c.Workers, "workers", DefaultWorkers, "how many fleets are reconciled at once")
	c.AllowedIngressAnnotations = []string{"*"}
	fs.Func("allowed-ingress-annotations", "comma-separated glob patterns ('*' matches any run of characters) of the Ingress annotation keys fleets may set; empty allows none. Keys ending in -snippet and ingress-nginx auth-url/auth-signin are never written (default \"*\")", func(v string) error {
		c.AllowedIngressAnnotations = []string{}
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.AllowedIngressAnnotations = append(c.AllowedIngressAnnotations, p)
			}
		}
		return nil
	})
}

// Validate reports a configuration the operator cannot run with.
func (c *Config) Validate() error {
	if c.OperatorNamespace == "" {
		return fmt.Errorf("the operator namespace is required")
	}
	if c.OperatorServiceAccount == "" {
		return fmt.Errorf("--operator-service-account must not be empty")
	}
	sel, err := labels.ConvertSelectorToLabelsMap(c.OperatorPodSelector)
	if err != nil {
		return fmt.Errorf("--operator-pod-selector %q: %w (use key=value pairs separated by commas)", c.OperatorPodSelector, err)
	}
	if len(sel) == 0 {
		return fmt.Errorf("--operator-pod-selector must select something: an empty selector would admit every Pod of the operator namespace to members' peer port")
	}
	if c.Workers < 0 {
		return fmt.Errorf("--workers must not be negative")
	}
	if c.StateTimeout <= 0 || c.StateInterval <= 0 {
		return fmt.Errorf("--state-timeout and --state-interval must be positive")
	}
	return nil
}

// OperatorPodLabels is OperatorPodSelector as a label map (validated by Validate).
func (c *Config) OperatorPodLabels() map[string]string {
	sel, _ := labels.ConvertSelectorToLabelsMap(c.OperatorPodSelector)
	return sel
}
