#!/usr/bin/env bash
# tagged-packages.sh TAG PATTERN...: the packages matching PATTERN whose build
# changes under the build tag TAG (at least one file only that tag compiles).
# A test tier runs these only: the packages it adds nothing to were tested by
# the unit tier already, and running them again costs time and proves nothing.
set -euo pipefail
tag=$1
shift
format='{{.ImportPath}} {{.GoFiles}} {{.TestGoFiles}} {{.XTestGoFiles}}'
untagged=$(go list -f "$format" "$@")
tagged=$(go list -tags "$tag" -f "$format" "$@")
packages=$(comm -13 <(sort <<<"$untagged") <(sort <<<"$tagged") | cut -d' ' -f1)
if [ -z "$packages" ]; then
  echo "tagged-packages.sh: no package under $* has a file with the build tag $tag" >&2
  exit 1
fi
echo "$packages"
