#!/usr/bin/env bash
# Builds scripts/kstatus (kstatus of sigs.k8s.io/cli-utils, the library Flux and kpt use to read resource health)
# into $PEERLOAD_CACHE/kstatus-<cli-utils version>/bin. Idempotent. Prints the bin directory.
source "$(dirname "$0")/lib.sh"
VERSION="$(awk '$1 == "sigs.k8s.io/cli-utils" {print $2}' "$REPO_ROOT/scripts/kstatus/go.mod")"
SUM="$(cat "$REPO_ROOT/scripts/kstatus/main.go" "$REPO_ROOT/scripts/kstatus/go.mod" | sha256sum | cut -c1-12)"
BIN="$PEERLOAD_CACHE/kstatus-$VERSION-$SUM/bin"
if [[ -x "$BIN/kstatus" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is required to build kstatus"; exit 1; }
log "building kstatus against cli-utils $VERSION"
mkdir -p "$BIN"
(cd "$REPO_ROOT/scripts/kstatus" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/kstatus" .) >&2
echo "$BIN"
