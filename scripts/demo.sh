#!/usr/bin/env bash
# `npm run demo`: the main job on a local default. Sets up only what the demo runs (scripts/setup.sh --demo: the
# control plane, TorchServe, the plugin jar; with --real-p2p also the real Dragonfly network, with
# --no-torchserve neither TorchServe nor the plugin), then runs scripts/demo.ts.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
setup=(--demo)
for arg in "$@"; do [[ $arg == --real-p2p || $arg == --no-torchserve ]] && setup+=("$arg"); done
bash scripts/setup.sh "${setup[@]}"
exec node_modules/.bin/node scripts/demo.ts "$@"
