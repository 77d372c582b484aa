package sailinstall

// What the last holder reads before it deletes a CRD the install created:
// every object of it (deleting a CRD deletes them all), metadata only. The
// kinds are those of the CRDs the Sail chart ships (Sail's own and
// Istio's); a chart that ships a CRD not listed here gets its list refused,
// and that CRD is kept (unknown is not unused). istios, istiocnis and
// ztunnels are listed in rbac.go already.
//
// +kubebuilder:rbac:groups=sailoperator.io,resources=istiorevisions;istiorevisiontags,verbs=list
// +kubebuilder:rbac:groups=networking.istio.io,resources=virtualservices;destinationrules;gateways;serviceentries;sidecars;workloadentries;workloadgroups;envoyfilters;proxyconfigs,verbs=list
// +kubebuilder:rbac:groups=security.istio.io,resources=authorizationpolicies;peerauthentications;requestauthentications,verbs=list
// +kubebuilder:rbac:groups=telemetry.istio.io,resources=telemetries,verbs=list
// +kubebuilder:rbac:groups=extensions.istio.io,resources=wasmplugins,verbs=list
//
// What is in a namespace the operator created cannot be listed with fixed
// rules (any kind may be there, Secrets included), and no ClusterRole grants
// list on everything. At teardown the operator grants itself list on every
// kind in that one namespace, with a Role and RoleBinding it creates there
// (escalate and bind on Roles, above in rbac.go), and removes them when it
// keeps the namespace.
