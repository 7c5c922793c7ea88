#!/usr/bin/env bash
# The long fault soak (tests/fault_soak.rs, issue 38): FAULT_SOAK_VMS VMs (200) under one
# seed's fault plan, in rounds until FAULT_SOAK_EVENTS VM events (10000), then the soak's
# invariants. Prints the plan first and the run's figures last (docs/performance.md,
# "Property-based fault soak (issue 38)", records them), plus the machine's load before and after.
#
# usage: [FAULT_SOAK_SEED=N] [FAULT_SOAK_VMS=N] [FAULT_SOAK_EVENTS=N] scripts/fault-soak.sh [--release]
#   --release   build with the release profile (fat LTO: a long first build)
set -euo pipefail
cd "$(dirname "$0")/.."

profile=()
if [ "${1:-}" = "--release" ]; then
  profile=(--release)
fi
export FAULT_SOAK_SEED=${FAULT_SOAK_SEED:-1}
export FAULT_SOAK_VMS=${FAULT_SOAK_VMS:-200}
export FAULT_SOAK_EVENTS=${FAULT_SOAK_EVENTS:-10000}
echo "load before: $(uptime)"
start=$(date +%s)
cargo test "${profile[@]}" --test integration fault_soak::fault_soak_long -- --ignored --nocapture
echo "load after: $(uptime); $(( $(date +%s) - start )) s in all"
