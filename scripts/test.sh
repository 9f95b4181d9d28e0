#!/usr/bin/env bash
# `npm test`: set up what is missing, then run every test: vitest (unit, integration against a real
# kube-apiserver, e2e with real TorchServe and object stores, cluster on a real two-node cluster) and the plugin's
# JUnit suite.
#
# With no arguments the `cluster` project runs in a vitest process of its own, beside the JUnit suite and the other
# projects rather than after them: it has a machine of its own (its own apiserver, bridge, node addresses and
# containerd), and its four minutes are mostly waiting for pods. Vitest cannot do that itself: it runs every project
# whose files go one at a time in one queue. Its output is printed whole once it ends. With arguments (a file, a
# project, a filter) one vitest process runs them as given.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh --all
export PATH="$REPO_ROOT/node_modules/.bin:$PATH"
status=0
cluster_pid=
if (( $# == 0 )); then
  cluster_log="$(mktemp -t peerload-cluster-project.XXXXXX)"
  log "vitest: the cluster project, beside the rest (its output follows theirs)"
  node node_modules/vitest/vitest.mjs run --project cluster >"$cluster_log" 2>&1 &
  cluster_pid=$!
  # An interrupted run stops the cluster's vitest too: its teardown stops the cluster.
  # Every command in it may fail harmlessly: under `set -e` a failing command in an EXIT trap becomes the exit status.
  trap 'if [[ -n $cluster_pid ]]; then kill -INT "$cluster_pid" 2>/dev/null || true; wait "$cluster_pid" 2>/dev/null || true; fi' EXIT
fi
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
if [[ -n $cluster_pid ]]; then
  log "vitest: unit, integration, e2e"
  node node_modules/vitest/vitest.mjs run --project unit --project integration --project e2e || status=1
  cluster_status=0
  wait "$cluster_pid" || cluster_status=$?
  cluster_pid=
  # Its own time is the Duration line of its report: it may have ended long before the rest.
  log "vitest: the cluster project (ran beside the rest; exit $cluster_status)"
  cat "$cluster_log"
  rm -f "$cluster_log"
  (( cluster_status == 0 )) || status=1
else
  log "vitest: $*"
  node node_modules/vitest/vitest.mjs run "$@" || status=1
fi
exit $status
