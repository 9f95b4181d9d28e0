#!/usr/bin/env bash
# The release artifacts, from one command (`npm run release`), into dist/release/ (or --out DIR):
#   install.yaml                               CRDs, namespace, RBAC, Deployment of the release image (kubectl apply)
#   peerload-torchserve-plugin-<v>.jar         the TorchServe endpoint plugin (JUnit-tested by build-plugin.sh)
#   peerload-<v>.tgz                           the Helm chart (CRDs included)
#   peerload-image-<v>.oci.tar                 the operator image, OCI archive (skopeo copy / podman load)
#   peerload-torchserve-plugin-image-<v>.oci.tar  the plugin-jar image for the init container
#   SHA256SUMS
# The version is package.json's; a tag (RELEASE_TAG=v<version>, as CI passes it) must match it.
#   scripts/release.sh [--out DIR] [--debian-bases]   (--debian-bases: see scripts/build-image.sh)
# PEERLOAD_IMAGE_REPOSITORY (default ghcr.io/peerload) names where the images will be pushed.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
out=dist/release bases=()
while (($#)); do
  case $1 in
    --out) out=$2; shift ;;
    --debian-bases) bases=(--debian-bases) ;;
    *) log "unknown argument $1 (see the head of $0)"; exit 2 ;;
  esac
  shift
done
version=$(node_modules/.bin/node -p 'require("./package.json").version')
if [[ -n ${RELEASE_TAG:-} && $RELEASE_TAG != "v$version" ]]; then
  log "tag $RELEASE_TAG does not match package.json version $version: bump package.json (and charts/peerload/Chart.yaml) first"
  exit 1
fi
chart_version=$(sed -n 's/^version: //p' charts/peerload/Chart.yaml)
[[ $chart_version == "$version" ]] || { log "charts/peerload/Chart.yaml version $chart_version is not $version"; exit 1; }
repo=${PEERLOAD_IMAGE_REPOSITORY:-ghcr.io/peerload}
image="$repo/peerload:$version"
plugin_image="$repo/peerload-torchserve-plugin:$version"
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)

log "install.yaml ($image)"
kustomize="$(bash scripts/setup-kustomize.sh)/kustomize"
# kustomize takes only relative resource paths: the overlay lives inside the repository (dist/ is ignored).
overlay=dist/.release-overlay
rm -rf "$overlay" && mkdir -p "$overlay"; trap 'rm -rf "$REPO_ROOT/$overlay"' EXIT
cat > "$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [../../deploy/default]
images: [{name: ghcr.io/peerload/peerload, newName: $repo/peerload, newTag: "$version"}]
YAML
{ echo "# peerload $version: kubectl apply --server-side -f install.yaml"; "$kustomize" build "$overlay"; } > "$out/install.yaml"

log "plugin jar"
cp "$(bash scripts/build-plugin.sh)" "$out/"

log "Helm chart"
helm="$(bash scripts/setup-helm.sh)/helm"
"$helm" lint --strict charts/peerload --set "image.repository=$repo/peerload" >&2
"$helm" package charts/peerload --version "$version" --app-version "$version" -d "$out" >&2

log "images"
bash scripts/build-image.sh "${bases[@]}" --image operator --tag "$image" --oci-archive "$out/peerload-image-$version.oci.tar" >/dev/null
bash scripts/build-image.sh "${bases[@]}" --image plugin --tag "$plugin_image" \
  --oci-archive "$out/peerload-torchserve-plugin-image-$version.oci.tar" >/dev/null

(cd "$out" && sha256sum -- * > SHA256SUMS)
log "release $version in $out"
ls -1 "$out"
