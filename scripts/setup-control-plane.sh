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

# kube-apiserver: k8s.io/kubernetes refers to its staging modules as v0.0.0 and replaces them with
# ./staging paths, which a dependent module cannot use; replace each with its published release.
log "building kube-apiserver v$K8S_VERSION and etcd v$ETCD_VERSION (several minutes on 2 cores; cached afterwards)"
mkdir -p "$work/k8s" && cd "$work/k8s"
go mod init peerload.local/controlplane >/dev/null 2>&1
go mod edit -require="k8s.io/kubernetes@v$K8S_VERSION"
modfile=$(with_progress "downloading k8s.io/kubernetes v$K8S_VERSION" "building kube-apiserver" \
  go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging=$(awk '/^replace|^\t/ && /=> .\/staging/ {print $1}' "$modfile" | grep '^k8s.io/' | sort -u)
for m in $staging; do go mod edit -replace="$m=$m@$STAGING_VERSION"; done
cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
build_apiserver() { # its status is the build's: tidy may complain about test-only imports the build never needs
  go mod tidy >/dev/null 2>&1 || true
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}" \
    -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
}
with_progress "building kube-apiserver v$K8S_VERSION (modules, then compiling)" "etcd" build_apiserver
mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"

# etcd: its root module carries replace directives, so `go install` refuses it; a wrapper main
# calling etcdmain.Main builds the same server.
mkdir -p "$work/etcd" && cd "$work/etcd"
go mod init peerload.local/etcd >/dev/null 2>&1
cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
build_etcd() {
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 &&
    go mod tidy >/dev/null 2>&1 &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" .
}
with_progress "building etcd v$ETCD_VERSION" "$(next_step)" build_etcd
mv "$BIN/etcd.tmp" "$BIN/etcd"
log "control plane ready in $BIN"
echo "$BIN"
