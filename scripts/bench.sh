#!/usr/bin/env bash
# `npm run bench`: the benchmarks of bench/ (not part of `npm test`). Sets up what is missing (idempotent:
# control plane, TorchServe, MinIO, the plugin jar), then runs bench/run.ts with Node 24.
#   npm run bench -- --only 1,2 --reps 5
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh >&2
bash scripts/setup-torchserve.sh >/dev/null
bash scripts/setup-minio.sh >/dev/null
# Rows 6 and 8 on the real P2P network (cached after the first build).
bash scripts/setup-dragonfly.sh >/dev/null
# Row 11's model servers (real Triton, cached likewise).
bash scripts/setup-triton.sh >/dev/null
# Row 12's registry and modctl (cached likewise).
bash scripts/setup-registry.sh >/dev/null
bash scripts/setup-modctl.sh >/dev/null
exec node_modules/.bin/node bench/run.ts "$@"
