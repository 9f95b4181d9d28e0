#!/usr/bin/env bash
# Builds helm (lints and renders charts/peerload for the chart tests, packages it for releases) from the Go
# module proxy into $PEERLOAD_CACHE/helm-<version>/bin. Idempotent. Prints the bin directory.
source "$(dirname "$0")/lib.sh"
VERSION="${PEERLOAD_HELM_VERSION:-v3.21.4}"
BIN="$PEERLOAD_CACHE/helm-$VERSION/bin"
if [[ -x "$BIN/helm" ]]; then echo "$BIN"; exit 0; fi
command -v go >/dev/null || { log "go is required to build helm"; exit 1; }
log "building helm $VERSION"
mkdir -p "$BIN"
# Helm's Makefile sets these: its version, and the Kubernetes version `helm template` assumes (else 1.20, which
# fails the chart's kubeVersion); helm v3.21 is built on the Kubernetes 1.36 libraries.
K8S_MINOR="${PEERLOAD_HELM_K8S_MINOR:-36}"
GOBIN="$BIN" CGO_ENABLED=0 go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION \
    -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$K8S_MINOR \
    -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$K8S_MINOR" \
  "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
echo "$BIN"
