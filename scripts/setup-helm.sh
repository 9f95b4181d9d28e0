#!/usr/bin/env bash
# Builds helm (lints and renders charts/peerload for the chart tests, packages it for releases) from the Go
# module proxy into $PEERLOAD_CACHE/helm-<version>/bin. Idempotent. Prints the bin directory.
source "$(dirname "$0")/lib.sh"
VERSION="${PEERLOAD_HELM_VERSION:-v3.21.4}"
BIN="$PEERLOAD_CACHE/helm-$VERSION/bin"
if [[ -x "$BIN/helm" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is required to build helm"; exit 1; }
log "building helm $VERSION"
mkdir -p "$BIN"
# helm prints its version from these variables; `go install` of the command alone leaves them empty.
GOBIN="$BIN" CGO_ENABLED=0 go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION" \
  "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
echo "$BIN"
