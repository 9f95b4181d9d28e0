#!/usr/bin/env bash
# Installs Triton Inference Server 2.51.0 for CPU from the PyPI wheel nvidia-pytriton 0.7.0 (it bundles
# `tritonserver`, the python backend and one python-backend stub per Python version) into a cached virtualenv, and
# writes `bin/tritonserver`, a wrapper that runs it with the library path and Python it needs.
# Idempotent. Prints the wrapper's directory on stdout.
source "$(dirname "$0")/lib.sh"

PYTRITON_VERSION="${PEERLOAD_PYTRITON_VERSION:-0.7.0}" # Triton 2.51.0
PY="${PYTHON:-python3}"
PY_VERSION=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
VENV="$PEERLOAD_CACHE/triton-pytriton${PYTRITON_VERSION}-py${PY_VERSION}"

if [[ -f "$VENV/.complete" ]]; then echo "$VENV/server/bin"; exit 0; fi
"$PY" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
log "creating $VENV"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
# The server needs none of pytriton's Python dependencies; model.py files import numpy (<2 for the bundled
# python backend's c_python_backend_utils).
with_progress "installing Triton (nvidia-pytriton $PYTRITON_VERSION, pip)" "$(next_step)" \
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "nvidia-pytriton==$PYTRITON_VERSION" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check 'numpy<2' >&2

site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
bundle="$site/pytriton/tritonserver"
stub="$bundle/python_backend_stubs/$PY_VERSION/triton_python_backend_stub"
[[ -x $stub ]] || { log "nvidia-pytriton $PYTRITON_VERSION has no python backend stub for Python $PY_VERSION"; exit 1; }
mkdir -p "$VENV/server"
cp -r "$bundle/bin" "$bundle/backends" "$bundle/caches" "$VENV/server/"
cp "$stub" "$VENV/server/backends/python/"
mv "$VENV/server/bin/tritonserver" "$VENV/server/bin/tritonserver.real"

# The stub links the interpreter's shared library (a pyenv or Debian Python's LIBDIR) and the server the wheel's
# own libraries; the stub runs `python` from PATH for model.py, so the venv's bin comes first.
pylib=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
cat >"$VENV/server/bin/tritonserver" <<WRAPPER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$pylib:$site/nvidia_pytriton.libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PATH="$VENV/bin:\$PATH"
exec "$VENV/server/bin/tritonserver.real" --backend-directory="$VENV/server/backends" "\$@"
WRAPPER
chmod +x "$VENV/server/bin/tritonserver"
missing=$(LD_LIBRARY_PATH="$pylib:$site/nvidia_pytriton.libs" ldd "$VENV/server/bin/tritonserver.real" \
  "$VENV/server/backends/python/triton_python_backend_stub" | grep 'not found' || true)
[[ -z $missing ]] || { log "Triton's libraries are missing: $missing"; exit 1; }
touch "$VENV/.complete"
echo "$VENV/server/bin"
