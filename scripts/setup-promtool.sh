#!/usr/bin/env bash
# Builds promtool (validates deploy/monitoring's alert rules) from the Go module proxy into
# $PEERLOAD_CACHE/promtool-<version>/bin. Idempotent. Prints the bin directory.
source "$(dirname "$0")/lib.sh"
# Prometheus' Go module versions v0.3XX.Y are releases 3.XX.Y (the module path has no /v3).
VERSION="${PEERLOAD_PROMTOOL_VERSION:-v0.316.0}"
# Built without service discovery (Prometheus' own build tag `remove_all_sd`): promtool's rule checks and rule
# unit tests need none of it, and the cloud SDKs it would link are most of the build: 268 CPU-seconds with the tag,
# 613 without (measured 2026-11-29, module sources downloaded, empty build cache).
TAGS=remove_all_sd
BIN="$PEERLOAD_CACHE/promtool-$VERSION-$TAGS/bin"
if [[ -x "$BIN/promtool" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is required to build promtool"; exit 1; }
log "building promtool $VERSION"
mkdir -p "$BIN"
GOBIN="$BIN" CGO_ENABLED=0 with_progress "building promtool $VERSION" "$(next_step)" \
  go install -tags "$TAGS" -trimpath -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@$VERSION" >&2
echo "$BIN"
