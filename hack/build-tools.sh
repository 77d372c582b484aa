#!/usr/bin/env bash
# Builds the test bed's binaries into bin/ from the pinned tools modules under tools/.
# A binary is rebuilt only when its tools module (go.mod + go.sum) changed since it was
# built, so a warm machine pays nothing and a fresh one pays the cold build once.
#
# usage: hack/build-tools.sh [group...]   groups: etcd kube kwok controller-gen helm lint
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
)
order=(etcd kube kwok controller-gen helm lint)

# The Kubernetes binaries report their release (kubectl version, helm's
# kubeVersion checks) only when it is stamped in at link time.
kube_version=$(awk '{for (i = 1; i < NF; i++) if ($i == "k8s.io/kubernetes") print $(i+1)}' "$root/tools/kube/go.mod" | head -1)
kube_minor=$(echo "$kube_version" | cut -d. -f2)
declare -A ldflags=(
  [kube]="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kube_minor -X k8s.io/client-go/pkg/version.gitVersion=$kube_version -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$kube_minor"
)
[ $# -gt 0 ] && order=("$@")

binary_name() {
  case "$1" in
    go.etcd.io/etcd/server/v3) echo etcd ;;
    *) basename "$1" ;;
  esac
}

for group in "${order[@]}"; do
  pkgs=${packages[$group]:?unknown tools group $group}
  want=$( (cat "$root/tools/$group/go.mod" "$root/tools/$group/go.sum"; echo "${ldflags[$group]:-}") | sha256sum | cut -c1-16)
  fresh=yes
  for p in $pkgs; do [ -x "$bin/$(binary_name "$p")" ] || fresh=no; done
  if [ "$fresh" = yes ] && [ "$(cat "$stamps/$group" 2>/dev/null)" = "$want" ]; then
    echo "tools: $group up to date"
    continue
  fi
  echo "tools: building $group ..."
  start=$SECONDS
  for p in $pkgs; do
    (cd "$root/tools/$group" && go build -trimpath -ldflags "${ldflags[$group]:-}" -o "$bin/$(binary_name "$p")" "$p")
  done
  echo "$want" > "$stamps/$group"
  echo "tools: built $group in $((SECONDS - start))s"
done
