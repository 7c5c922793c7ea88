#!/usr/bin/env bash
# Our controller against KubeVirt v1.9.0's own virt-controller on the real API server, side by
# side (issue 46, item 2): builds what the bench needs (the real control plane,
# scripts/envtest.sh; KubeVirt's virt-controller, scripts/reference-controller.sh, 20-30 minutes
# the first time; the bench and the product binary in the release profile, fat LTO, a long
# first build) and runs benches/controller_vs_kubevirt.rs: VMS copies of demo-vm through NODES
# simulated nodes (`cluster nodes`), each controller alone under KubeVirt's 200/400 client
# limit, ROUNDS rounds of each side interleaved (ours, KubeVirt's, ...), each side on a fresh
# control plane; it prints each round, the medians and KubeVirt's over ours, and the load
# average before and after. What is measured and how: the bench's header comment.
#
# usage: [VMS=N] [ROUNDS=N] [NODES=N] [BENCH=PATH] [PLUGIN=PATH] scripts/bench-controllers.sh
#   VMS      VMs per round (1000)        ROUNDS   rounds of each side (3)
#   NODES    simulated nodes (20)
#   BENCH    the bench executable, already built (skips `cargo bench --no-run`)
#   PLUGIN   our side's kubectl-virtctl_rs, already built (skips `cargo build --release`)
# VIRTCTL_ENVTEST_CACHE and VIRTCTL_REFERENCE_CACHE move the two scripts' caches (the bench
# reads the same variables).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "control plane: $(bash scripts/envtest.sh)" >&2
echo "reference: $(bash scripts/reference-controller.sh)" >&2
bench=${BENCH:-}
if [ -z "$bench" ]; then
  echo "building the bench (release profile) ..." >&2
  bench=$(cargo bench --bench controller_vs_kubevirt --no-run --message-format=json \
    | grep '"name":"controller_vs_kubevirt"' \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
if [ -z "$bench" ]; then
  echo "bench-controllers: cargo did not report the bench's executable" >&2
  exit 1
fi
# Our side is the product binary as released: built after the bench, whose own copy of the
# binary has the dev-dependencies' features (tokio's test-util) and lands at the same path.
plugin=${PLUGIN:-}
if [ -z "$plugin" ]; then
  echo "building kubectl-virtctl_rs (release profile) ..." >&2
  plugin=$(cargo build --release --bin kubectl-virtctl_rs --message-format=json \
    | grep '"name":"kubectl-virtctl_rs"' \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
if [ -z "$plugin" ]; then
  echo "bench-controllers: cargo did not report kubectl-virtctl_rs's executable" >&2
  exit 1
fi

CONTROLLER_VS_KUBEVIRT_VMS=${VMS:-1000} \
  CONTROLLER_VS_KUBEVIRT_ROUNDS=${ROUNDS:-3} \
  CONTROLLER_VS_KUBEVIRT_NODES=${NODES:-20} \
  CONTROLLER_VS_KUBEVIRT_PLUGIN=$plugin \
  "$bench" --bench
