#!/usr/bin/env bash
# KServe from the Go module proxy, cached by version. Idempotent; prints the directory.
#   setup-kserve.sh --crds  KServe's CRDs (config/crd/full of the module) into $PEERLOAD_CACHE/kserve-crds-<version>:
#                           a download of the module only (seconds), for the tests that apply KServe objects.
#   setup-kserve.sh         also builds the controller manager (github.com/kserve/kserve/cmd/manager: the
#                           InferenceService controller and its pod-mutating webhook, which puts the storage
#                           initializer into predictor pods) into $PEERLOAD_CACHE/kserve-<version>/bin, with the
#                           CRDs in $PEERLOAD_CACHE/kserve-<version>/crd and its inferenceservice-config ConfigMap.
#                           Heavy: the build time is in build-seconds. Beside them, config/ holds the module's
#                           install manifests an in-cluster controller needs (rbac, manager, webhook, the default
#                           ClusterStorageContainer, the serving runtimes): scripts/build-cluster-images.sh kserve
#                           makes the manager's image.
#
# kserve's go.mod carries `replace` directives (controller-runtime, k8s.io/*, grpc...), which `go install pkg@v`
# refuses. So the build goes through a throw-away module whose go.mod is kserve's own (same requires, same
# replaces) under another module path, plus a requirement on kserve itself: the Go command then resolves exactly the
# versions kserve's release was built with. It runs under `nice` so it does not starve the rest of a shared machine.
source "$(dirname "$0")/lib.sh"
VERSION="${PEERLOAD_KSERVE_VERSION:-v0.20.0}"
CRDS_ONLY=0
[[ "${1:-}" == --crds ]] && CRDS_ONLY=1
CRDS="$PEERLOAD_CACHE/kserve-crds-$VERSION"
OUT="$PEERLOAD_CACHE/kserve-$VERSION"
if (( CRDS_ONLY )) && [[ -d "$CRDS" ]]; then echo "$CRDS"; exit 0; fi
# The module's manifests the in-cluster install takes (copied whole, then moved into place).
CONFIG_DIRS=(rbac manager webhook storagecontainers runtimes)
if (( ! CRDS_ONLY )) && [[ -x "$OUT/bin/manager" && -d "$OUT/crd" && -f "$OUT/inferenceservice-config.yaml" ]]; then
  [[ -d "$OUT/config" ]] && { echo "$OUT"; exit 0; }
  # A cache from before config/ was kept: the manifests only, no rebuild.
  HAVE_MANAGER=1
fi
command -v go >/dev/null || { log "go is required to fetch KServe from the Go module proxy"; exit 1; }
work="$(mktemp -d)"; trap 'rm -rf "$work" "$CRDS.tmp" "$OUT.tmp-crd" "$OUT.tmp-config"' EXIT
printf 'module peerload.local/kserve-build\n' >"$work/go.mod"
src="$(cd "$work" && go mod download -json github.com/kserve/kserve@"$VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$src/config/crd/full" ]] || { log "kserve $VERSION did not download"; exit 1; }
# Copied whole then moved into place, so an interrupted run never leaves half a directory in the cache.
copy_crds() { rm -rf "$2"; cp -r "$src/config/crd/full" "$2"; chmod -R u+w "$2"; rm -rf "$1"; mv "$2" "$1"; }
if (( CRDS_ONLY )); then copy_crds "$CRDS" "$CRDS.tmp"; echo "$CRDS"; exit 0; fi
copy_config() {
  rm -rf "$OUT.tmp-config"; mkdir -p "$OUT.tmp-config"
  for d in "${CONFIG_DIRS[@]}"; do cp -r "$src/config/$d" "$OUT.tmp-config/"; done
  chmod -R u+w "$OUT.tmp-config"; rm -rf "$OUT/config"; mv "$OUT.tmp-config" "$OUT/config"
}
if [[ ${HAVE_MANAGER:-0} == 1 ]]; then copy_config; echo "$OUT"; exit 0; fi
{
  printf 'module peerload.local/kserve-build\n\n'
  sed '1d' "$src/go.mod"
  printf '\nrequire github.com/kserve/kserve %s\n' "$VERSION"
} >"$work/go.mod"
cp "$src/go.sum" "$work/go.sum"
build() {
  (cd "$work" && nice -n 10 go build -mod=mod -trimpath -ldflags "-s -w" -o "$work/manager" \
    github.com/kserve/kserve/cmd/manager)
}
start=$(date +%s)
CGO_ENABLED=0 with_progress "building the KServe controller $VERSION" "$(next_step)" build >&2
mkdir -p "$OUT/bin"
copy_crds "$OUT/crd" "$OUT.tmp-crd"
cp "$src/config/configmap/inferenceservice.yaml" "$OUT/inferenceservice-config.yaml"
copy_config
mv "$work/manager" "$OUT/bin/manager"
echo "$(( $(date +%s) - start ))" >"$OUT/build-seconds"
echo "$OUT"
