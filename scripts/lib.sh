# Shared helpers for the set-up scripts. Source it; do not run it.
set -euo pipefail
PEERLOAD_CACHE="${PEERLOAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/peerload}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$PEERLOAD_CACHE"
log() {
  printf '[setup] %s\n' "$*" >&2
  # A set-up step that found everything in its cache says nothing; one that logs did some work (step_time).
  if [[ -n ${PEERLOAD_SETUP_WORKED:-} ]]; then : >"$PEERLOAD_SETUP_WORKED"; fi
}

# Microseconds since the epoch, whatever the locale's decimal point.
now_us() { local t=${EPOCHREALTIME/[.,]/}; printf '%s' "$((10#$t))"; }

# step_time FILE NAME START_US STATE: appends the step's line (seconds since START_US to the tenth, name, state:
# cached, set up or failed) to FILE in one short write, as lanes running side by side share the file.
step_time() {
  local tenths=$(( ($(now_us) - $3 + 50000) / 100000 ))
  printf '%d.%d\t%s\t%s\t%s\n' $((tenths / 10)) $((tenths % 10)) "$2" "$4" "${5:-}" >>"$1"
}

# cpu_seconds FILE: writes the CPU time (user + system) of this shell and the children it waited for, in seconds
# to a tenth, from bash's `times` ("0m1.250s 0m0.040s" for the shell, then for its children). `times` writes to
# the file first: in a pipe or $(...) it would run in a fork of its own, whose times start at zero.
cpu_seconds() {
  times >"$1"
  awk '{ for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] } } END { printf "%.1f", s }' "$1" >"$1.sum"
  mv "$1.sum" "$1"
}

# timed_step FILE NAME CMD...: runs CMD and records its line in FILE: cached when CMD logged nothing (a script that
# finds its cache says nothing; log leaves the PEERLOAD_SETUP_WORKED file), set up when it logged, failed when it
# failed. Returns CMD's status.
timed_step() {
  local file=$1 name=$2; shift 2
  local started worked status=0 state=cached
  started=$(now_us) worked="$file.$BASHPID.worked"
  # In a subshell of its own, so that `times` counts this step's processes alone: the CPU it needed, which on a
  # shared machine says more than its wall time (the set-up's steps run side by side).
  ( PEERLOAD_SETUP_WORKED=$worked "$@"; s=$?; cpu_seconds "$worked.cpu"; exit $s ) || status=$?
  if (( status )); then state=failed; elif [[ -e $worked ]]; then state='set up'; fi
  local cpu; cpu=$(cat "$worked.cpu" 2>/dev/null || true)
  rm -f "$worked" "$worked.cpu"
  step_time "$file" "$name" "$started" "$state" "$cpu"
  return "$status"
}

# print_step_times FILE: one line per step, slowest first: "setup: the control plane 412.3 s, 801 CPU-s (set up)",
# then the CPU time of all steps together.
print_step_times() {
  [[ -s $1 ]] || return 0
  LC_ALL=C sort -t $'\t' -k1,1gr "$1" | while IFS=$'\t' read -r seconds name state cpu; do
    printf 'setup: %s %s s%s (%s)\n' "$name" "$seconds" "${cpu:+, $cpu CPU-s}" "$state" >&2
  done
  awk -F '\t' '$4 != "" { s += $4; n++ } END { if (n) printf "setup: %.1f CPU-s in all steps (%.1f min of both cores of a 2-core machine)\n", s, s / 120 }' "$1" >&2
}

# "4m30s" from seconds.
elapsed() { local s=$1; if (( s >= 60 )); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi; }

# What the caller runs after this script: setup.sh exports it for each step, so a script's last long step can say
# what comes next.
next_step() { printf '%s' "${PEERLOAD_SETUP_NEXT:-done}"; }

# with_progress STEP NEXT CMD...: runs CMD in the foreground (Ctrl-C and exit status as usual) and, while it runs,
# logs "STEP: 4m30s elapsed (next: NEXT)" every $PEERLOAD_PROGRESS_SECONDS (30) s, so a build that prints nothing
# for many minutes still says it is alive and what follows it.
# The ticker's own sleep is killed with it: callers capture these scripts' output (execFile, $(...)), and an
# orphaned sleep holding the pipe open would delay them by up to one interval.
with_progress() {
  local step=$1 next=$2; shift 2
  local start; start=$(date +%s)
  local interval=${PEERLOAD_PROGRESS_SECONDS:-30} parent=$BASHPID
  log "$step (next: $next)"
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    tick=$start
    while :; do
      # Ticks on a fixed grid from the start, so a loaded machine's late wake-ups do not add up.
      tick=$(( tick + interval ))
      sleep $(( tick > $(date +%s) ? tick - $(date +%s) : 1 )) & nap=$!
      wait "$nap"
      kill -0 "$parent" 2>/dev/null || exit 0 # the script died (Ctrl-C): stop talking
      log "$step: $(elapsed $(( $(date +%s) - start ))) elapsed (next: $next)"
    done
  ) >/dev/null &
  local ticker=$! status=0
  "$@" || status=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if (( status == 0 )); then
    log "$step: done in $(elapsed $(( $(date +%s) - start )))"
  else
    log "$step: FAILED after $(elapsed $(( $(date +%s) - start ))) (exit $status)"
  fi
  return "$status"
}

# apt_install PKG...: installs Debian packages (as root, with apt-get). Waits up to 10 min for the dpkg lock, since
# set-up steps running side by side (and other set-ups on the machine) may install at the same time.
apt_install() {
  (( $# )) || return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    log "missing Debian packages: $*; install them as root: apt-get install $*"; return 1
  fi
  log "installing Debian packages: $*"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q >&2 &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "$@" >&2
}

# python_venv_dir NAME: the cached virtualenv directory of NAME (a tool and its version) for $PYTHON's (default
# python3) minor version. fresh_venv DIR: makes DIR a new empty virtualenv of that interpreter (python3-venv from
# Debian when it lacks venv).
python_venv_dir() {
  printf '%s/%s-py%s' "$PEERLOAD_CACHE" "$1" \
    "$("${PYTHON:-python3}" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
}
fresh_venv() {
  local py="${PYTHON:-python3}"
  "$py" -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
  log "creating $1"
  rm -rf "$1"
  "$py" -m venv "$1"
}
