// Package charts tests the operators' Helm charts the way users meet them:
// bin/helm lints and renders them with the values a user would pass, and the
// tests assert what comes out (RBAC scope, operator flags, Pod security, the
// values schema, CRDs in sync with controller-gen). Tests with the e2e tag
// apply the rendered objects and the docs/samples manifests to a real API
// server.
package charts
