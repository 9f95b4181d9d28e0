#!/usr/bin/env bash
# Builds the CNCF Distribution registry (`registry`, github.com/distribution/distribution/v3) from the Go module proxy
# into $PEERLOAD_CACHE/registry-<version>/bin. Idempotent. Prints the bin directory.
#
# Distribution rather than go-containerregistry's cmd/registry: the latter keeps blobs in memory and has no
# authentication at all, while Distribution serves from a filesystem store and verifies htpasswd Basic credentials
# and Bearer tokens (JWTs signed by a token server whose certificate it is given), which the OCI tests need.
source "$(dirname "$0")/lib.sh"
VERSION="${PEERLOAD_REGISTRY_VERSION:-v3.1.2}"
BIN="$PEERLOAD_CACHE/registry-$VERSION/bin"
if [[ -x "$BIN/registry" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is required to build the OCI registry"; exit 1; }
mkdir -p "$BIN"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
# Into a scratch GOBIN first, so an interrupted build never leaves a half binary in the cache.
GOBIN="$work" CGO_ENABLED=0 with_progress "building the OCI registry (distribution $VERSION)" "$(next_step)" \
  go install -trimpath -ldflags "-s -w" "github.com/distribution/distribution/v3/cmd/registry@$VERSION" >&2
mv "$work/registry" "$BIN/registry"
echo "$BIN"
