#!/usr/bin/env bash
# Builds the TorchServe endpoint plugin (plugin/, Maven): compiles for Java 11, runs the JUnit suite (Surefire),
# shades the jar, then checks the shaded jar itself (Failsafe: bytecode 55, relocation, service file).
# Idempotent; the Maven repository is cached under $PEERLOAD_CACHE/m2.
# Prints the jar's absolute path on stdout (everything else goes to stderr).
#   PEERLOAD_SKIP_PLUGIN_TESTS=1  build without running JUnit (test/e2e/plugin.test.ts uses it; JUnit runs here)
source "$(dirname "$0")/lib.sh"

M2="$PEERLOAD_CACHE/m2"
mkdir -p "$M2"
PLUGIN_DIR="$REPO_ROOT/plugin"
# The project's own <version> is the first one in the pom (dependencies and plugins come after it).
VERSION="$(sed -n 's:^  <version>\(.*\)</version>.*:\1:p' "$PLUGIN_DIR/pom.xml" | head -1)"
JAR="$PLUGIN_DIR/target/peerload-torchserve-plugin-$VERSION.jar"
MVN=(mvn -q -B -Dmaven.repo.local="$M2" -Dstyle.color=never)

command -v mvn >/dev/null || { log "installing Maven"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null; }

# --- The plugin SDK (provided scope) -----------------------------------------------------------------------
# org.pytorch:torchserve-plugins-sdk:0.0.5 is what TorchServe 0.12.0 bundles, but it is not downloadable from
# Maven Central (404 on repo.maven.apache.org). The same classes ship inside TorchServe's own
# ts/frontend/model-server.jar (package org.pytorch.serve.servingsdk, minus the server's impl/ package), so we
# install exactly those into the cached local repository under the SDK's coordinates. Only the API is taken;
# it is `provided`, so nothing of it ends up in the plugin jar.
SDK_DIR="$M2/org/pytorch/torchserve-plugins-sdk/0.0.5"
if [[ ! -f "$SDK_DIR/torchserve-plugins-sdk-0.0.5.jar" ]]; then
  if ! "${MVN[@]}" dependency:get -Dartifact=org.pytorch:torchserve-plugins-sdk:0.0.5 -Dtransitive=false >/dev/null 2>&1; then
    log "torchserve-plugins-sdk:0.0.5 is not on Maven Central; extracting it from TorchServe 0.12.0's model-server.jar"
    MS_JAR="$(ls "$PEERLOAD_CACHE"/torchserve-0.12.0-*/lib/python3*/site-packages/ts/frontend/model-server.jar 2>/dev/null | head -1 || true)"
    if [[ -z "$MS_JAR" ]]; then
      WHEELS="$PEERLOAD_CACHE/wheels/torchserve-0.12.0"
      if ! ls "$WHEELS"/torchserve-0.12.0-*.whl >/dev/null 2>&1; then
        log "downloading the torchserve 0.12.0 wheel (no dependencies)"
        mkdir -p "$WHEELS"
        "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: -d "$WHEELS" torchserve==0.12.0 >&2
      fi
      WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
      (cd "$WORK" && unzip -q -o "$(ls "$WHEELS"/torchserve-0.12.0-*.whl | head -1)" 'ts/frontend/model-server.jar')
      MS_JAR="$WORK/ts/frontend/model-server.jar"
    fi
    SDK_WORK="$(mktemp -d)"
    (cd "$SDK_WORK" && unzip -q -o "$MS_JAR" 'org/pytorch/serve/servingsdk/*' -x 'org/pytorch/serve/servingsdk/impl/*' \
      && jar cf sdk.jar org)
    "${MVN[@]}" install:install-file -Dfile="$SDK_WORK/sdk.jar" -DgroupId=org.pytorch \
      -DartifactId=torchserve-plugins-sdk -Dversion=0.0.5 -Dpackaging=jar -DgeneratePom=true >&2
    rm -rf "$SDK_WORK"
  fi
fi

# --- Build ------------------------------------------------------------------------------------------------
ARGS=(verify)
[[ "${PEERLOAD_SKIP_PLUGIN_TESTS:-}" == 1 ]] && ARGS+=(-DskipTests)
log "building the plugin (mvn ${ARGS[*]})"
(cd "$PLUGIN_DIR" && "${MVN[@]}" "${ARGS[@]}" >&2)
[[ -f "$JAR" ]] || { log "expected $JAR after the build"; exit 1; }
log "plugin jar: $JAR ($(stat -c %s "$JAR") bytes)"
echo "$JAR"
