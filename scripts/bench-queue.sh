#!/usr/bin/env bash
# The work queue against client-go's, side by side (issue 46): builds client-go v0.36's side
# (benches/clientgo-queue/, Go 1.26 and the Go module proxy; output in target/clientgo-queue/)
# and ours (benches/queue_vs_client_go.rs, the release profile: fat LTO, a long first build),
# runs them interleaved (client-go, ours, client-go, ours, ...) RUNS times (3) for each key kind,
# and prints adds/s per worker count (1, 3, 10) per program, the medians and their ratio, with
# the machine's load before and after. The scenario: benches/queue_vs_client_go.rs.
#
# usage: [RUNS=N] [MIN_SECONDS=S] [OURS=PATH] scripts/bench-queue.sh
#   MIN_SECONDS   each worker count is measured for at least this long per run (1)
#   OURS          our side's executable, already built (skips `cargo bench --no-run`, which
#                 also links the plugin binary with fat LTO)
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-3}
min_seconds=${MIN_SECONDS:-1}
out=target/clientgo-queue
mkdir -p "$out"
echo "building client-go's side ..." >&2
(cd benches/clientgo-queue && go build -o "../../$out/clientgo-queue" .)
clientgo=$out/clientgo-queue
ours=${OURS:-}
if [ -z "$ours" ]; then
  echo "building ours (release profile) ..." >&2
  ours=$(cargo bench --bench queue_vs_client_go --no-run --message-format=json \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
fi
if [ -z "$ours" ]; then
  echo "bench-queue: cargo did not report the bench's executable" >&2
  exit 1
fi

results=$(mktemp)
trap 'rm -f "$results"' EXIT
echo "load before: $(uptime)"
for run in $(seq "$runs"); do
  for keys in string shared; do
    echo "run $run/$runs, $keys keys ..." >&2
    "$clientgo" -keys "$keys" -min-seconds "$min_seconds" | sed "s/^/client-go $keys /" >>"$results"
    "$ours" --keys "$keys" --min-seconds "$min_seconds" | sed "s/^/virtctl-rs $keys /" >>"$results"
  done
done
echo "load after: $(uptime)"

# Lines: PROGRAM KEYS workers=N adds_per_sec=X
awk '
function median(list,   v, n, i, j, t) {
  n = split(list, v, " ")
  for (i = 2; i <= n; i++)
    for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function millions(list,   v, n, i, s) {
  n = split(list, v, " ")
  for (i = 1; i <= n; i++) s = s sprintf("%s%.2f", i > 1 ? " " : "", v[i] / 1e6)
  return s
}
{
  split($3, w, "="); split($4, a, "=")
  k = $2 SUBSEP w[2]
  runs[$1, k] = runs[$1, k] (runs[$1, k] == "" ? "" : " ") a[2]
  if (!(k in seen)) { seen[k] = 1; order[++n] = k }
}
END {
  printf "%-7s %-8s %-30s %-30s %-7s %s\n", "keys", "workers", "client-go M adds/s (median)", "virtctl-rs M adds/s (median)", "ratio", "goal"
  for (i = 1; i <= n; i++) {
    split(order[i], kw, SUBSEP)
    g = median(runs["client-go", order[i]]); r = median(runs["virtctl-rs", order[i]])
    goal = kw[1] == "string" ? 3 : 5
    printf "%-7s %-8s %-30s %-30s %-7s >= %dx %s\n", kw[1], kw[2],
      sprintf("%s (%.2f)", millions(runs["client-go", order[i]]), g / 1e6),
      sprintf("%s (%.2f)", millions(runs["virtctl-rs", order[i]]), r / 1e6),
      sprintf("%.2fx", r / g), goal, (r / g >= goal ? "met" : "NOT met")
  }
}' "$results"
