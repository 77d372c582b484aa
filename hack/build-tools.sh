#!/usr/bin/env bash
# Builds the test bed's binaries into bin/ from the pinned tools modules under tools/.
# A binary is rebuilt only when its tools module (go.mod + go.sum) changed since it was
# built, so a warm machine pays nothing and a fresh one pays the cold build once.
#
# usage: hack/build-tools.sh [group...]   groups: etcd kube kwok controller-gen helm lint
#                                         node groups (real-node tier, `make tools-realnode`):
#                                         kubenode containerd cni kube-router coredns
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
stamps="$bin/.stamps"
mkdir -p "$stamps"
export GOWORK=off GOFLAGS=-mod=readonly

# group -> packages built from tools/<group> (binary name = last path element)
declare -A packages=(
  [etcd]="go.etcd.io/etcd/server/v3"
  [kube]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl"
  [kwok]="sigs.k8s.io/kwok/cmd/kwok"
  [controller-gen]="sigs.k8s.io/controller-tools/cmd/controller-gen"
  [helm]="helm.sh/helm/v4/cmd/helm"
  [lint]="honnef.co/go/tools/cmd/staticcheck"
  # The real-node tier (docs/development.md, "The real-node tier"): a kubelet and kube-proxy of
  # the control plane's own k8s.io/kubernetes, containerd (+ ctr, the runc shim), the CNI
  # plugins, kube-router (its NetworkPolicy firewall only) and a CoreDNS with the plugins it uses.
  [kubenode]="k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy"
  [containerd]="github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr"
  [cni]="github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local github.com/containernetworking/plugins/plugins/main/loopback"
  [kube-router]="github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
  [coredns]="./cmd/coredns"
)
order=(etcd kube kwok controller-gen helm lint)
node_groups=(kubenode containerd cni kube-router coredns)

# Where a group's binaries go: the node's under bin/node (the CNI plugins in bin/node/cni, the
# directory the containerd config names), the rest in bin/.
declare -A outdir=(
  [kubenode]=node [containerd]=node [cni]=node/cni [kube-router]=node [coredns]=node
)
# Build tags and cgo, per group: containerd without cgo has no btrfs, devmapper or zfs snapshotter.
declare -A tags=([containerd]="no_btrfs no_devmapper no_zfs")
declare -A cgo=([kubenode]=0 [containerd]=0 [cni]=0 [kube-router]=0 [coredns]=0)

# The Kubernetes binaries report their release (kubectl version, helm's
# kubeVersion checks) only when it is stamped in at link time.
kube_version=$(awk '{for (i = 1; i < NF; i++) if ($i == "k8s.io/kubernetes") print $(i+1)}' "$root/tools/kube/go.mod" | head -1)
kube_minor=$(echo "$kube_version" | cut -d. -f2)
declare -A ldflags=(
  [kube]="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kube_minor -X k8s.io/client-go/pkg/version.gitVersion=$kube_version -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$kube_minor"
)
ldflags[kubenode]=${ldflags[kube]}
if [ "$(awk '{for (i = 1; i < NF; i++) if ($i == "k8s.io/kubernetes") print $(i+1)}' "$root/tools/kubenode/go.mod" | head -1)" != "$kube_version" ]; then
  echo "tools/kubenode must pin the same k8s.io/kubernetes as tools/kube ($kube_version)" >&2
  exit 1
fi
case "${1:-}" in
  --node) order=("${node_groups[@]}") ;;
  "") ;;
  *) order=("$@") ;;
esac

binary_name() {
  case "$1" in
    go.etcd.io/etcd/server/v3) echo etcd ;;
    *) basename "$1" ;;
  esac
}

for group in "${order[@]}"; do
  pkgs=${packages[$group]:?unknown tools group $group}
  out="$bin${outdir[$group]:+/${outdir[$group]}}"
  mkdir -p "$out"
  # The stamp: go.mod, go.sum, ldflags; for the node groups also their own main packages, tags and cgo.
  want=$( (cat "$root/tools/$group/go.mod" "$root/tools/$group/go.sum"; echo "${ldflags[$group]:-}"
    if [ -n "${cgo[$group]:-}" ]; then
      find "$root/tools/$group" -name '*.go' -path '*/cmd/*' | sort | xargs -r cat
      echo "tags=${tags[$group]:-} cgo=${cgo[$group]}"
    fi) | sha256sum | cut -c1-16)
  fresh=yes
  for p in $pkgs; do [ -x "$out/$(binary_name "$p")" ] || fresh=no; done
  if [ "$fresh" = yes ] && [ "$(cat "$stamps/$group" 2>/dev/null)" = "$want" ]; then
    echo "tools: $group up to date"
    continue
  fi
  echo "tools: building $group ..."
  start=$SECONDS
  for p in $pkgs; do
    (cd "$root/tools/$group" && env ${cgo[$group]:+CGO_ENABLED=${cgo[$group]}} go build -trimpath -tags "${tags[$group]:-}" \
      -ldflags "${ldflags[$group]:-}" -o "$out/$(binary_name "$p")" "$p")
  done
  echo "$want" > "$stamps/$group"
  echo "tools: built $group in $((SECONDS - start))s"
done
