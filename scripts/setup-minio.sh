#!/usr/bin/env bash
# Builds the MinIO server (an S3-compatible store that verifies SigV4, presigned URLs included) from the Go module
# proxy and caches it under $PEERLOAD_CACHE/minio-<version>/bin. Idempotent: a second run only checks the binary.
# Prints the bin directory on stdout.
#
# MinIO publishes no semver tags, so the module proxy only knows pseudo-versions; the one below is pinned (the
# binary then reports its version as DEVELOPMENT.GOGET). No `mc` is built: tests create buckets and objects through
# the S3 API (test/support/minio.ts).
source "$(dirname "$0")/lib.sh"

MINIO_VERSION="${PEERLOAD_MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
OUT="$PEERLOAD_CACHE/minio-${MINIO_VERSION}"
BIN="$OUT/bin"

if [[ -x "$BIN/minio" ]]; then
  echo "$BIN"; exit 0
fi
command -v go >/dev/null || { log "go is required to build MinIO (apt-get install golang or see README)"; exit 1; }
mkdir -p "$BIN"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

log "building MinIO $MINIO_VERSION (several minutes on 2 cores; cached afterwards)"
start=$(date +%s)
# Build into a scratch GOBIN and move the result into place, so an interrupted build never leaves a half binary.
GOBIN="$work" CGO_ENABLED=0 with_progress "building MinIO" "$(next_step)" \
  go install -trimpath -ldflags "-s -w" "github.com/minio/minio@${MINIO_VERSION}" >&2
mv "$work/minio" "$BIN/minio"
log "MinIO ready in $BIN ($(( $(date +%s) - start ))s)"
echo "$BIN"
