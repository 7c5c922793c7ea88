#!/usr/bin/env bash
# Build the reference of the differential conformance suite: KubeVirt v1.9.0's own
# virt-controller and virt-api (cmd/virt-controller and cmd/virt-api of the kubevirt.io/kubevirt
# module), from the Go module proxy, through tests/reference/go.mod. The three virt-template
# modules KubeVirt v1.9.0 requires are not served by the proxy; tests/reference/standin/ holds
# this project's own minimal stand-ins for the two the controller's build reaches (see
# tests/reference/go.mod); virt-api's build reaches none.
#
# Usage: scripts/reference-controller.sh   builds once into target/reference/<version>/bin and
#                                          prints that folder; later calls re-use the cache.
# Needs Go 1.26. The first build takes 20-30 minutes on 2 cores (niced: the machine is shared);
# the two binaries share most packages, built once.
# VIRTCTL_REFERENCE_CACHE moves the cache (default target/reference). The suite finds the
# binary in the cache or through VIRTCTL_REFERENCE_CONTROLLER (see docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v go >/dev/null 2>&1; then
  echo "scripts/reference-controller.sh: go not found (Go 1.26 is needed)" >&2
  exit 1
fi

version=$(awk '$1 == "kubevirt.io/kubevirt" { print $2 }' tests/reference/go.mod | head -n 1)
if [ -z "$version" ]; then
  echo "scripts/reference-controller.sh: tests/reference/go.mod names no kubevirt.io/kubevirt version" >&2
  exit 1
fi
cache=${VIRTCTL_REFERENCE_CACHE:-target/reference}
case "$cache" in /*) ;; *) cache="$root/$cache" ;; esac
out="$cache/$version"

# The stamp is the hash of every input; a changed go.mod, go.sum or stand-in rebuilds.
stamp=$(find tests/reference -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 \
  | sort -z | xargs -0 cat | cat - scripts/reference-controller.sh | sha256sum | cut -c1-16)
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ]; then
  echo "$out/bin"
  exit 0
fi

rm -rf "$out"
mkdir -p "$out/bin"
started=$(date +%s)
echo "building virt-controller and virt-api $version into $out (first build: 20-30 minutes on 2 cores)" >&2
(
  cd tests/reference
  nice -n 10 go build -trimpath -o "$out/bin/" \
    kubevirt.io/kubevirt/cmd/virt-controller kubevirt.io/kubevirt/cmd/virt-api
)

echo "$stamp" >"$out/stamp"
echo "built in $(($(date +%s) - started)) s" >&2
echo "$out/bin"
