#!/usr/bin/env bash
# Builds the operator image (Containerfile) or the plugin-jar image (plugin/Containerfile) with buildah.
#   scripts/build-image.sh [--debian-bases] [--image operator|plugin] [--tag REF] [--oci-archive FILE]
# --debian-bases  use the bases built from Debian packages by scripts/image-bases.sh (no registry needed)
# --oci-archive   also write the image as an OCI archive (a release artifact; `skopeo copy` or `podman load` it)
# Prints the image reference on stdout. An image already built from the same inputs (a hash of the build context
# and arguments, kept as a label) is reused, so an unchanged rebuild takes a second. No intermediate layers are
# kept: with vfs storage each layer is a full copy of the file system (GBs for the build stage).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib-image.sh"
cd "$REPO_ROOT"
image=operator tag='' archive='' bases=false
while (($#)); do
  case $1 in
    --debian-bases) bases=true ;;
    --image) image=$2; shift ;;
    --tag) tag=$2; shift ;;
    --oci-archive) archive=$2; shift ;;
    *) log "unknown argument $1 (see the head of $0)"; exit 2 ;;
  esac
  shift
done
version=$(node_modules/.bin/node -p 'require("./package.json").version')
case $image in
  operator)
    file=Containerfile; tag=${tag:-ghcr.io/peerload/peerload:$version}
    inputs=(Containerfile .containerignore package.json package-lock.json tsconfig.json scripts/bundle.ts src) ;;
  plugin)
    file=plugin/Containerfile; tag=${tag:-ghcr.io/peerload/peerload-torchserve-plugin:$version}
    [[ -f plugin/target/peerload-torchserve-plugin-$version.jar ]] || bash scripts/build-plugin.sh >/dev/null
    inputs=(plugin/Containerfile "plugin/target/peerload-torchserve-plugin-$version.jar") ;;
  *) log "--image must be operator or plugin"; exit 2 ;;
esac
args=(--build-arg "PLUGIN_VERSION=$version")
if $bases; then
  while IFS= read -r kv; do args+=(--build-arg "$kv"); done < <(bash scripts/image-bases.sh)
  args+=(--pull-never)
fi
# A TLS-intercepting egress proxy (as on this CI machine) needs its CA inside the build stage for npm.
ca=${NODE_EXTRA_CA_CERTS:-}
if [[ -n $ca && -f $ca ]]; then
  args+=(--volume "$ca:/run/peerload-extra-ca.crt:ro" --build-arg NODE_EXTRA_CA_CERTS=/run/peerload-extra-ca.crt)
fi
hash=$( { printf '%s\n' "${args[@]}"; find "${inputs[@]}" -type f -print0 | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-32)
if [[ $("${BUILDAH[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "io.peerload.inputs"}}' "$tag" 2>/dev/null) == "$hash" ]]; then
  # Said without log: a set-up step that found its image built did no work (timed_step).
  printf '[setup] %s is up to date (inputs %s)\n' "$tag" "$hash" >&2
else
  log "building $tag ($file)"
  "${BUILDAH[@]}" build --quiet --layers=false --isolation chroot -f "$file" -t "$tag" --label "io.peerload.inputs=$hash" \
    "${args[@]}" . >/dev/null
  "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true # the previous build of this tag, now untagged
fi
if [[ -n $archive ]]; then
  rm -f "$archive"
  "${BUILDAH[@]}" push --quiet "$tag" "oci-archive:$archive:$tag" >&2
fi
echo "$tag"
