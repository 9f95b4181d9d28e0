#!/usr/bin/env bash
# `npm test`: set up what is missing, then run every test: vitest (unit, integration against a real
# kube-apiserver, e2e with real TorchServe and object stores, cluster on a real two-node cluster) and the plugin's
# JUnit suite.
#
# With no arguments JUnit runs, then two vitest processes side by side: the e2e project in front (its output as it
# goes) and beside it unit + integration (their own control plane), printed whole once the e2e project ends; then
# the cluster project (a real two-node cluster: its own apiserver, bridge, node addresses and containerd). On two
# cores the tests mostly wait (on servers, pods and pollers: about 0.7 of a core in a warm run one file at a time),
# so the two queues overlap rather than queue; the e2e project keeps one file at a time on the real network. Vitest
# cannot do that itself: it runs every project whose files go one at a time in one queue. With arguments (a file,
# a project, a filter) one vitest process runs them as given.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
bash scripts/setup.sh --all
export PATH="$REPO_ROOT/node_modules/.bin:$PATH"
status=0
# The processes beside the front one: name, pid and log, in the order they are reported.
side_names=() side_pids=() side_logs=()
beside() {
  local name=$1 log_file
  shift
  log_file="$(mktemp -t peerload-side.XXXXXX)"
  log "vitest: $name, beside the rest (its output follows theirs)"
  node node_modules/vitest/vitest.mjs run "$@" >"$log_file" 2>&1 &
  side_names+=("$name") side_pids+=($!) side_logs+=("$log_file")
}
stop_beside() {
  local pid
  for pid in "${side_pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${side_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
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
if (( $# == 0 )); then
  # After JUnit: its `mvn verify` rewrites plugin/target, which the e2e and cluster projects read.
  beside "unit and integration" --project unit --project integration
  # An interrupted run stops the side process too.
  # Every command in it may fail harmlessly: under `set -e` a failing command in an EXIT trap becomes the exit status.
  trap 'stop_beside' EXIT
  log "vitest: e2e"
  node node_modules/vitest/vitest.mjs run --project e2e || status=1
  for k in "${!side_pids[@]}"; do
    side_status=0
    wait "${side_pids[$k]}" || side_status=$?
    # Its own time is the Duration line of its report: it may have ended long before the e2e project.
    log "vitest: ${side_names[$k]} (ran beside the e2e project; exit $side_status)"
    cat "${side_logs[$k]}"
    rm -f "${side_logs[$k]}"
    (( side_status == 0 )) || status=1
  done
  side_pids=()
  # The cluster project last, on the machine alone: beside the e2e project and unit + integration, the install
  # e2e's two Triton pods once both read the weights from the origin (the real scheduler sent the second peer
  # back to the source), where it claims one read.
  log "vitest: the cluster project"
  node node_modules/vitest/vitest.mjs run --project cluster || status=1
else
  log "vitest: $*"
  node node_modules/vitest/vitest.mjs run "$@" || status=1
fi
exit $status
