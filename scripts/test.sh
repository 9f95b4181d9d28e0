#!/usr/bin/env bash
# `npm test`: set up what is missing, then run every test: vitest (unit, integration against a real
# kube-apiserver, e2e with real TorchServe and object stores, cluster on a real two-node cluster) and the plugin's
# JUnit suite.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh --all
export PATH="$REPO_ROOT/node_modules/.bin:$PATH"
status=0
log "plugin: JUnit (Maven Surefire)"
junit_started=$(now_us)
bash scripts/build-plugin.sh >/dev/null || status=1
# Maven runs quietly; say what Surefire counted, and in how long (the build included).
JUNIT_SECONDS=$(( ($(now_us) - junit_started) / 1000000 )) python3 - <<'PY' || true
import glob, os, xml.etree.ElementTree as ET
t = f = e = s = 0
for path in glob.glob('plugin/target/surefire-reports/TEST-*.xml') + glob.glob('plugin/target/failsafe-reports/TEST-*.xml'):
    r = ET.parse(path).getroot()
    t += int(r.get('tests', 0)); f += int(r.get('failures', 0)); e += int(r.get('errors', 0)); s += int(r.get('skipped', 0))
print(f"JUnit: {t - f - e - s} passed, {f + e} failed, {s} skipped in {os.environ['JUNIT_SECONDS']} s")
PY
log "vitest: unit, integration, e2e, cluster"
node node_modules/vitest/vitest.mjs run "$@" || status=1
exit $status
