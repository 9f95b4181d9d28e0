#!/usr/bin/env bash
# Installs the real Hugging Face client, huggingface_hub (PyPI), into a cached virtualenv, for the test that holds
# the Hub emulator to it. Idempotent. Prints the virtualenv's python on stdout.
source "$(dirname "$0")/lib.sh"

HF_HUB_VERSION="${PEERLOAD_HF_HUB_VERSION:-2.4.0}"
VENV=$(python_venv_dir "huggingface_hub-$HF_HUB_VERSION")
if [[ -f "$VENV/.complete" ]]; then echo "$VENV/bin/python"; exit 0; fi
fresh_venv "$VENV"
with_progress "installing huggingface_hub $HF_HUB_VERSION (pip)" "$(next_step)" \
  "$VENV/bin/pip" install -q --disable-pip-version-check "huggingface_hub==$HF_HUB_VERSION" >&2
"$VENV/bin/python" -c "import huggingface_hub as h; assert h.__version__ == '$HF_HUB_VERSION', h.__version__"
touch "$VENV/.complete"
echo "$VENV/bin/python"
