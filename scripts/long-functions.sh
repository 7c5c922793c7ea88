#!/usr/bin/env bash
# Lists the library's and the binary's functions longer than a threshold, longest first, as
# clippy's `too_many_lines` counts them (code lines: blank and comment-only lines excluded;
# test code excluded).
#
#   bash scripts/long-functions.sh          # functions over 150 lines (the house limit)
#   bash scripts/long-functions.sh 100      # over 100
#
# The house limit itself is enforced by clippy (clippy.toml, `clippy::too_many_lines` in
# src/lib.rs); this script shows how close the code is to it.
set -euo pipefail
threshold="${1:-150}"
cd "$(dirname "$0")/.."
conf="$(mktemp -d)"
trap 'rm -rf "$conf"' EXIT
printf 'too-many-lines-threshold = %s\n' "$threshold" >"$conf/clippy.toml"
# clippy re-lints only what changed; the threshold is not a change it tracks.
touch src/lib.rs src/main.rs
CLIPPY_CONF_DIR="$conf" cargo clippy --quiet --lib --bins --message-format=short -- \
    -A clippy::all -W clippy::too_many_lines 2>&1 |
    sed -nE 's/^([^:]+:[0-9]+):[0-9]+: warning: this function has too many lines \(([0-9]+)\/[0-9]+\).*/\2 \1/p' |
    sort -rn | awk '{ printf "%5d  %s\n", $1, $2; n++ } END { printf "%d function(s) over '"$threshold"' lines\n", n }'
