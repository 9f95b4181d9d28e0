#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy and caches them under
# $PEERLOAD_CACHE/control-plane-k8s<ver>-etcd<ver>/bin. Idempotent: a second run only checks the binaries.
# Prints the bin directory on stdout.
source "$(dirname "$0")/lib.sh"

K8S_VERSION="${PEERLOAD_K8S_VERSION:-1.33.13}"
ETCD_VERSION="${PEERLOAD_ETCD_VERSION:-3.5.21}"
STAGING_VERSION="v0.${K8S_VERSION#1.}"
OUT="$PEERLOAD_CACHE/control-plane-k8s${K8S_VERSION}-etcd${ETCD_VERSION}"
BIN="$OUT/bin"

if [[ -x "$BIN/kube-apiserver" && -x "$BIN/etcd" ]]; then
  echo "$BIN"; exit 0
fi
command -v go >/dev/null || { log "go is required to build the control plane (apt-get install golang or see README)"; exit 1; }
mkdir -p "$BIN"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

# One module and one `go build` for both binaries: etcd compiles beside kube-apiserver (filling the cores its long
# single-package stretches and its link leave idle) and shares every common package (grpc, protobuf, the etcd
# client) instead of compiling etcd's own older versions of them. k8s.io/kubernetes already requires this etcd
# server in its module graph, so kube-apiserver's dependencies are the versions it was released with.
log "building kube-apiserver v$K8S_VERSION and etcd v$ETCD_VERSION (several minutes on 2 cores; cached afterwards)"
mkdir -p "$work/k8s/etcd" && cd "$work/k8s"
go mod init peerload.local/controlplane >/dev/null 2>&1
go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
modfile=$(with_progress "downloading k8s.io/kubernetes v$K8S_VERSION" "building kube-apiserver and etcd" \
  go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
# k8s.io/kubernetes refers to its staging modules as v0.0.0 and replaces them with ./staging paths, which a
# dependent module cannot use; replace each with its published release.
staging=$(awk '/^replace|^\t/ && /=> .\/staging/ {print $1}' "$modfile" | grep '^k8s.io/' | sort -u)
for m in $staging; do go mod edit -replace="$m=$m@$STAGING_VERSION"; done
go mod edit -require="go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
# etcd's root module carries replace directives, so `go install` refuses it; a wrapper main calling etcdmain.Main
# builds the same server.
cat > etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
build_control_plane() { # tidy may complain about test-only imports the build never needs: the build decides
  go mod tidy >/dev/null 2>&1 || true
  local etcd_in_graph
  etcd_in_graph=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  if [[ $etcd_in_graph != "v$ETCD_VERSION" ]]; then
    log "etcd v$ETCD_VERSION is not the etcd server k8s.io/kubernetes v$K8S_VERSION requires ($etcd_in_graph): set PEERLOAD_ETCD_VERSION=${etcd_in_graph#v}"
    return 1
  fi
  mkdir -p "$work/out"
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}" \
    -o "$work/out/" k8s.io/kubernetes/cmd/kube-apiserver ./etcd
}
with_progress "building kube-apiserver v$K8S_VERSION and etcd v$ETCD_VERSION side by side (modules, then compiling)" \
  "$(next_step)" build_control_plane
mv "$work/out/kube-apiserver" "$work/out/etcd" "$BIN/"
log "control plane ready in $BIN"
echo "$BIN"
