#!/usr/bin/env bash
# Builds the real Dragonfly P2P network for the tests and benchmarks, and caches it by version under
# $PEERLOAD_CACHE/dragonfly-<ver>-client<ver>/bin:
#   manager, scheduler      Go, from the Go module proxy (d7y.io/dragonfly/v2)
#   dfdaemon                Rust, from crates.io (dragonfly-client, the version that Dragonfly release bundles)
# plus the Debian packages they run with (MariaDB, Redis) and the build tools the Rust crate needs.
# Idempotent: a second run only checks the binaries. Prints the bin directory on stdout.
#
# Why not `go install d7y.io/dragonfly/v2/cmd/manager@v2.5.1`: the proxy refuses that module's version list, which
# `go install` asks for; `go mod download` of the exact version works, and `go build` inside the downloaded module
# uses its own go.mod and go.sum, so the build is the released one.
#
# Why a custom cargo profile: with the stock release profile the daemon takes about an hour on 2 cores, most of it
# rocksdb's C++ at -O3. The daemon's rocksdb holds only task metadata, so it is built at -O1; the Rust code stays
# optimised (opt-level 2) because it moves every byte of the model archives the benchmarks time. Measured
# 2026-11-29 with this profile (crates already downloaded): 2,968 CPU-seconds user + 200 system, so at least 26 min
# with both cores of a 2-core machine to itself; 40 min in a fresh machine's whole set-up, beside the other builds.
# The Go manager and scheduler take about 130 s more.
# Why not a lower opt-level for the tests' daemon: the Rust code is not where the time goes. Built at opt-level 1
# with rocksdb at -O0 it took 2,973 CPU-seconds (2,764 user + 209 system), 6% less; cargo's --timings put the
# longest units in C and C++ build scripts: rocksdb 1,256 s (two compile jobs), vendored OpenSSL 266 s, jemalloc
# 250 s, zstd 86 s. Debian's rocksdb (7.8) is older than the 10.4 C API the rocksdb crate binds.
source "$(dirname "$0")/lib.sh"

DRAGONFLY_VERSION="${PEERLOAD_DRAGONFLY_VERSION:-v2.5.1}"
CLIENT_VERSION="${PEERLOAD_DRAGONFLY_CLIENT_VERSION:-1.4.2}"
OUT="$PEERLOAD_CACHE/dragonfly-${DRAGONFLY_VERSION}-client${CLIENT_VERSION}"
BIN="$OUT/bin"

need_debs=()
for cmd_pkg in mariadbd:mariadb-server redis-server:redis-server nginx:nginx-light; do
  command -v "${cmd_pkg%%:*}" >/dev/null || [[ -x /usr/sbin/${cmd_pkg%%:*} ]] || need_debs+=("${cmd_pkg#*:}")
done
if [[ ! -x "$BIN/dfdaemon" ]]; then
  command -v clang >/dev/null || need_debs+=(clang libclang-dev)
  command -v protoc >/dev/null || need_debs+=(protobuf-compiler)
  # The well-known types (google/protobuf/*.proto) that prost-wkt-types compiles against.
  [[ -f /usr/include/google/protobuf/duration.proto ]] || need_debs+=(libprotobuf-dev)
  command -v cmake >/dev/null || need_debs+=(cmake)
fi
if (( ${#need_debs[@]} )); then
  log "installing Debian packages: ${need_debs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q >&2 && apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${need_debs[@]}" >&2
fi

if [[ -x "$BIN/manager" && -x "$BIN/scheduler" && -x "$BIN/dfdaemon" ]]; then
  echo "$BIN"; exit 0
fi
command -v go >/dev/null || { log "go is required to build the Dragonfly manager and scheduler"; exit 1; }
command -v cargo >/dev/null || { log "cargo is required to build the Dragonfly peer daemon (rustup)"; exit 1; }
mkdir -p "$BIN"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT

if [[ ! -x "$BIN/manager" || ! -x "$BIN/scheduler" ]]; then
  log "building Dragonfly manager and scheduler $DRAGONFLY_VERSION (a few minutes on 2 cores; cached afterwards)"
  start=$(date +%s)
  dir=$(go mod download -json "d7y.io/dragonfly/v2@${DRAGONFLY_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $dir ]] || { log "go mod download d7y.io/dragonfly/v2@${DRAGONFLY_VERSION} gave no directory"; exit 1; }
  build_cmd() { # build_cmd manager|scheduler
    (cd "$dir" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X d7y.io/dragonfly/v2/version.GitVersion=${DRAGONFLY_VERSION}" \
      -o "$work/$1" "./cmd/$1")
  }
  with_progress "building the Dragonfly manager" "scheduler" build_cmd manager
  mv "$work/manager" "$BIN/manager"
  with_progress "building the Dragonfly scheduler" "$([[ -x $BIN/dfdaemon ]] && next_step || echo dfdaemon)" build_cmd scheduler
  mv "$work/scheduler" "$BIN/scheduler"
  log "manager and scheduler built in $(( $(date +%s) - start )) s"
fi

if [[ ! -x "$BIN/dfdaemon" ]]; then
  # Only the daemon: the tests and benchmarks use its proxy, never dfget.
  log "building dfdaemon (dragonfly-client $CLIENT_VERSION; about 30-40 min on 2 cores; cached afterwards)"
  start=$(date +%s)
  # The target directory is kept in the cache until the daemon is built: an interrupted or failed build (an hour
  # of work) resumes where it stopped instead of starting over.
  target="$PEERLOAD_CACHE/cargo-target-dragonfly-client${CLIENT_VERSION}"
  CARGO_TARGET_DIR="$target" with_progress "building dfdaemon" "$(next_step)" cargo install "dragonfly-client@${CLIENT_VERSION}" --locked --root "$work/root" \
    --bin dfdaemon \
    --config 'profile.release.opt-level=2' \
    --config 'profile.release.debug=false' \
    --config 'profile.release.incremental=false' \
    --config 'profile.release.package.librocksdb-sys.opt-level=1' >&2
  mv "$work/root/bin/dfdaemon" "$BIN/"
  rm -rf "$target"
  log "dfdaemon built in $(( $(date +%s) - start )) s"
fi
echo "$BIN"
