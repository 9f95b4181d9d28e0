# Shared helpers for the set-up scripts. Source it; do not run it.
set -euo pipefail
PEERLOAD_CACHE="${PEERLOAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/peerload}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$PEERLOAD_CACHE"
log() { printf '[setup] %s\n' "$*" >&2; }
