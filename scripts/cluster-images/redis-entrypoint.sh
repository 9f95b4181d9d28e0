#!/bin/sh
# The entrypoint of the Redis image of scripts/build-cluster-images.sh: Redis in the foreground on every address,
# nothing persisted (the manager's and scheduler's job queue and caches), from:
#   REDIS_PORT (6379), REDIS_PASSWORD (none). Further arguments go to redis-server (e.g. --appendonly yes).
# No configuration file is read. Protected mode is off: in a cluster the Service and the password decide who
# connects, and without a password protected mode would refuse every pod.
set -eu
if [ -n "${REDIS_PASSWORD:-}" ]; then set -- --requirepass "$REDIS_PASSWORD" "$@"; fi
exec redis-server --port "${REDIS_PORT:-6379}" --bind '0.0.0.0 -::*' --protected-mode no --save '' \
  --appendonly no --dir /data "$@"
