#!/usr/bin/env bash
# What a real two-node cluster of processes needs (test/support/cluster.ts), cached under
# $PEERLOAD_CACHE/cluster-k8s<ver>-coredns<ver>/:
#   - Debian's containerd, runc, CNI plugins (bridge, host-local in /usr/lib/cni), conntrack, iptables, openssl and
#     busybox-static (the test pods' tools);
#   - bin/: kubelet, kube-controller-manager, kube-scheduler, kube-proxy and kubectl v<ver>, one `go build` of a
#     wrapper module (as scripts/setup-control-plane.sh builds kube-apiserver); CoreDNS from the Go module proxy with
#     the plugins cluster DNS uses; the pause binary from the kubernetes module's own pause.c (gcc -static);
#   - images/: the pause, CoreDNS and busybox images (buildah from scratch, static binaries) as OCI archives, each
#     named by a hash of its inputs, for `ctr images import` into each node's containerd.
# The apiserver and etcd are the control plane's (scripts/setup-control-plane.sh). Idempotent: a second run only
# checks and says nothing. Prints KEY=VALUE lines: BIN, CONTROL_PLANE_BIN, and per image its reference and archive.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib-k8s.sh"
source "$(dirname "$0")/lib-image.sh"

COREDNS_VERSION="${PEERLOAD_COREDNS_VERSION:-1.14.7}"
OUT="$PEERLOAD_CACHE/cluster-k8s${K8S_VERSION}-coredns${COREDNS_VERSION}"
BIN="$OUT/bin"
IMAGES="$OUT/images"
COMPONENTS=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)

debs=()
for pair in containerd:containerd runc:runc conntrack:conntrack iptables:iptables openssl:openssl \
  busybox-static:busybox buildah:buildah; do
  dpkg -s "${pair%%:*}" >/dev/null 2>&1 || debs+=("${pair%%:*}")
done
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || debs+=(containernetworking-plugins)
command -v gcc >/dev/null || debs+=(gcc libc6-dev)
apt_install "${debs[@]}"

control_plane_bin=$(PEERLOAD_SETUP_NEXT="the cluster's node binaries" bash "$(dirname "$0")/setup-control-plane.sh")
mkdir -p "$BIN" "$IMAGES"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

have_all() { local c; for c in "$@"; do [[ -x $BIN/$c ]] || return 1; done; }

# One module and one `go build` for the node and controller binaries (and kubectl, so the tests' client is the
# cluster's version): they share most packages, so each compiles once.
if ! have_all "${COMPONENTS[@]}" pause; then
  command -v go >/dev/null || { log "go is required to build the cluster's components"; exit 1; }
  log "building ${COMPONENTS[*]} v$K8S_VERSION (minutes on 2 cores; cached afterwards)"
  mkdir -p "$work/k8s" && cd "$work/k8s"
  k8s_src=$(k8s_wrapper_module peerload.local/cluster "building the node binaries")
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in "${COMPONENTS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } > tools.go
  build_nodes() {
    go mod tidy >/dev/null 2>&1 || true # as in setup-control-plane.sh: the build decides
    local c pkgs=(); for c in "${COMPONENTS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    mkdir -p "$work/out"
    CGO_ENABLED=0 go build -trimpath -ldflags "$(k8s_ldflags)" -o "$work/out/" "${pkgs[@]}"
  }
  with_progress "building ${COMPONENTS[*]} v$K8S_VERSION in one go build" "CoreDNS $COREDNS_VERSION" build_nodes
  # The sandbox's process: the kubernetes module's own pause.c, built as its Makefile builds it.
  pause_tag=$(sed -n 's/^TAG ?= //p' "$k8s_src/build/pause/Makefile")
  gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag-peerload" -o "$work/out/pause" "$k8s_src/build/pause/linux/pause.c"
  strip "$work/out/pause"
  for c in "${COMPONENTS[@]}" pause; do mv "$work/out/$c" "$BIN/"; done
  cd "$REPO_ROOT"
fi

# CoreDNS with the plugins a cluster's Corefile uses (as its plugin.cfg would list them): its own main with every
# plugin pulls in the cloud providers' SDKs, minutes more of compiling for nothing used here.
if [[ ! -x $BIN/coredns ]]; then
  log "building CoreDNS $COREDNS_VERSION"
  mkdir -p "$work/coredns" && cd "$work/coredns"
  go mod init peerload.local/coredns >/dev/null 2>&1
  go mod edit -require="github.com/coredns/coredns@v$COREDNS_VERSION"
  {
    printf 'package main\n\nimport (\n\t"github.com/coredns/coredns/coremain"\n'
    for p in errors health ready kubernetes cache loadbalance log loop reload; do
      printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"
    done
    printf ')\n\nfunc main() { coremain.Run() }\n'
  } > main.go
  build_coredns() {
    go mod tidy >/dev/null 2>&1 || true
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/coredns-bin" .
  }
  with_progress "building CoreDNS $COREDNS_VERSION" "the images" build_coredns
  mv "$work/coredns-bin" "$BIN/coredns"
  cd "$REPO_ROOT"
fi

# image NAME REF ROOTFS-FILLER: an OCI archive of a `buildah from scratch` image holding what ROOTFS-FILLER puts in
# a directory; the archive's name carries a hash of that directory's files and the recipe, so changed inputs make a
# new archive. Prints NAME's lines.
image() {
  local name=$1 ref=$2 fill=$3 root="$work/rootfs-$1" hash archive
  rm -rf "$root" && mkdir -p "$root"
  "$fill" "$root"
  hash=$( { printf '%s\n' "$ref" "$(declare -f "$fill")"; (cd "$root" && find . -print0 | sort -z |
    xargs -0 stat -c '%n %a %F %s' && find . -type f -print0 | sort -z | xargs -0 sha256sum); } | sha256sum | cut -c1-16)
  archive="$IMAGES/$name-$hash.tar"
  if [[ ! -s $archive ]]; then
    log "building the $name image ($ref)"
    local ctr; ctr=$("${BUILDAH[@]}" from --quiet scratch)
    "${BUILDAH[@]}" copy --quiet "$ctr" "$root" / >/dev/null
    "${BUILDAH[@]}" config "${IMAGE_CONFIG[@]}" "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$ref" >/dev/null
    rm -f "$IMAGES/$name"-*.tar
    "${BUILDAH[@]}" push --quiet "$ref" "oci-archive:$archive.tmp:$ref" >&2
    "${BUILDAH[@]}" rmi "$ref" >/dev/null 2>&1 || true # the archive is what is kept (vfs copies are whole trees)
    mv "$archive.tmp" "$archive"
  fi
  printf '%s_IMAGE=%s\n%s_ARCHIVE=%s\n' "${name^^}" "$ref" "${name^^}" "$archive"
}
fill_pause() { mkdir -p "$1/bin" && cp "$BIN/pause" "$1/bin/pause"; }
fill_coredns() { cp "$BIN/coredns" "$1/coredns"; mkdir -p "$1/etc/coredns"; }
fill_busybox() {
  mkdir -p "$1/bin" "$1/tmp" "$1/etc" && chmod 1777 "$1/tmp"
  cp /bin/busybox "$1/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do [[ $applet == busybox ]] || ln -s busybox "$1/bin/$applet"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$1/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' > "$1/etc/group"
}
busybox_version=$(dpkg-query -W -f '${Version}' busybox-static)
IMAGE_CONFIG=(--entrypoint '["/bin/pause"]' --user 65535:65535)
image pause "localhost/peerload/pause:k8s-$K8S_VERSION" fill_pause
IMAGE_CONFIG=(--entrypoint '["/coredns"]' --cmd '-conf /etc/coredns/Corefile' --user 65532:65532)
image coredns "localhost/peerload/coredns:$COREDNS_VERSION" fill_coredns
IMAGE_CONFIG=(--cmd '/bin/sh' --env PATH=/bin)
image busybox "localhost/peerload/busybox:${busybox_version//[^A-Za-z0-9_.-]/_}" fill_busybox
echo "BIN=$BIN"
echo "CONTROL_PLANE_BIN=$control_plane_bin"
