#!/usr/bin/env bash
# Installs the real Hugging Face client, huggingface_hub (PyPI), into a cached virtualenv, for the test that holds
# the Hub emulator to it. Idempotent. Prints the virtualenv's python on stdout.
source "$(dirname "$0")/lib.sh"

HF_HUB_VERSION="${PEERLOAD_HF_HUB_VERSION:-2.4.0}"
PY="${PYTHON:-python3}"
PY_VERSION=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
VENV="$PEERLOAD_CACHE/huggingface_hub-${HF_HUB_VERSION}-py${PY_VERSION}"

if [[ -f "$VENV/.complete" ]]; then echo "$VENV/bin/python"; exit 0; fi
"$PY" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
log "creating $VENV"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
with_progress "installing huggingface_hub $HF_HUB_VERSION (pip)" "$(next_step)" \
  "$VENV/bin/pip" install -q --disable-pip-version-check "huggingface_hub==$HF_HUB_VERSION" >&2
"$VENV/bin/python" -c "import huggingface_hub as h; assert h.__version__ == '$HF_HUB_VERSION', h.__version__"
touch "$VENV/.complete"
echo "$VENV/bin/python"
