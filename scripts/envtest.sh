#!/usr/bin/env bash
# Build the real control plane the tests run against ("envtest" for this project): etcd,
# kube-apiserver, kube-controller-manager and kubectl of Kubernetes v1.36, from the Go module
# proxy (tests/envtest/go.mod), plus KubeVirt v1.9.0's and CDI's CustomResourceDefinitions
# generated from their API modules (tests/envtest/crds), and a ServiceAccount signing key.
#
# Usage: scripts/envtest.sh        builds once into target/envtest/<version>/ and prints the
#                                  bin folder; later calls re-use the cache (a few seconds).
# Needs Go 1.26 and openssl. The first build takes 10-20 minutes on 2 cores (the Go build cache
# keeps most of it after that). VIRTCTL_ENVTEST_CACHE moves the cache (default target/envtest).
# The tests find the result in the cache or through VIRTCTL_ENVTEST_BIN (see docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

for tool in go openssl; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "scripts/envtest.sh: $tool not found (Go 1.26 and openssl are needed)" >&2
    exit 1
  fi
done

version=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' tests/envtest/go.mod)
if [ -z "$version" ]; then
  echo "scripts/envtest.sh: tests/envtest/go.mod names no k8s.io/kubernetes version" >&2
  exit 1
fi
cache=${VIRTCTL_ENVTEST_CACHE:-target/envtest}
case "$cache" in /*) ;; *) cache="$root/$cache" ;; esac
out="$cache/$version"

# The stamp is the hash of every input; a changed go.mod, go.sum or main.go rebuilds.
stamp=$(cat tests/envtest/go.mod tests/envtest/go.sum tests/envtest/etcd/main.go \
  tests/envtest/crds/go.mod tests/envtest/crds/go.sum tests/envtest/crds/main.go \
  scripts/envtest.sh | sha256sum | cut -c1-16)
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ]; then
  echo "$out/bin"
  exit 0
fi

rm -rf "$out"
mkdir -p "$out/bin" "$out/crds"
started=$(date +%s)
echo "building the control plane $version into $out (first build: 10-20 minutes on 2 cores)" >&2
(
  cd tests/envtest
  go build -trimpath -o "$out/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl \
    ./etcd
)

generated=$(mktemp -d)
trap 'rm -rf "$generated"' EXIT
(
  cd tests/envtest/crds
  # As KubeVirt's hack/generate.sh and CDI's Makefile run it, over the published API modules.
  go tool controller-gen crd:allowDangerousTypes=true \
    paths=kubevirt.io/api/core/v1 \
    paths=kubevirt.io/api/instancetype/v1beta1 \
    paths=kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1 \
    output:crd:dir="$generated"
  go run . "$generated" "$out/crds" >/dev/null
)

openssl genrsa -out "$out/service-account.key" 2048 2>/dev/null
openssl rsa -in "$out/service-account.key" -pubout -out "$out/service-account.pub" 2>/dev/null

echo "$stamp" >"$out/stamp"
echo "built in $(($(date +%s) - started)) s" >&2
echo "$out/bin"
