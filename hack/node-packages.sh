#!/usr/bin/env bash
# Installs the Debian packages the real-node tier needs and Go cannot build for it:
# iptables and ipset (kube-proxy's Service rules and kube-router's NetworkPolicy firewall)
# and runc (containerd's OCI runtime). Only what is missing; nothing else is touched.
#
# usage: hack/node-packages.sh [--check]   --check: list what is missing, exit 1 if anything is
set -euo pipefail

want=(iptables ipset runc)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "node packages: ${want[*]} installed"
  exit 0
fi
if [ "${1:-}" = --check ]; then
  echo "node packages missing: ${missing[*]} (hack/node-packages.sh installs them)"
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "node packages missing: ${missing[*]}; run hack/node-packages.sh as root" >&2
  exit 1
fi
echo "node packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
