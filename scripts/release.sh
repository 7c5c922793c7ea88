#!/usr/bin/env bash
# Build the release archive of kubectl-virtctl_rs for this platform, record its sha256 in
# OUT/SHA256SUMS, and render the krew manifest OUT/virtctl-rs.yaml from krew/virtctl-rs.yaml.in.
#
# usage: scripts/release.sh [--out DIR] [--homepage URL] [--base-uri URL] [--allow-missing]
#   --out DIR        where archives, SHA256SUMS and the manifest go (default: dist)
#   --homepage URL   the manifest's homepage (default: $VIRTCTL_HOMEPAGE or the placeholder)
#   --base-uri URL   where the archives are published; each uri is URL/ARCHIVE
#   --allow-missing  leave out platforms with no line in SHA256SUMS (default: fail)
# Run it on each platform (or copy their archives and SHA256SUMS lines into OUT), then once
# more to render the manifest with every platform. BIN=path skips `cargo build --release`
# and packages that binary (the tests do this with the debug build).
set -euo pipefail
cd "$(dirname "$0")/.."

out=dist
homepage=${VIRTCTL_HOMEPAGE:-"https://github.com/example/virtctl-rs"}
base_uri=""
allow_missing=0
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --homepage) homepage=$2; shift 2 ;;
    --base-uri) base_uri=$2; shift 2 ;;
    --allow-missing) allow_missing=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "release.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ -n "$version" ] || { echo "release.sh: no version in Cargo.toml" >&2; exit 1; }
base_uri=${base_uri:-"$homepage/releases/download/v$version"}

# This platform, in krew's os/arch terms.
host=$(rustc -vV | sed -n 's/^host: //p')
case $host in
  x86_64-*) arch=amd64 ;;
  aarch64-*|arm64-*) arch=arm64 ;;
  *) echo "release.sh: unsupported host $host" >&2; exit 1 ;;
esac
case $host in
  *-linux-*) os=linux; exe="" ;;
  *-apple-darwin) os=darwin; exe="" ;;
  *-windows-*) os=windows; exe=".exe" ;;
  *) echo "release.sh: unsupported host $host" >&2; exit 1 ;;
esac

if [ -z "${BIN:-}" ]; then
  cargo build --release --locked --bin kubectl-virtctl_rs
  BIN=target/release/kubectl-virtctl_rs$exe
fi
[ -f "$BIN" ] || { echo "release.sh: $BIN not found" >&2; exit 1; }

mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$BIN" "$stage/kubectl-virtctl_rs$exe"
cp LICENSE "$stage/LICENSE"
archive="virtctl-rs-v$version-$os-$arch.tar.gz"
# Reproducible: fixed order, owner and time.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
  -czf "$out/$archive" -C "$stage" "kubectl-virtctl_rs$exe" LICENSE
sha=$(sha256sum "$out/$archive" | cut -d' ' -f1)
touch "$out/SHA256SUMS"
grep -v "  $archive\$" "$out/SHA256SUMS" > "$stage/sums" || true
echo "$sha  $archive" >> "$stage/sums"
sort -k2 "$stage/sums" > "$out/SHA256SUMS"
echo "built $out/$archive ($sha)" >&2

# Render: every platform whose archive has a line in SHA256SUMS.
sed_args=(-e "s|@VERSION@|$version|g" -e "s|@HOMEPAGE@|$homepage|g")
missing=()
for platform in linux-amd64 linux-arm64 darwin-amd64 darwin-arm64 windows-amd64; do
  name="virtctl-rs-v$version-$platform.tar.gz"
  key=$(echo "$platform" | tr 'a-z-' 'A-Z_')
  psha=$(awk -v f="$name" '$2 == f { print $1 }' "$out/SHA256SUMS")
  if [ -n "$psha" ]; then
    sed_args+=(-e "s|@URI_$key@|$base_uri/$name|" -e "s|@SHA256_$key@|$psha|")
  else
    missing+=("$platform")
  fi
done
if [ ${#missing[@]} -gt 0 ] && [ $allow_missing = 0 ]; then
  echo "release.sh: no archive for ${missing[*]} in $out/SHA256SUMS (build them there, or --allow-missing)" >&2
  exit 1
fi
# Drop the template's comment header and the platform blocks still holding a placeholder.
sed "${sed_args[@]}" krew/virtctl-rs.yaml.in | awk '
  /^#/ && !started { next }
  { started = 1 }
  /^  - selector:/ { flush(); inblock = 1 }
  inblock { block = block $0 "\n"; next }
  { print }
  END { flush() }
  function flush() { if (inblock && block !~ /@SHA256_/) printf "%s", block; block = ""; inblock = 0 }
' > "$out/virtctl-rs.yaml"
echo "rendered $out/virtctl-rs.yaml${missing:+ (left out: ${missing[*]})}" >&2
