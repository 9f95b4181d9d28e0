#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy and caches them under
# $PEERLOAD_CACHE/control-plane-k8s<ver>-etcd<ver>/bin. Idempotent: a second run only checks the binaries.
# Prints the bin directory on stdout.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib-k8s.sh"

ETCD_VERSION="${PEERLOAD_ETCD_VERSION:-3.5.21}"
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
k8s_wrapper_module peerload.local/controlplane "building kube-apiserver and etcd" >/dev/null
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
  CGO_ENABLED=0 go build -trimpath -ldflags "$(k8s_ldflags)" -o "$work/out/" k8s.io/kubernetes/cmd/kube-apiserver ./etcd
}
with_progress "building kube-apiserver v$K8S_VERSION and etcd v$ETCD_VERSION side by side (modules, then compiling)" \
  "$(next_step)" build_control_plane
mv "$work/out/kube-apiserver" "$work/out/etcd" "$BIN/"
log "control plane ready in $BIN"
echo "$BIN"
