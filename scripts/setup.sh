#!/usr/bin/env bash
# Idempotent set-up for development, the demo and the tests. Safe to run again: each step checks before it works.
#   scripts/setup.sh                     node packages + control plane and the tools that read health and metrics
#                                        (enough for unit and integration tests)
#   scripts/setup.sh --demo              what `npm run demo` runs, and nothing more: node packages, the control plane,
#                                        TorchServe and the plugin jar (its JUnit suite is `npm test`'s job); its
#                                        object storage is Azurite, a node package
#   scripts/setup.sh --demo --real-p2p   the same plus the real Dragonfly network (`npm run demo -- --real-p2p`)
#   scripts/setup.sh --demo --no-torchserve   without TorchServe and the plugin (`npm run demo -- --no-torchserve`)
#   scripts/setup.sh --all               everything `npm test` needs: the above, the real Dragonfly network, Triton
#                                        and MLServer, the image tools and bases, the OCI registry and modctl, the
#                                        real two-node cluster's binaries and images (the plugin's JUnit suite is
#                                        scripts/test.sh's)
# Independent steps run side by side (most are downloads or one-core-bound phases); a failed step is named at the
# end, with its script, and the set-up exits non-zero.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

mode=base real_p2p=0 torchserve=1
for arg in "$@"; do
  case $arg in
    --all) mode=all ;;
    --demo) mode=demo ;;
    --real-p2p) real_p2p=1 ;;
    --no-torchserve) torchserve=0 ;;
    *) log "unknown option $arg (use --demo [--real-p2p] [--no-torchserve] or --all)"; exit 2 ;;
  esac
done
[[ $mode == all ]] && real_p2p=1 torchserve=1
setup_start=$(date +%s)
# Each step's time and whether it found its cache, printed at the end (print_step_times).
step_times=$(mktemp)
trap 'rm -f "$step_times"' EXIT

# 1. Node packages, including Node 24 itself (the npm `node` package): npm scripts run under
#    node_modules/.bin/node whatever Node the machine has, since npm puts node_modules/.bin first on PATH.
node_packages() {
  local stamp=node_modules/.package-lock.json
  [[ ! -f $stamp || package-lock.json -nt $stamp ]] || return 0
  command -v npm >/dev/null || { log "npm is required: apt-get install nodejs npm"; return 1; }
  log "installing node packages (npm ci)"
  npm ci --no-audit --no-fund >&2
}
timed_step "$step_times" "node packages" node_packages
node_version=$(node_modules/.bin/node --version)
[[ ${node_version#v} =~ ^(2[2-9]|[3-9][0-9])\. ]] || { log "node_modules/.bin/node is $node_version, need >= 22"; exit 1; }

# 2. Debian packages, all in one apt run before the steps start: Java 17 (TorchServe's frontend and the plugin's
#    build), Maven, Python's venv and Lua 5.1 for the Argo CD health-check tests (Argo CD runs them in gopher-lua, a
#    Lua 5.1). The Dragonfly network and the image tools install their own, waiting on the dpkg lock.
debs=()
if [[ $mode != base ]] && (( torchserve )); then
  java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])' || debs+=(openjdk-17-jdk-headless)
  command -v mvn >/dev/null || debs+=(maven)
  command -v unzip >/dev/null || debs+=(unzip)
  "${PYTHON:-python3}" -c 'import ensurepip, venv' 2>/dev/null || debs+=(python3-venv)
fi
[[ $mode != demo ]] && ! command -v lua5.1 >/dev/null && debs+=(lua5.1)
timed_step "$step_times" "Debian packages" apt_install "${debs[@]}"

# 3. The steps. A lane runs its steps in order; lanes run side by side, each in its own process group so that an
#    interrupted set-up stops them (background jobs of a script would otherwise ignore Ctrl-C and build on).
lane_pids=() lane_names=()
lane() { # lane NAME FUNCTION
  set -m
  "$2" </dev/null >/dev/null &
  set +m
  lane_pids+=($!) lane_names+=("$1")
}
trap 'for p in "${lane_pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done; exit 130' INT TERM
# step NAME NEXT SCRIPT [ARG...]: runs scripts/SCRIPT, telling it what comes next (its progress lines say it).
# Its time and whether it found its cache go to $step_times (timed_step).
step() {
  local name=$1 next=$2 script=$3; shift 3
  PEERLOAD_SETUP_NEXT=$next timed_step "$step_times" "$name" bash "scripts/$script" "$@" >/dev/null ||
    { log "FAILED: $name (scripts/$script; its messages are above)"; return 1; }
}
wait_lanes() {
  local i failed=()
  for i in "${!lane_pids[@]}"; do wait "${lane_pids[$i]}" || failed+=("${lane_names[$i]}"); done
  lane_pids=() lane_names=()
  if (( ${#failed[@]} )); then
    print_step_times "$step_times"
    log "set-up failed after $(elapsed $(( $(date +%s) - setup_start ))): $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')"
    exit 1
  fi
}

then_=$([[ $mode == demo ]] && echo "the demo" || echo "the tests")
dragonfly() { step "the real Dragonfly network" "$then_" setup-dragonfly.sh; }
torchserve() { step "TorchServe" "$then_" setup-torchserve.sh; }
oip_servers() { # the e2e tests' Triton and MLServer (pip, each in its own cached venv)
  step "Triton" "MLServer" setup-triton.sh
  step "MLServer" "huggingface_hub" setup-mlserver.sh
  step "huggingface_hub" "$then_" setup-hf-hub.sh # the real Hub client the Hub emulator is held to
}
control_plane() { step "the control plane" "$then_" setup-control-plane.sh; }
# The jar without JUnit: the demo does not run it, and `npm test` runs it right after the set-up (scripts/test.sh).
plugin_jar() { PEERLOAD_SKIP_PLUGIN_TESTS=1 step "the plugin jar" "${1:-$then_}" build-plugin.sh; }
tools() { # what reads resource health and metrics as users' tools do; the control plane first (it is the longest)
  step "the control plane" "$([[ $mode == all ]] && echo "the cluster" || echo helm)" setup-control-plane.sh
  # The real cluster's node binaries, CoreDNS and images (--all): the same Go build cache as the control plane's.
  if [[ $mode == all ]]; then step "the cluster" "helm" setup-cluster.sh; fi
  step "helm" "kustomize" setup-helm.sh
  step "kustomize" "kstatus" setup-kustomize.sh
  step "kstatus" "promtool" setup-kstatus.sh
  step "promtool" "$then_" setup-promtool.sh
}
oci_tools() { # the OCI tests' real registry (Distribution) and modctl, two Go builds
  step "the OCI registry" "modctl" setup-registry.sh
  step "modctl" "$then_" setup-modctl.sh
}
minio_then_e2e() {
  step "MinIO" "the plugin" setup-minio.sh
  e2e
}
e2e() { # the plugin, then the image tests' buildah and Debian-built bases (mostly downloads)
  plugin_jar "image tools"
  step "image tools" "image bases" setup-image-tools.sh
  step "image bases" "$then_" image-bases.sh
}

case $mode in
  base)
    tools
    ;;
  demo)
    # The longest builds start first: the real network's Rust peer daemon when asked for, then the control plane's
    # Go build (kube-apiserver and etcd in one), beside TorchServe's pip install and the plugin's Maven build.
    (( real_p2p )) && lane "the real Dragonfly network" dragonfly
    lane "the control plane" control_plane
    if (( torchserve )); then
      lane "TorchServe" torchserve
      lane "the plugin jar" plugin_jar
    fi
    wait_lanes
    ;;
  all)
    # The real network is the longest build (the Rust peer daemon): everything else runs beside it.
    lane "the real Dragonfly network" dragonfly
    lane "the control plane, the cluster and the health tools" tools
    lane "TorchServe" torchserve
    lane "Triton and MLServer" oip_servers
    lane "MinIO, the plugin and the image tools" minio_then_e2e
    lane "the OCI registry and modctl" oci_tools
    wait_lanes
    # The real cluster's images take what the lanes built (the Dragonfly binaries, Triton, the image bases).
    step "the cluster images" "$then_" build-cluster-images.sh || { print_step_times "$step_times"; exit 1; }
    ;;
esac
print_step_times "$step_times"
log "ready in $(elapsed $(( $(date +%s) - setup_start ))) (node $node_version, cache $PEERLOAD_CACHE)"
