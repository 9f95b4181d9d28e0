#!/usr/bin/env bash
# Builds kustomize (renders deploy/ for the deploy tests) from the Go module proxy into
# $PEERLOAD_CACHE/kustomize-<version>/bin. Idempotent. Prints the bin directory.
source "$(dirname "$0")/lib.sh"
VERSION="${PEERLOAD_KUSTOMIZE_VERSION:-v5.5.0}"
BIN="$PEERLOAD_CACHE/kustomize-$VERSION/bin"
if [[ -x "$BIN/kustomize" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is required to build kustomize"; exit 1; }
log "building kustomize $VERSION"
mkdir -p "$BIN"
GOBIN="$BIN" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kustomize/kustomize/v5@$VERSION" >&2
echo "$BIN"
