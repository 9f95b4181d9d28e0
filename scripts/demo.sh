#!/usr/bin/env bash
# `npm run demo`: the main job on a local default. Sets up what is missing, then runs scripts/demo.ts.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh --all
exec node_modules/.bin/node scripts/demo.ts "$@"
