#!/usr/bin/env bash
# Installs MLServer 1.7.1 with its scikit-learn runtime into a cached virtualenv. Idempotent. Prints the venv's bin
# directory on stdout.
source "$(dirname "$0")/lib.sh"

MLSERVER_VERSION="${PEERLOAD_MLSERVER_VERSION:-1.7.1}"
PY="${PYTHON:-python3}"
PY_VERSION=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
VENV="$PEERLOAD_CACHE/mlserver-${MLSERVER_VERSION}-py${PY_VERSION}"

if [[ -f "$VENV/.complete" ]]; then echo "$VENV/bin"; exit 0; fi
"$PY" -c 'import sys; sys.exit(sys.version_info >= (3, 13))' ||
  { log "MLServer $MLSERVER_VERSION needs Python < 3.13 (set PYTHON)"; exit 1; }
"$PY" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
log "creating $VENV"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
# uvloop 0.21: with a newer one MLServer's parallel workers fail every load ("no current event loop").
with_progress "installing MLServer $MLSERVER_VERSION and mlserver-sklearn (pip)" "$(next_step)" \
  "$VENV/bin/pip" install -q --disable-pip-version-check \
  "mlserver==$MLSERVER_VERSION" "mlserver-sklearn==$MLSERVER_VERSION" 'uvloop==0.21.0' >&2
"$VENV/bin/mlserver" --help >/dev/null
touch "$VENV/.complete"
echo "$VENV/bin"
