#!/usr/bin/env bash
# Builds, from Debian packages, the three base images the Containerfiles take as build arguments, for building
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
# The binary of the npm `node` package (its bin/node is a hard link to the platform package's).
NODE_DIST=$(cd node_modules/node 2>/dev/null && pwd) ||
  { log "node_modules/node is missing: run scripts/setup.sh first"; exit 1; }
NODE_VERSION=$("$NODE_DIST/bin/node" --version)
# The npm `node` package carries no npm; npm itself is one self-contained package on the registry.
NPM_VERSION="${PEERLOAD_IMAGE_NPM_VERSION:-11.21.2}"
REV=5 # bump when the recipes below change
KEY="debian-$SUITE-node$NODE_VERSION-npm$NPM_VERSION-r$REV"
DIR="$PEERLOAD_CACHE/image-bases-$KEY"
mkdir -p "$DIR"
if [[ ! -f $DIR/npm/package.json ]]; then
  log "fetching npm $NPM_VERSION"
  tgz=$(cd "$DIR" && npm pack --silent "npm@$NPM_VERSION")
  rm -rf "$DIR/npm" && mkdir "$DIR/npm.tmp" && tar -xzf "$DIR/$tgz" -C "$DIR/npm.tmp" --strip-components=1
  mv "$DIR/npm.tmp" "$DIR/npm" && rm "$DIR/$tgz"
fi

# Customize hooks had no effect in mmdebstrap's extract mode, so every variant is finished here, on a directory.
finish() { # rootfs-dir
  local r=$1
  # A nonroot user as distroless has one, so tools that look the UID up find a name.
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$r/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$r/etc/group"
  mkdir -p "$r/home/nonroot" "$r/tmp"
  chown 65532:65532 "$r/home/nonroot"
  chmod 1777 "$r/tmp"
  # Device nodes: the container runtime mounts its own /dev.
  find "$r/dev" -mindepth 1 -delete
  # Documentation, man pages and the package databases are not needed to run anything here.
  rm -rf "$r"/usr/share/doc "$r"/usr/share/man "$r"/usr/share/info "$r"/usr/share/locale "$r"/var/cache/apt \
    "$r"/var/lib/apt/lists
}

rootfs() { # name variant packages [extra step]
  local name=$1 variant=$2 include=$3 extra=${4:-}
  if [[ -s $DIR/$name.tar ]]; then return; fi
  log "mmdebstrap $SUITE ($name: $variant${include:+ + $include})"
  local r="$DIR/$name.rootfs"
  rm -rf "$r"
  mmdebstrap --quiet --mode=root --format=directory --variant="$variant" ${include:+--include="$include"} \
    "$SUITE" "$r" "$MIRROR" >&2
  finish "$r"
  [[ -z $extra ]] || "$extra" "$r"
  tar -C "$r" --numeric-owner -cf "$DIR/$name.tar.tmp" .
  mv "$DIR/$name.tar.tmp" "$DIR/$name.tar"
  rm -rf "$r"
}

# Node's CA bundle is built in, so npm needs no ca-certificates package; the layout is the node image's.
add_node() { # rootfs-dir
  mkdir -p "$1/usr/local/bin" "$1/usr/local/lib/node_modules"
  cp -a "$NODE_DIST/bin/node" "$1/usr/local/bin/"
  cp -a "$DIR/npm" "$1/usr/local/lib/node_modules/"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"
}

rootfs runtime extract libc6,libgcc-s1,libstdc++6
rootfs jar extract busybox-static
rootfs build essential libstdc++6 add_node

import() { # name -> image
  local image="localhost/peerload-base-$1:$KEY"
  if ! image_exists "$image"; then
    log "importing $1 base as $image"
    local ctr; ctr=$("${BUILDAH[@]}" from --quiet scratch)
    "${BUILDAH[@]}" add --quiet "$ctr" "$DIR/$1.tar" / >/dev/null
    "${BUILDAH[@]}" config --env PATH=/usr/local/bin:/usr/bin:/bin "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$image" >/dev/null
    # Bases of earlier recipes are copies of whole file systems (vfs): drop them.
    local old
    for old in $("${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' 2>/dev/null | grep "^localhost/peerload-base-$1:"); do
      [[ $old == "$image" ]] || "${BUILDAH[@]}" rmi "$old" >/dev/null 2>&1 || true
    done
  fi
  echo "$image"
}
echo "BUILD_IMAGE=$(import build)"
echo "RUNTIME_IMAGE=$(import runtime)"
echo "JAR_BASE_IMAGE=$(import jar)"
