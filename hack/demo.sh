#!/usr/bin/env bash
# make demo / make demo-down: a local control plane with kwok nodes, the celld
# stand-in on every member Pod IP, both operators as processes under their
# charts' RBAC, and the sample CelldFleet and ServiceMesh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="${TESTBED_DIR:-$root/.testbed}"
testbed="$root/bin/testbed"
export PATH="$root/bin:$PATH"

case "${1:-}" in
up)
  (cd "$root/e2e" && go build -o "$testbed" ./cmd/testbed)
  mkdir -p "$dir"
  echo "demo: starting the local control plane and both operators (logs: $dir/testbed.log) ..."
  # setsid: the test bed outlives this script; `make demo-down` stops it.
  setsid "$testbed" up --dir "$dir" --nodes 3 --operators >"$dir/testbed.log" 2>&1 < /dev/null &
  kubeconfig=$("$testbed" wait --dir "$dir" --timeout 10m) || { tail -20 "$dir/testbed.log"; exit 1; }
  export KUBECONFIG="$kubeconfig"
  kubectl create namespace demo --dry-run=client -o yaml | kubectl apply --server-side -f - >/dev/null
  kubectl apply --server-side -f "$root/fleet-operator/config/samples/celldfleet.yaml" -f "$root/mesh-operator/config/samples/servicemesh.yaml"
  echo "demo: waiting for the fleet to become Ready ..."
  kubectl -n demo wait celldfleet/demo-fleet --for=condition=Ready --timeout=180s
  kubectl wait servicemesh/cluster --for=condition=PreviewLocked=False --timeout=60s >/dev/null
  echo
  kubectl get celldfleets,servicemeshes -A
  echo
  kubectl -n demo get pods,pvc -o wide
  echo
  # The fleet operator's kubectl plugin (docs/access.md): who reaches each
  # member port, and which rule decided. kubectl finds it on PATH.
  (cd "$root/fleet-operator" && go build -o "$root/bin/kubectl-celld" ./cmd/kubectl-celld)
  echo "demo: kubectl celld access -n demo demo-fleet"
  kubectl celld access -n demo demo-fleet
  echo
  echo "demo: running. Try: export KUBECONFIG=$kubeconfig; kubectl -n demo get celldfleet demo-fleet -o yaml"
  echo "demo: stop everything with: make demo-down"
  ;;
down)
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
