#!/usr/bin/env bash
# Builds modctl (github.com/modelpack/modctl: builds ModelPack artifacts from a Modelfile and pushes them to a
# registry) from the Go module proxy into $PEERLOAD_CACHE/modctl-<version>/bin. Idempotent. Prints the bin directory.
#
# `go install github.com/modelpack/modctl@v0.2.2` fails here: it asks the proxy for the module's version list (to
# look for a deprecation notice) and the proxy answers 403. So the build goes through a throw-away module that
# requires modctl at that version; the Go command then fetches exact versions only. Without the `enable_libgit2`
# build tag modctl uses go-git, so the build is pure Go (no libgit2, no cgo).
source "$(dirname "$0")/lib.sh"
VERSION="${PEERLOAD_MODCTL_VERSION:-v0.2.2}"
BIN="$PEERLOAD_CACHE/modctl-$VERSION/bin"
if [[ -x "$BIN/modctl" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is required to build modctl"; exit 1; }
mkdir -p "$BIN"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cat >"$work/go.mod" <<MOD
module peerload.local/modctl-build

go 1.25.5

require github.com/modelpack/modctl $VERSION
MOD
build() {
  (cd "$work" && go mod download github.com/modelpack/modctl &&
    go build -mod=mod -trimpath -ldflags "-s -w" -o "$work/modctl" github.com/modelpack/modctl)
}
CGO_ENABLED=0 with_progress "building modctl $VERSION" "$(next_step)" build >&2
# Moved into place whole, so an interrupted build never leaves a half binary in the cache.
mv "$work/modctl" "$BIN/modctl"
echo "$BIN"
