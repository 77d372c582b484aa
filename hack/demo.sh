#!/usr/bin/env bash
# make demo / make demo-down: a local control plane with kwok nodes, the celld
# stand-in on every member Pod IP, both operators as processes under their
# charts' RBAC, and the sample CelldFleet and ServiceMesh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="${TESTBED_DIR:-$root/.testbed}"
# The demo's own binaries (testbed, kubectl-celld) live in its directory, so
# bin/ holds only what `make tools` and `make build` put there.
testbed="$dir/bin/testbed"
export PATH="$dir/bin:$root/bin:$PATH"

case "${1:-}" in
up)
  mkdir -p "$dir/bin"
  (cd "$root/e2e" && go build -o "$testbed" ./cmd/testbed)
  # Built here and not at the end, so the story below prints without pauses.
  (cd "$root/fleet-operator" && go build -o "$dir/bin/kubectl-celld" ./cmd/kubectl-celld)
  echo "demo: starting the local control plane and both operators (logs: $dir/testbed.log) ..."
  # setsid: the test bed outlives this script; `make demo-down` stops it.
  setsid "$testbed" up --dir "$dir" --nodes 3 --operators --simulate-mesh >"$dir/testbed.log" 2>&1 < /dev/null &
  kubeconfig=$("$testbed" wait --dir "$dir" --timeout 10m) || { tail -20 "$dir/testbed.log"; exit 1; }
  export KUBECONFIG="$kubeconfig"
  echo "demo: real: API server, scheduler, controllers, both operators (under their charts' RBAC)."
  echo "demo: SIMULATED (no container runtime here): kwok plays the kubelets, e2e/standin the celld members,"
  echo "      e2e/sailfake the Sail Operator (reports Istio, IstioCNI, ZTunnel Ready), e2e/cnifake istio-cni."
  kubectl create namespace demo --dry-run=client -o yaml | kubectl apply --server-side -f - >/dev/null

  echo
  echo "== 1. fleet operator: the sample CelldFleet demo/demo-fleet, before any mesh"
  kubectl apply --server-side -f "$root/fleet-operator/config/samples/celldfleet.yaml" >/dev/null
  kubectl -n demo wait celldfleet/demo-fleet --for=condition=Ready --timeout=180s >/dev/null
  kubectl -n demo get celldfleet demo-fleet -o wide
  echo "It asks for the mesh (spec.mesh: auto): namespace demo core.navique.com/mesh=$(kubectl get namespace demo -o jsonpath='{.metadata.labels.core\.navique\.com/mesh}')"

  echo
  echo "== 2. mesh operator: the sample ServiceMesh (licensed; ambient, STRICT mTLS, namespace isolation)"
  kubectl apply --server-side -f "$root/mesh-operator/config/samples/servicemesh.yaml" >/dev/null
  kubectl wait servicemesh/cluster --for=condition=Ready --timeout=180s >/dev/null
  kubectl wait namespace/demo --for=jsonpath='{.metadata.labels.core\.navique\.com/mesh-mtls}'=strict --timeout=180s >/dev/null
  kubectl get servicemesh cluster -o wide
  echo "Sail resources it created: $(kubectl get istios,istiocnis,ztunnels -o jsonpath='{range .items[*]}{.kind}/{.metadata.name}={.status.state} {end}')(SIMULATED)"
  echo "Members ztunnel captured (SIMULATED istio-cni): $(kubectl -n demo get pods -o jsonpath='{.items[?(@.metadata.annotations.ambient\.istio\.io/redirection=="enabled")].metadata.name}')"

  echo
  echo "== 3. fleet operator: demo-fleet adapted to the mesh"
  kubectl -n demo wait celldfleet/demo-fleet --for=condition=MeshReady --timeout=180s >/dev/null
  kubectl -n demo wait celldfleet/demo-fleet --for=jsonpath='{.status.mesh}'=Ambient --timeout=60s >/dev/null
  kubectl -n demo get celldfleet demo-fleet -o wide
  kubectl -n demo get celldfleet demo-fleet -o jsonpath='{range .status.conditions[?(@.type=="MeshReady")]}MeshReady={.status} {.reason}: {.message}{"\n"}{end}' | fold -s -w 120

  echo
  echo "== 4. who wrote what in namespace demo (server-side apply field managers)"
  # Read from the objects' managedFields, not from this script: each
  # operator's own writes.
  kubectl get namespace demo -o go-template='{{range .metadata.managedFields}}{{$by := .manager}}{{if eq .operation "Apply"}}{{with index .fieldsV1 "f:metadata"}}{{with index . "f:labels"}}{{printf "namespace labels by %s:\n " $by}}{{range $k, $v := .}} {{slice $k 2}}={{index $.metadata.labels (slice $k 2)}}{{end}}{{"\n"}}{{end}}{{end}}{{end}}{{end}}' |
    fold -s -w 116 | sed -E '/^(namespace labels by|  )/!s/^/  /'
  kubectl -n demo get statefulsets,services,networkpolicies,peerauthentications,authorizationpolicies -o go-template='{{printf "%-20s %-17s %-15s %s\n" "KIND" "NAME" "WRITTEN BY" "MODE/ACTION"}}{{range .items}}{{$item := .}}{{range .metadata.managedFields}}{{if eq .operation "Apply"}}{{printf "%-20s %-17s %-15s " $item.kind $item.metadata.name .manager}}{{with $item.spec.mtls}}{{.mode}}{{end}}{{if eq $item.kind "AuthorizationPolicy"}}{{or $item.spec.action "ALLOW"}}{{end}}{{"\n"}}{{end}}{{end}}{{end}}'

  echo
  # The fleet operator's kubectl plugin (docs/access.md): who reaches each
  # member port, and which rule decided.
  echo "== 5. who can reach the members, and which rule decides: kubectl celld access -n demo demo-fleet -o wide"
  kubectl celld access -n demo demo-fleet -o wide
  echo
  echo "demo: running. Try: export KUBECONFIG=$kubeconfig; kubectl -n demo get celldfleet demo-fleet -o yaml"
  echo "demo: stop everything with: make demo-down"
  ;;
down)
  # A demo started before the binaries moved to $dir/bin.
  [ -x "$testbed" ] || testbed="$root/bin/testbed"
  if [ -x "$testbed" ] && [ -f "$dir/testbed.pid" ]; then
    "$testbed" down --dir "$dir"
  else
    echo "demo: nothing to stop"
  fi
  ;;
*)
  echo "usage: $0 up|down" >&2
  exit 2
  ;;
esac
