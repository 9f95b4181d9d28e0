#!/usr/bin/env bash
# `npm test`: set up what is missing, then run every test: vitest (unit, integration against a real
# kube-apiserver, e2e with real TorchServe and object stores) and the plugin's JUnit suite.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh --all
export PATH="$REPO_ROOT/node_modules/.bin:$PATH"
status=0
log "plugin: JUnit (Maven Surefire)"
bash scripts/build-plugin.sh >/dev/null || status=1
log "vitest: unit, integration, e2e"
node node_modules/vitest/vitest.mjs run "$@" || status=1
exit $status
