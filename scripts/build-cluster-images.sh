#!/usr/bin/env bash
# Builds, with buildah and without any registry, the container images the real-cluster tests run, under the names
# the repository's manifests (deploy/examples/, charts/peerload) and Dragonfly's chart use, and writes each as an
# OCI archive for `ctr -n k8s.io images import`:
#   peerload   ghcr.io/peerload/peerload:<package version>  scripts/build-image.sh --debian-bases
#   busybox    busybox:1.37                  Debian's busybox-static, every applet linked in /bin (init containers)
#   triton     nvcr.io/nvidia/tritonserver:24.10-py3   Triton 2.51 CPU of scripts/setup-triton.sh, laid out as
#              NVIDIA's image (/opt/tritonserver), with the Python it was installed with and numpy
#   manager    dragonflyoss/manager:v2.5.1   \  the binaries of scripts/setup-dragonfly.sh, at the paths and with
#   scheduler  dragonflyoss/scheduler:v2.5.1  } the entrypoints of Dragonfly's own images
#   client     dragonflyoss/client:v1.4.2    /  (dfdaemon: node peers and the seed peer)
#   mariadb    peerload.local/mariadb:<Debian version>  Debian's mariadb-server; the entrypoint makes the database
#   redis      peerload.local/redis:<Debian version>    Debian's redis-server; the entrypoint runs it in the foreground
#   kserve     kserve/kserve-controller:v0.20.0   KServe's controller manager of scripts/setup-kserve.sh (which builds
#              it once, about 10 minutes) as /manager, user 65532, as KServe's distroless image; for the opt-in
#              KServe suite only, so not among the defaults
#
#   scripts/build-cluster-images.sh [NAME...]   (default: all of the above but kserve)
# Prints one `<tag>\t<archive>` line per image. Each image is cached by a hash of its inputs (kept as the label
# io.peerload.inputs, as scripts/build-image.sh does) and its archive is named by that hash, so a second run only
# hashes and prints. The Debian root file systems are cached as tarballs beside the archives.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib-image.sh"
cd "$REPO_ROOT"

SUITE="${PEERLOAD_DEBIAN_SUITE:-bookworm}"
MIRROR="${PEERLOAD_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TRITON_VENV="${PEERLOAD_TRITON_VENV:-$PEERLOAD_CACHE/triton-pytriton0.7.0-py3.11}"
DRAGONFLY_BIN="${PEERLOAD_DRAGONFLY_BIN:-$PEERLOAD_CACHE/dragonfly-v2.5.1-client1.4.2/bin}"
REV=1 # bump when a recipe below changes in a way the hashed inputs do not show
DIR="$PEERLOAD_CACHE/cluster-images-debian-$SUITE-r$REV"
mkdir -p "$DIR"
ALL=(peerload busybox triton manager scheduler client mariadb redis)
OPTIONAL=(kserve)
(($#)) || set -- "${ALL[@]}"

# The hash of a tree that the set-up caches by version and never changes in place: paths, sizes and times (reading
# the 500 MB of Triton and Dragonfly on every run would cost seconds for nothing).
tree_stamp() { find "$@" -printf '%P %s %T@ %l\n' | LC_ALL=C sort; }

# A Debian root file system as a tarball, cached by its package list (mmdebstrap as scripts/image-bases.sh does).
#   variant extract: only the packages' files, no maintainer scripts (no shell unless asked for)
#   variant essential: Debian's essential set (sh, coreutils) plus the packages, installed by dpkg
debian_rootfs() { # name variant packages -> prints the tarball's path
  local name=$1 variant=$2 include=$3
  local tar
  tar="$DIR/rootfs-$name-$(printf '%s %s %s' "$SUITE" "$variant" "$include" | sha256sum | cut -c1-16).tar"
  if [[ ! -s $tar ]]; then
    log "mmdebstrap $SUITE ($name: $variant + $include)"
    local r="$tar.d"
    rm -rf "$r"
    mmdebstrap --quiet --mode=root --format=directory --variant="$variant" --include="$include" \
      "$SUITE" "$r" "$MIRROR" >&2
    # Device nodes: the container runtime mounts its own /dev. Documentation and package lists: not needed.
    find "$r/dev" -mindepth 1 -delete
    rm -rf "$r"/usr/share/doc "$r"/usr/share/man "$r"/usr/share/info "$r"/usr/share/locale "$r"/var/cache/apt/* \
      "$r"/var/lib/apt/lists/*
    mkdir -p "$r/tmp" && chmod 1777 "$r/tmp"
    tar -C "$r" --numeric-owner -cf "$tar.tmp" .
    mv "$tar.tmp" "$tar"
    rm -rf "$r"
  fi
  printf '%s' "$tar"
}

# The version of a Debian package in the suite, from a root file system tarball's dpkg status (essential variant).
deb_version() { # tarball package
  # awk reads to the end: an early exit would fail tar with SIGPIPE now and then, and pipefail the script with it.
  tar -xOf "$1" ./var/lib/dpkg/status |
    awk -v p="$2" '$1=="Package:"{m=($2==p)} m&&$1=="Version:"&&!v{v=$2} END{print v}'
}

# The reference as the container runtime normalises it (busybox:1.37 is docker.io/library/busybox:1.37): the
# name the archive gives its image, so `ctr images import` stores it under the name the kubelet asks for.
normalized() {
  local ref=$1 first=${1%%/*}
  if [[ $ref != */* ]]; then ref=docker.io/library/$ref
  elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then ref=docker.io/$ref; fi
  printf '%s' "$ref"
}

# emit name tag hash: prints the image's line, pushing its archive when missing.
emit() {
  local name=$1 tag=$2 hash=$3 archive="$DIR/$1-$3.oci.tar"
  if [[ ! -s $archive ]]; then
    rm -f "$DIR/$name"-*.oci.tar # an earlier build's
    "${BUILDAH[@]}" push --quiet "$tag" "oci-archive:$archive.tmp:$(normalized "$tag")" >&2
    mv "$archive.tmp" "$archive"
  fi
  printf '%s\t%s\n' "$tag" "$archive"
}

up_to_date() { # tag hash
  [[ $("${BUILDAH[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "io.peerload.inputs"}}' "$1" \
    2>/dev/null) == "$2" ]]
}

# The working container of a build that stopped half-way is removed (a copy of a whole file system with vfs).
WORKING=''
trap '[[ -z $WORKING ]] || "${BUILDAH[@]}" rm "$WORKING" >/dev/null 2>&1 || true' EXIT

# build name tag hash recipe: when the image is not up to date, runs `recipe <container> <mounted root>` on a
# new container from scratch and commits it with the hash as its label.
build() {
  local name=$1 tag=$2 hash=$3 recipe=$4
  if ! up_to_date "$tag" "$hash"; then
    log "building $tag"
    local ctr mnt
    ctr=$("${BUILDAH[@]}" from --quiet scratch)
    WORKING=$ctr
    mnt=$("${BUILDAH[@]}" mount "$ctr")
    # Called plainly, not in a condition, so that `set -e` stops the recipe at its first failing step.
    "$recipe" "$ctr" "$mnt"
    "${BUILDAH[@]}" umount "$ctr" >/dev/null
    "${BUILDAH[@]}" config --label "io.peerload.inputs=$hash" "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$tag" >/dev/null
    WORKING=''
    "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true # the previous build of this tag, now untagged
  fi
  emit "$name" "$tag" "$hash"
}

passwd_files() { # root users...: /etc/passwd and /etc/group with root, the given "name:uid" users, nonroot
  local r=$1; shift
  local u
  {
    echo 'root:x:0:0:root:/root:/sbin/nologin'
    for u in "$@"; do echo "${u%%:*}:x:${u#*:}:${u#*:}:${u%%:*}:/home/${u%%:*}:/sbin/nologin"; done
    echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin'
  } >"$r/etc/passwd"
  {
    echo 'root:x:0:'
    for u in "$@"; do echo "${u%%:*}:x:${u#*:}:"; done
    echo 'nonroot:x:65532:'
  } >"$r/etc/group"
  for u in "$@" nonroot:65532; do
    mkdir -p "$r/home/${u%%:*}" && chown "${u#*:}:${u#*:}" "$r/home/${u%%:*}"
  done
}

# --- peerload: its own script, its own cache; the archive is named by that build's input hash.
image_peerload() {
  local tag hash
  tag=$(bash scripts/build-image.sh --debian-bases)
  hash=$("${BUILDAH[@]}" inspect --type image --format '{{index .OCIv1.Config.Labels "io.peerload.inputs"}}' "$tag")
  emit peerload "$tag" "$hash"
}

# --- busybox: the static binary alone, with a link per applet in /bin as in the busybox image (`sh -c`, `chown`).
BUSYBOX_TAR=''
recipe_busybox() {
  local ctr=$1 r=$2 a
  tar -C "$r" -xf "$BUSYBOX_TAR" ./bin/busybox ./etc ./tmp
  passwd_files "$r"
  # The applets this busybox has (it is static: it runs here).
  for a in $("$r/bin/busybox" --list); do [[ -e $r/bin/$a ]] || ln -s busybox "$r/bin/$a"; done
  "${BUILDAH[@]}" config --env PATH=/bin --cmd sh "$ctr"
}
image_busybox() {
  BUSYBOX_TAR=$(debian_rootfs busybox extract busybox-static)
  local hash
  hash=$( { echo "r$REV"; declare -f recipe_busybox passwd_files; sha256sum "$BUSYBOX_TAR"; } | sha256sum | cut -c1-32)
  build busybox busybox:1.37 "$hash" recipe_busybox
}

# The Python a cached venv was made with (pyvenv.cfg): sets PY_HOME and PY_MINOR.
PY_HOME='' PY_MINOR=''
venv_python() { # venv
  PY_HOME=$(sed -n 's/^home = //p' "$1/pyvenv.cfg"); PY_HOME=${PY_HOME%/bin}
  PY_MINOR=$(sed -n 's/^version = \([0-9]*\.[0-9]*\).*/\1/p' "$1/pyvenv.cfg")
  [[ -x $PY_HOME/bin/python$PY_MINOR ]] || { log "the Python of $1 ($PY_HOME) is gone"; return 1; }
}
python_stamp() { tree_stamp "$PY_HOME/lib/python$PY_MINOR/lib-dynload"; ls -l "$PY_HOME/bin/python$PY_MINOR" "$PY_HOME/lib/libpython$PY_MINOR.so.1.0"; }
# That interpreter in /opt/python without what a server never imports (its tests, Tk, IDLE, the build
# configuration) and without the machine's site-packages; its library in the loader's cache (the binary's RUNPATH
# names the build machine's directory), so neither LD_LIBRARY_PATH nor a wrapper is needed.
add_python() { # rootfs
  local r=$1
  mkdir -p "$r/opt/python/bin" "$r/opt/python/lib" "$r/etc/ld.so.conf.d"
  cp -a "$PY_HOME/bin/python$PY_MINOR" "$r/opt/python/bin/"
  ln -s "python$PY_MINOR" "$r/opt/python/bin/python3"
  ln -s python3 "$r/opt/python/bin/python"
  cp -a "$PY_HOME/lib/libpython$PY_MINOR.so.1.0" "$PY_HOME/lib/libpython3.so" "$r/opt/python/lib/"
  tar -C "$PY_HOME/lib" -cf - --exclude="python$PY_MINOR/site-packages/*" --exclude="python$PY_MINOR/test" \
    --exclude="python$PY_MINOR/idlelib" --exclude="python$PY_MINOR/tkinter" --exclude="python$PY_MINOR/turtledemo" \
    --exclude="python$PY_MINOR/ensurepip" --exclude="python$PY_MINOR/lib2to3" --exclude="python$PY_MINOR/config-*" \
    --exclude='_tkinter.*' --exclude='nis.*' --exclude='_test*.so' "python$PY_MINOR" | tar -C "$r/opt/python/lib" -xf -
  echo 'include /etc/ld.so.conf.d/*.conf' >"$r/etc/ld.so.conf"
  echo /opt/python/lib >"$r/etc/ld.so.conf.d/python.conf"
}

# --- Triton: NVIDIA's layout (/opt/tritonserver/{bin,backends,caches}, the server's defaults, so no wrapper and
# no flags), the wheel's bundled libraries in /opt/tritonserver/lib, the Python the venv was made with in
# /opt/python with the venv's numpy (the python backend's stub runs model.py with the `python3` it finds on PATH),
# and the Debian libraries `ldd` names. A user triton-server (1000) as in NVIDIA's image. On Debian's essential set,
# not on libraries alone: the python backend runs `chmod` on its stub through /bin/sh before each model loads.
TRITON_LIBS=libc6,libgcc-s1,libstdc++6,zlib1g,libbz2-1.0,libcrypt1,libffi8,liblzma5,libncursesw6,libtinfo6,libreadline8,libsqlite3-0,libssl3,libuuid1
TRITON_TAR=''
triton_site() { printf '%s/lib/python%s/site-packages' "$TRITON_VENV" "$PY_MINOR"; }
recipe_triton() {
  local ctr=$1 r=$2 site
  site=$(triton_site)
  tar -C "$r" -xf "$TRITON_TAR"
  echo 'triton-server:x:1000:1000::/home/triton-server:/bin/sh' >>"$r/etc/passwd"
  echo 'triton-server:x:1000:' >>"$r/etc/group"
  mkdir -p "$r/home/triton-server" && chown 1000:1000 "$r/home/triton-server"
  mkdir -p "$r/opt/tritonserver/bin" "$r/opt/tritonserver/lib"
  cp -a "$TRITON_VENV/server/bin/tritonserver.real" "$r/opt/tritonserver/bin/tritonserver"
  cp -a "$TRITON_VENV/server/backends" "$TRITON_VENV/server/caches" "$r/opt/tritonserver/"
  cp -a "$site/nvidia_pytriton.libs/." "$r/opt/tritonserver/lib/"
  add_python "$r"
  cp -a "$site"/numpy "$site"/numpy.libs "$site"/numpy-*.dist-info "$r/opt/python/lib/python$PY_MINOR/site-packages/"
  # The libraries' directories in the loader's cache, so neither LD_LIBRARY_PATH nor a wrapper is needed (the
  # Python binary's RUNPATH names the build machine's directory).
  echo /opt/tritonserver/lib >"$r/etc/ld.so.conf.d/tritonserver.conf"
  ldconfig -r "$r"
  "${BUILDAH[@]}" config --env PATH=/opt/tritonserver/bin:/opt/python/bin:/usr/local/bin:/usr/bin:/bin \
    --env TRITON_SERVER_VERSION=2.51.0 --workingdir /opt/tritonserver --cmd tritonserver "$ctr"
}
image_triton() {
  [[ -f $TRITON_VENV/.complete ]] || { log "no Triton at $TRITON_VENV: run scripts/setup-triton.sh"; return 1; }
  venv_python "$TRITON_VENV"
  TRITON_TAR=$(debian_rootfs triton essential "$TRITON_LIBS")
  local hash
  hash=$( { echo "r$REV"; declare -f recipe_triton add_python; sha256sum "$TRITON_TAR"
    tree_stamp "$TRITON_VENV/server" "$(triton_site)/nvidia_pytriton.libs" "$(triton_site)/numpy"
    python_stamp; } | sha256sum | cut -c1-32)
  build triton nvcr.io/nvidia/tritonserver:24.10-py3 "$hash" recipe_triton
}

# --- Dragonfly: the paths and entrypoints of Dragonfly's images (manager /opt/dragonfly/bin/server, scheduler
# /opt/dragonfly/bin/scheduler, client /usr/local/bin/dfdaemon); each reads /etc/dragonfly/<name>.yaml unless
# --config says otherwise, where Dragonfly's chart mounts its ConfigMap. The Go binaries are static; dfdaemon needs
# glibc and libstdc++: the runtime base (glibc, libstdc++, libgcc) serves all three.
RUNTIME_TAR=''
dragonfly_dirs() { mkdir -p "$1/etc/dragonfly" "$1/var/log/dragonfly" "$1/var/lib/dragonfly" "$1/var/run/dragonfly"; }
# go_service ctr root binary name port...: a Dragonfly Go service at /opt/dragonfly/bin/<name>, its entrypoint.
go_service() {
  local ctr=$1 r=$2 binary=$3 name=$4 ports=() p; shift 4
  for p in "$@"; do ports+=(--port "$p"); done
  tar -C "$r" -xf "$RUNTIME_TAR"; passwd_files "$r"; dragonfly_dirs "$r"
  mkdir -p "$r/opt/dragonfly/bin"
  cp -a "$DRAGONFLY_BIN/$binary" "$r/opt/dragonfly/bin/$name"
  echo 'hosts: files dns' >"$r/etc/nsswitch.conf"
  "${BUILDAH[@]}" config --env PATH=/opt/dragonfly/bin:/usr/local/bin:/usr/bin:/bin --workingdir /opt/dragonfly \
    --entrypoint "[\"/opt/dragonfly/bin/$name\"]" "${ports[@]}" "$ctr"
}
recipe_manager() { go_service "$1" "$2" manager server 8080 65003; }
recipe_scheduler() { go_service "$1" "$2" scheduler scheduler 8002; }
recipe_client() {
  local ctr=$1 r=$2
  tar -C "$r" -xf "$RUNTIME_TAR"; passwd_files "$r"; dragonfly_dirs "$r"
  mkdir -p "$r/usr/local/bin"
  cp -a "$DRAGONFLY_BIN/dfdaemon" "$r/usr/local/bin/dfdaemon"
  "${BUILDAH[@]}" config --env PATH=/usr/local/bin:/usr/bin:/bin --entrypoint '["/usr/local/bin/dfdaemon"]' "$ctr"
}
image_dragonfly() { # manager|scheduler|client
  local name=$1 bin=$1 tag
  [[ $name == client ]] && bin=dfdaemon
  [[ -x $DRAGONFLY_BIN/$bin ]] || { log "no $bin in $DRAGONFLY_BIN: run scripts/setup-dragonfly.sh"; return 1; }
  case $name in
    client) tag=dragonflyoss/client:v$("$DRAGONFLY_BIN/dfdaemon" --version | awk '{print $2}') ;;
    *) tag=dragonflyoss/$name:$("$DRAGONFLY_BIN/$bin" version 2>/dev/null | awk '$1=="GitVersion:"{print $2}') ;;
  esac
  [[ $tag != *: ]] || { log "cannot tell the version of $DRAGONFLY_BIN/$bin"; return 1; }
  RUNTIME_TAR=$(debian_rootfs runtime extract libc6,libgcc-s1,libstdc++6)
  local hash
  hash=$( { echo "r$REV"; declare -f "recipe_$name" go_service passwd_files dragonfly_dirs; sha256sum "$RUNTIME_TAR"
    tree_stamp "$DRAGONFLY_BIN/$bin"; } | sha256sum | cut -c1-32)
  build "$name" "$tag" "$hash" "recipe_$name"
}

# --- MariaDB and Redis for the manager: Debian's essential set (the entrypoints are sh scripts) plus the server.
# Their entrypoints: scripts/cluster-images/<name>-entrypoint.sh (the environment each reads is at its head).
DB_TAR=''
recipe_mariadb() {
  local ctr=$1 r=$2
  tar -C "$r" -xf "$DB_TAR"
  mkdir -p "$r/usr/local/bin" && install -m 755 scripts/cluster-images/mariadb-entrypoint.sh "$r/usr/local/bin/docker-entrypoint.sh"
  # Emptied: the package's set-up initialised a data directory without the manager's database and user; the
  # entrypoint initialises the (volume's) directory on the first start.
  rm -rf "$r/var/lib/mysql" && mkdir -p "$r/var/lib/mysql" "$r/run/mysqld"
  chown "$(awk -F: '$1=="mysql"{print $3":"$4}' "$r/etc/passwd")" "$r/var/lib/mysql" "$r/run/mysqld"
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --entrypoint '["/usr/local/bin/docker-entrypoint.sh"]' --port 3306 "$ctr"
}
recipe_redis() {
  local ctr=$1 r=$2
  tar -C "$r" -xf "$DB_TAR"
  mkdir -p "$r/usr/local/bin" && install -m 755 scripts/cluster-images/redis-entrypoint.sh "$r/usr/local/bin/docker-entrypoint.sh"
  mkdir -p "$r/data"
  chown "$(awk -F: '$1=="redis"{print $3":"$4}' "$r/etc/passwd")" "$r/data"
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --entrypoint '["/usr/local/bin/docker-entrypoint.sh"]' --port 6379 --workingdir /data "$ctr"
}
image_store() { # mariadb|redis
  local name=$1 pkgs pkg version
  case $name in
    mariadb) pkgs=mariadb-server,mariadb-client pkg=mariadb-server ;;
    redis) pkgs=redis-server pkg=redis-server ;;
  esac
  DB_TAR=$(debian_rootfs "$name" essential "$pkgs")
  version=$(deb_version "$DB_TAR" "$pkg"); version=${version#*:}; version=${version%%[-+]*}
  local hash
  hash=$( { echo "r$REV"; declare -f "recipe_$name"; cat "scripts/cluster-images/$name-entrypoint.sh"
    sha256sum "$DB_TAR"; } | sha256sum | cut -c1-32)
  build "$name" "peerload.local/$name:$version" "$hash" "recipe_$name"
}

# --- KServe's controller manager: a static Go binary (CGO_ENABLED=0), so an empty root with the users' files and
# /tmp, as KServe's own image (distroless static, nonroot). The webhook's certificate is mounted under /tmp by the
# Deployment; nothing else is written (readOnlyRootFilesystem in KServe's manifest).
KSERVE_DIR=''
recipe_kserve() {
  local ctr=$1 r=$2
  mkdir -p "$r/etc" "$r/tmp" && chmod 1777 "$r/tmp"
  passwd_files "$r"
  cp -a "$KSERVE_DIR/bin/manager" "$r/manager"
  "${BUILDAH[@]}" config --user 65532:65532 --entrypoint '["/manager"]' "$ctr"
}
image_kserve() {
  KSERVE_DIR=$(bash scripts/setup-kserve.sh | tail -n 1)
  local version=${KSERVE_DIR##*/kserve-} hash
  hash=$( { echo "r$REV"; declare -f recipe_kserve passwd_files; tree_stamp "$KSERVE_DIR/bin"; } | sha256sum | cut -c1-32)
  build kserve "kserve/kserve-controller:$version" "$hash" recipe_kserve
}

for name in "$@"; do
  case $name in
    peerload) image_peerload ;;
    busybox) image_busybox ;;
    triton) image_triton ;;
    manager | scheduler | client) image_dragonfly "$name" ;;
    mariadb | redis) image_store "$name" ;;
    kserve) image_kserve ;;
    *) log "unknown image $name (one of: ${ALL[*]} ${OPTIONAL[*]})"; exit 2 ;;
  esac
done
