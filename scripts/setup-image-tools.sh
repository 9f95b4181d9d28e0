#!/usr/bin/env bash
# Installs buildah (builds and runs the operator image without a daemon) and mmdebstrap (builds its base from
# Debian packages) with apt. Idempotent: does nothing when both are there.
source "$(dirname "$0")/lib.sh"
if command -v buildah >/dev/null && command -v mmdebstrap >/dev/null; then exit 0; fi
command -v apt-get >/dev/null || { log "buildah and mmdebstrap are required (Debian/Ubuntu: apt-get install buildah mmdebstrap)"; exit 1; }
[[ $(id -u) == 0 ]] || { log "run as root to install buildah and mmdebstrap: apt-get install buildah mmdebstrap"; exit 1; }
log "installing buildah and mmdebstrap (apt)"
apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends buildah mmdebstrap >&2
