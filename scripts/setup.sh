#!/usr/bin/env bash
# Idempotent set-up for development and tests. Safe to run again: each step checks before it works.
#   scripts/setup.sh          node deps + control plane (enough for unit and integration tests)
#   scripts/setup.sh --all    also TorchServe, MinIO, the plugin jar and the real Dragonfly network (e2e tests, the demo)
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

# 1. Node packages, including Node 24 itself (the npm `node` package): npm scripts run under
#    node_modules/.bin/node whatever Node the machine has, since npm puts node_modules/.bin first on PATH.
stamp=node_modules/.package-lock.json
if [[ ! -f $stamp || package-lock.json -nt $stamp ]]; then
  command -v npm >/dev/null || { log "npm is required: apt-get install nodejs npm"; exit 1; }
  log "installing node packages (npm ci)"
  npm ci --no-audit --no-fund >&2
fi
node_version=$(node_modules/.bin/node --version)
[[ ${node_version#v} =~ ^(2[2-9]|[3-9][0-9])\. ]] || { log "node_modules/.bin/node is $node_version, need >= 22"; exit 1; }

# 2. The control plane (kube-apiserver + etcd), built from the Go module proxy once and cached.
bash scripts/setup-control-plane.sh >/dev/null
bash scripts/setup-helm.sh >/dev/null
bash scripts/setup-kustomize.sh >/dev/null
# 3. What reads resource health and metrics as users' tools do: kstatus (Flux, kpt), promtool, and Lua 5.1 for the
#    Argo CD health checks (Argo CD runs them in gopher-lua, a Lua 5.1).
bash scripts/setup-kstatus.sh >/dev/null
bash scripts/setup-promtool.sh >/dev/null
if ! command -v lua5.1 >/dev/null; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing lua5.1 (apt)"
    apt-get install -y -q lua5.1 >&2 || { apt-get update -q >&2 && apt-get install -y -q lua5.1 >&2; }
  else
    log "lua5.1 is required for the Argo CD health-check tests: apt-get install lua5.1"; exit 1
  fi
fi

if [[ ${1:-} == --all ]]; then
  # The real P2P network is the longest build (the Rust peer daemon): it runs beside TorchServe's download.
  bash scripts/setup-dragonfly.sh >/dev/null &
  dragonfly=$!
  bash scripts/setup-torchserve.sh >/dev/null
  bash scripts/setup-minio.sh >/dev/null
  bash scripts/build-plugin.sh >/dev/null
  # The image tests (test/e2e/image.test.ts, release.test.ts): buildah, and the Debian-built bases cached by version.
  # Mostly downloads: they too run while the peer daemon compiles.
  bash scripts/setup-image-tools.sh
  bash scripts/image-bases.sh >/dev/null
  wait "$dragonfly" || { log "building the Dragonfly network failed (scripts/setup-dragonfly.sh)"; exit 1; }
fi
log "ready (node $node_version, cache $PEERLOAD_CACHE)"
