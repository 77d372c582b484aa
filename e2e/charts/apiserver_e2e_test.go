//go:build e2e

package charts

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/ericdev/fleetmesh/e2e/cluster"
)

// The non-default renderings applied next to the defaults.
var (
	fleetNamespaced       = release{chart: fleetChart, name: "fleets", namespace: "ops"}
	fleetNamespacedValues = values{
		"fleetNamespaces":       []string{"a", "b"},
		"replicas":              3,
		"networkPolicyEnforced": true,
		"podLabels":             values{"sidecar.istio.io/inject": "true"},
		"metrics":               values{"enabled": false},
		"crds":                  values{"keep": false},
		"state":                 values{"timeout": "1s", "interval": "10s"},
		// The escape hatches, validated by the API server.
		"extraArgs":                 []string{"--workers=16", "--kube-api-qps=200"},
		"extraEnv":                  []values{{"name": "GOMEMLIMIT", "value": "300MiB"}, {"name": "NODE", "valueFrom": values{"fieldRef": values{"fieldPath": "spec.nodeName"}}}},
		"extraVolumes":              []values{{"name": "ca", "configMap": values{"name": "corp-ca", "optional": true}}},
		"extraVolumeMounts":         []values{{"name": "ca", "mountPath": "/etc/ssl/certs/corp", "readOnly": true}},
		"topologySpreadConstraints": []values{{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": values{"matchLabels": values{"app.kubernetes.io/instance": "fleets"}}}},
		"resources":                 values{"limits": values{"memory": "1Gi"}},
	}
	meshLicensed       = release{chart: meshChart, name: "mesh", namespace: "mesh-alt"}
	meshLicensedValues = values{
		"replicas":  2,
		"license":   values{"create": true, "secretName": "acme-license", "value": `{"version":1}`},
		"podLabels": values{"sidecar.istio.io/inject": "true"},
		"metrics":   values{"port": 9090},
	}
	// sail.install=false, as on OpenShift Service Mesh 3: no installer
	// rights, and the UID left to the platform (the default now; null is
	// what values files of earlier releases say). Behind an HTTPS proxy.
	meshLean       = release{chart: meshChart, name: "lean", namespace: "mesh-lean"}
	meshLeanValues = values{
		"sail":               values{"install": false},
		"podSecurityContext": values{"runAsUser": nil, "runAsGroup": nil},
		"image":              values{"digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		"extraEnv":           []values{{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}, {"name": "NO_PROXY", "value": "10.96.0.1,.svc"}},
		"extraVolumes":       []values{{"name": "proxy-ca", "configMap": values{"name": "proxy-ca"}}},
		"extraVolumeMounts":  []values{{"name": "proxy-ca", "mountPath": "/etc/ssl/certs/proxy-ca.pem", "subPath": "ca.crt", "readOnly": true}},
		"fullnameOverride":   "lean-mesh",
	}
)

// TestRenderedChartsApply renders both charts with default and non-default
// values, applies every object server-side to a real API server (which
// validates the RBAC objects, Deployments, PDBs, Services, Secret and CRDs),
// and then asks the API server's RBAC authorizer what each operator's
// ServiceAccount may do.
func TestRenderedChartsApply(t *testing.T) {
	c := upAPIServer(t)
	cs := clientset(t, c)
	// Helm creates the release namespace; the fleet namespaces are the user's.
	createNamespaces(t, cs, "fleet-system", "mesh-system", "ops", "mesh-alt", "mesh-lean", "a", "b", "c")

	for _, r := range []struct {
		release release
		values  values
	}{
		{fleetRelease, nil},
		{fleetNamespaced, fleetNamespacedValues},
		{meshRelease, nil},
		{meshLicensed, meshLicensedValues},
		{meshLean, meshLeanValues},
	} {
		out, err := templateYAML(t, r.release, r.values)
		require.NoError(t, err)
		m, err := decodeManifest(out)
		require.NoError(t, err)
		require.NoError(t, applyYAML(t, c, out), "%s/%s rejected by the API server", r.release.chart, r.release.name)
		assertStored(t, c, m)
		for _, d := range m.all("Deployment") {
			assertRestrictedPodSecurity(t, cs, convert[appsv1.Deployment](t, d))
		}
	}

	// The license Secret the chart created is what the operator reads.
	secret, err := cs.CoreV1().Secrets("mesh-alt").Get(context.Background(), "acme-license", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, `{"version":1}`, string(secret.Data["license"]))

	t.Run("fleet-operator, all namespaces", func(t *testing.T) {
		assertAccess(t, cs, "fleet-system", "fleet-operator", []access{
			{"list", "celld.eric.dev", "celldfleets", "", ""},
			{"watch", "celld.eric.dev", "celldfleets", "c", ""},
			{"patch", "celld.eric.dev", "celldfleets/status", "c", "x"},
			{"update", "celld.eric.dev", "celldfleets/finalizers", "c", "x"},
			{"create", "apps", "statefulsets", "c", ""},
			{"delete", "", "pods", "c", "x-0"},
			{"create", "networking.k8s.io", "networkpolicies", "c", ""},
			{"create", "events.k8s.io", "events", "c", ""},
			{"get", "coordination.k8s.io", "leases", "fleet-system", "fleet-operator.celld.eric.dev"},
			{"update", "coordination.k8s.io", "leases", "fleet-system", "fleet-operator.celld.eric.dev"},
			{"create", "", "events", "fleet-system", ""},
		}, []access{
			{"get", "", "secrets", "c", "x"},
			{"list", "", "secrets", "fleet-system", ""},
			{"create", "celld.eric.dev", "celldfleets", "c", ""},
			{"delete", "celld.eric.dev", "celldfleets", "c", "x"},
			{"delete", "apps", "statefulsets", "c", "x"},
			{"delete", "", "persistentvolumeclaims", "c", "data-x-0"},
			{"update", "coordination.k8s.io", "leases", "c", "x"},
			{"create", "rbac.authorization.k8s.io", "roles", "c", ""},
			{"create", "", "pods", "c", ""},
			{"get", "", "nodes", "", "n"},
		})
	})
	t.Run("fleet-operator, fleetNamespaces a and b", func(t *testing.T) {
		assertAccess(t, cs, "ops", "fleets-fleet-operator", []access{
			{"list", "celld.eric.dev", "celldfleets", "a", ""},
			{"watch", "celld.eric.dev", "celldfleets", "b", ""},
			{"get", "celld.eric.dev", "celldfleets", "b", "x"},
			{"patch", "celld.eric.dev", "celldfleets/status", "a", "x"},
			{"create", "", "services", "b", ""},
			{"create", "events.k8s.io", "events", "a", ""},
			{"update", "coordination.k8s.io", "leases", "ops", "fleet-operator.celld.eric.dev"},
			{"create", "", "events", "ops", ""},
			// The mesh-contract labels: watch every Namespace, patch only a and b.
			{"watch", "", "namespaces", "", ""},
			{"patch", "", "namespaces", "a", "a"},
			{"patch", "", "namespaces", "b", "b"},
		}, []access{
			{"patch", "", "namespaces", "c", "c"},
			{"patch", "", "namespaces", "ops", "ops"},
			{"delete", "", "namespaces", "a", "a"},
			{"create", "", "namespaces", "", ""},
			{"list", "celld.eric.dev", "celldfleets", "", ""},
			{"list", "celld.eric.dev", "celldfleets", "c", ""},
			{"list", "celld.eric.dev", "celldfleets", "ops", ""},
			{"create", "", "services", "c", ""},
			{"list", "", "pods", "", ""},
			{"get", "", "secrets", "a", "x"},
		})
		// The chart's default release is bound cluster-wide, not this one.
		assert.False(t, allowed(t, cs, "ops", "fleet-operator", access{"list", "celld.eric.dev", "celldfleets", "a", ""}))
	})
	t.Run("mesh-operator, default license Secret", func(t *testing.T) {
		assertAccess(t, cs, "mesh-system", "mesh-operator", []access{
			{"get", "", "secrets", "mesh-system", "mesh-operator-license"},
			{"list", "core.navique.com", "servicemeshes", "", ""},
			{"watch", "core.navique.com", "servicemeshes", "", ""},
			{"patch", "core.navique.com", "servicemeshes/status", "", "cluster"},
			{"create", "events.k8s.io", "events", "default", ""},
			{"update", "coordination.k8s.io", "leases", "mesh-system", "mesh-operator.core.navique.com"},
			{"create", "", "events", "mesh-system", ""},
			// Enrollment watches namespace labels and applies its own.
			{"list", "", "namespaces", "", ""},
			{"patch", "", "namespaces", "", "team-a"},
		}, []access{
			// (With sail.install=true the Sail release's Helm records are
			// Secrets in its namespace: get, list, create, update and
			// delete there, below. Never watch, never elsewhere.)
			{"watch", "", "secrets", "mesh-system", ""},
			{"get", "", "secrets", "default", "mesh-operator-license"},
			{"get", "", "secrets", "mesh-alt", "acme-license"},
			{"create", "core.navique.com", "servicemeshes", "", ""},
			{"delete", "core.navique.com", "servicemeshes", "", "cluster"},
			{"update", "core.navique.com", "servicemeshes", "", "cluster"},
			{"update", "", "namespaces", "", "team-a"},
			{"list", "", "secrets", "", ""},
		})
	})
	// The Sail installer's rights: with the default sail.install=true, and
	// not at all with sail.install=false.
	installer := []access{
		{"escalate", "rbac.authorization.k8s.io", "clusterroles", "", "sail-operator"},
		{"bind", "rbac.authorization.k8s.io", "clusterroles", "", "sail-operator"},
		{"create", "apiextensions.k8s.io", "customresourcedefinitions", "", ""},
		{"delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "istios.sailoperator.io"},
		{"list", "", "configmaps", "sail-operator", ""},
		{"create", "apps", "deployments", "sail-operator", ""},
		// Helm's release records of the Sail Operator (secret driver).
		{"list", "", "secrets", "mesh-system", ""},
		{"create", "", "secrets", "mesh-system", ""},
		{"delete", "", "secrets", "mesh-system", "sh.helm.release.v1.sail-operator.v1"},
	}
	t.Run("mesh-operator, sail.install=true installs the Sail Operator", func(t *testing.T) {
		assertAccess(t, cs, "mesh-system", "mesh-operator", installer, nil)
	})
	t.Run("mesh-operator, sail.install=false, fullnameOverride", func(t *testing.T) {
		assertAccess(t, cs, "mesh-lean", "lean-mesh", []access{
			{"create", "sailoperator.io", "istios", "", ""},
			{"patch", "", "namespaces", "", "team-a"},
			{"get", "", "configmaps", "kube-system", "cilium-config"},
			{"get", "", "configmaps", "sail-operator", "sail-operator-holders"},
			{"get", "", "secrets", "mesh-lean", "mesh-operator-license"},
		}, append(installer, access{"get", "", "configmaps", "kube-system", "kubeadm-config"}))
	})
	t.Run("mesh-operator, license Secret from value", func(t *testing.T) {
		assertAccess(t, cs, "mesh-alt", "mesh-mesh-operator", []access{
			{"get", "", "secrets", "mesh-alt", "acme-license"},
		}, []access{
			// (Other Secrets of mesh-alt are readable: with sail.install=true
			// the Sail release's Helm records live there. The license Role
			// itself names only acme-license: TestMeshLicenseFromValue.)
			{"get", "", "secrets", "mesh-system", "mesh-operator-license"},
			{"watch", "", "secrets", "mesh-alt", ""},
			{"list", "", "secrets", "mesh-system", ""},
		})
	})
}

// restrictedNamespace enforces the Pod Security Standard "restricted".
const restrictedNamespace = "psa-restricted"

// assertRestrictedPodSecurity submits a Pod with the Deployment's template
// (server-side dry run) to a namespace that enforces the restricted Pod
// Security Standard: the API server's PodSecurity admission is the judge.
// A deliberately weakened copy must be refused, so the check is live.
func assertRestrictedPodSecurity(t *testing.T, cs kubernetes.Interface, d *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   restrictedNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().ServiceAccounts(restrictedNamespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "operator"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: restrictedNamespace, Labels: d.Spec.Template.Labels},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.ServiceAccountName = "operator"
	pod.Spec.PriorityClassName = ""
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err = cs.CoreV1().Pods(restrictedNamespace).Create(ctx, pod, dryRun)
	assert.NoError(t, err, "%s/%s: the operator Pod must meet the restricted Pod Security Standard", d.Namespace, d.Name)

	weak := pod.DeepCopy()
	weak.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true)
	_, err = cs.CoreV1().Pods(restrictedNamespace).Create(ctx, weak, dryRun)
	require.Error(t, err, "PodSecurity admission is not enforcing")
	assert.Contains(t, err.Error(), "allowPrivilegeEscalation")
}

// assertStored checks that every object of m exists in the cluster; a
// namespaced object without a namespace is looked up in default, where
// cluster.InstallManifests puts it.
func assertStored(t *testing.T, c *cluster.Cluster, m manifest) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.REST)
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(c.REST)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	for _, o := range m {
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, gvk.String())
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			ri = dyn.Resource(mapping.Resource).Namespace(ns)
		}
		_, err = ri.Get(context.Background(), o.GetName(), metav1.GetOptions{})
		assert.NoError(t, err, "%s %s/%s", gvk.Kind, o.GetNamespace(), o.GetName())
	}
}

// TestHelmInstallUninstall installs both charts with bin/helm, each on its
// own and in either order, creates custom resources, uninstalls, and checks
// that crds.keep keeps the CRDs and the resources, and that without it they go.
func TestHelmInstallUninstall(t *testing.T) {
	c := upAPIServer(t)
	cs := clientset(t, c)
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(c.REST)
	require.NoError(t, err)
	fleets := schema.GroupVersionResource{Group: "celld.eric.dev", Version: "v1alpha1", Resource: "celldfleets"}
	meshes := schema.GroupVersionResource{Group: "core.navique.com", Version: "v1alpha1", Resource: "servicemeshes"}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

	charts := map[string]string{}
	for _, chart := range []string{fleetChart, meshChart} {
		charts[chart] = installableChart(t, cs, chart)
	}
	install := func(r release, set ...string) {
		t.Helper()
		err := cluster.HelmInstall(ctx, helmBin(t), c.Kubeconfig, cluster.HelmRelease{
			Name: r.name, Namespace: r.namespace, Chart: charts[r.chart], Set: set, Timeout: time.Minute,
		})
		require.NoError(t, err)
	}
	uninstall := func(r release) {
		t.Helper()
		require.NoError(t, cluster.HelmUninstall(ctx, helmBin(t), c.Kubeconfig, r.name, r.namespace))
	}
	apply := func(yaml string) {
		t.Helper()
		require.NoError(t, applyYAML(t, c, yaml))
	}

	// The mesh operator first, then the fleet operator: neither needs the other.
	install(meshRelease, "license.create=true", "license.value=not-a-license")
	require.NoError(t, cluster.WaitCRDsEstablished(ctx, c.REST, "servicemeshes.core.navique.com"))
	apply("apiVersion: core.navique.com/v1alpha1\nkind: ServiceMesh\nmetadata:\n  name: cluster\n")
	createNamespaces(t, cs, "a") // fleet namespaces must exist before the chart's Roles
	install(fleetRelease, "fleetNamespaces={a}", "networkPolicyEnforced=true")
	require.NoError(t, cluster.WaitCRDsEstablished(ctx, c.REST, "celldfleets.celld.eric.dev"))
	apply("apiVersion: celld.eric.dev/v1alpha1\nkind: CelldFleet\nmetadata:\n  name: f\n  namespace: a\nspec:\n  image: registry.example/celld:1\n")

	for _, r := range []release{fleetRelease, meshRelease} {
		_, err := cs.AppsV1().Deployments(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
		require.NoError(t, err, "%s installed", r.chart)
	}
	_, err = cs.RbacV1().Roles("a").Get(ctx, "fleet-operator", metav1.GetOptions{})
	require.NoError(t, err, "the per-namespace Role")

	uninstall(fleetRelease)
	uninstall(meshRelease)
	for _, r := range []release{fleetRelease, meshRelease} {
		_, err := cs.AppsV1().Deployments(r.namespace).Get(ctx, r.name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s Deployment removed: %v", r.chart, err)
		_, err = cs.RbacV1().ClusterRoles().Get(ctx, r.name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "%s ClusterRole removed: %v", r.chart, err)
	}
	_, err = cs.CoreV1().Secrets("mesh-system").Get(ctx, "mesh-operator-license", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the chart-created license Secret goes with the release")
	// crds.keep (default): the CRDs and every custom resource stay.
	for _, name := range []string{"celldfleets.celld.eric.dev", "servicemeshes.core.navique.com"} {
		_, err := dyn.Resource(crds).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, "CRD %s kept", name)
	}
	_, err = dyn.Resource(fleets).Namespace("a").Get(ctx, "f", metav1.GetOptions{})
	require.NoError(t, err, "the CelldFleet survives the uninstall")
	_, err = dyn.Resource(meshes).Get(ctx, "cluster", metav1.GetOptions{})
	require.NoError(t, err, "the ServiceMesh survives the uninstall")

	// A later install picks the kept CRD up again (fleet first this time);
	// with crds.keep=false an uninstall takes the CRD and its resources.
	install(fleetRelease, "crds.keep=false")
	install(meshRelease)
	_, err = dyn.Resource(fleets).Namespace("a").Get(ctx, "f", metav1.GetOptions{})
	require.NoError(t, err)
	uninstall(fleetRelease)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(crds).Get(ctx, "celldfleets.celld.eric.dev", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "crds.keep=false: the CRD is deleted with the release")
	_, err = dyn.Resource(crds).Get(ctx, "servicemeshes.core.navique.com", metav1.GetOptions{})
	require.NoError(t, err, "the other chart's CRD is untouched")
	uninstall(meshRelease)
	_, err = dyn.Resource(meshes).Get(ctx, "cluster", metav1.GetOptions{})
	require.NoError(t, err, "the ServiceMesh survives a second uninstall")

	// Each chart alone in each RBAC mode.
	clusterRoles := func() []string {
		t.Helper()
		list, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=Helm"})
		require.NoError(t, err)
		var names []string
		for _, r := range list.Items {
			names = append(names, r.Name)
		}
		return names
	}
	for _, tc := range []struct {
		release release
		set     []string
		roles   []string
	}{
		{meshRelease, nil, []string{"mesh-operator", "mesh-operator-sail-installer"}},
		{meshRelease, []string{"sail.install=false"}, []string{"mesh-operator"}},
		{meshRelease, []string{"rbac.create=false"}, nil},
		{fleetRelease, nil, []string{"fleet-operator"}},
		{fleetRelease, []string{"rbac.create=false"}, nil},
	} {
		install(tc.release, tc.set...)
		assert.ElementsMatch(t, tc.roles, clusterRoles(), "%s %v", tc.release.chart, tc.set)
		uninstall(tc.release)
		assert.Empty(t, clusterRoles(), "%s %v: uninstalled", tc.release.chart, tc.set)
	}
}

// installableChart returns the chart's directory, or, when the API server
// reports no release version (kube-apiserver built from source without
// version ldflags says v0.0.0-master), a copy without the Chart.yaml
// kubeVersion constraint, which helm install would refuse against it.
func installableChart(t *testing.T, cs kubernetes.Interface, chart string) string {
	t.Helper()
	dir := chartDir(t, chart)
	info, err := cs.Discovery().ServerVersion()
	require.NoError(t, err)
	if !strings.HasPrefix(info.GitVersion, "v0.0.0") {
		return dir
	}
	t.Logf("the API server reports %s: installing a copy of %s without its kubeVersion constraint", info.GitVersion, chart)
	cp := filepath.Join(t.TempDir(), chart)
	require.NoError(t, os.CopyFS(cp, os.DirFS(dir)))
	meta := filepath.Join(cp, "Chart.yaml")
	b, err := os.ReadFile(meta)
	require.NoError(t, err)
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "kubeVersion:") {
			kept = append(kept, line)
		}
	}
	require.Len(t, kept, len(strings.Split(string(b), "\n"))-1, "Chart.yaml has one kubeVersion line")
	require.NoError(t, os.WriteFile(meta, []byte(strings.Join(kept, "\n")), 0o644))
	return cp
}
