#!/usr/bin/env bash
# Render the krew plugin manifest for a release archive.
# usage: krew/render-manifest.sh VERSION ARCHIVE URI [HOMEPAGE] > virtctl-rs.yaml
# ARCHIVE is a .tar.gz holding kubectl-virtctl_rs (built with `cargo build --release`) and LICENSE.
set -euo pipefail
version=$1 archive=$2 uri=$3 homepage=${4:-"https://example.invalid/virtctl-rs"}
sha=$(sha256sum "$archive" | cut -d' ' -f1)
sed -e "s|@VERSION@|$version|" -e "s|@URI@|$uri|" -e "s|@SHA256@|$sha|" -e "s|@HOMEPAGE@|$homepage|" \
  "$(dirname "$0")/virtctl-rs.yaml.in"
