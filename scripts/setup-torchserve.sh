#!/usr/bin/env bash
# Installs TorchServe 0.12.0, torch-model-archiver and torch (workers import it) into a cached virtualenv.
# Idempotent. Prints the venv's bin directory on stdout.
source "$(dirname "$0")/lib.sh"

TS_VERSION="${PEERLOAD_TORCHSERVE_VERSION:-0.12.0}"
TORCH_VERSION="${PEERLOAD_TORCH_VERSION:-2.5.1}"
VENV="$PEERLOAD_CACHE/torchserve-${TS_VERSION}-torch${TORCH_VERSION}"

if [[ -f "$VENV/.complete" ]]; then echo "$VENV/bin"; exit 0; fi
command -v java >/dev/null && java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])' || {
  log "installing Java 17 (TorchServe's frontend needs it)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
}
PY="${PYTHON:-python3}"
log "creating $VENV (torch is large: first run downloads ~3 GB)"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
with_progress "installing TorchServe $TS_VERSION and torch $TORCH_VERSION (pip)" "$(next_step)" \
  "$VENV/bin/pip" install -q --disable-pip-version-check \
  "torchserve==$TS_VERSION" "torch-model-archiver==$TS_VERSION" "torch==$TORCH_VERSION" pyyaml psutil packaging >&2
"$VENV/bin/python" -c 'import torch, ts; print("torch", torch.__version__)' >&2
touch "$VENV/.complete"
echo "$VENV/bin"
