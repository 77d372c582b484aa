package sailinstall

// What installing and uninstalling the Sail Operator takes, and nothing
// else needs: Helm applying the chart (its Deployment, ServiceAccount,
// Service, NetworkPolicy, RBAC and CRDs), the holders record, the
// operator's own release record and an earlier version's ConfigMap release
// records (read to adopt them), and deleting the CRDs the install created.
// Granting the chart's ClusterRoles needs escalate and bind. Helm's release
// records are Secrets in the operator's own namespace: that Role is written
// by hand in the chart (charts/mesh-operator/templates/rbac.yaml), as a
// marker here would name a fixed namespace.
//
// `make manifests` generates these markers into their own ClusterRole
// (mesh-operator/config/rbac/sail-installer/role.yaml); the chart binds it
// only with sail.install=true, so an operator that may not install the
// Sail Operator holds none of these rights. Keep every marker the install
// or the last holder's uninstall needs here, and nothing the operator uses
// otherwise (those live with the controller).
//
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts;services,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;create;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles;roles,verbs=get;create;patch;delete;escalate;bind
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings;rolebindings,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=sailoperator.io,resources=istios;istiocnis;ztunnels,verbs=list
