#!/bin/sh
# The entrypoint of the MariaDB image of scripts/build-cluster-images.sh: MariaDB in the foreground; on the first
# start (an empty data directory) it creates the database and the user the Dragonfly manager connects as, from:
#   MARIADB_PASSWORD (required), MARIADB_USER (dragonfly), MARIADB_DATABASE (manager), MARIADB_PORT (3306),
#   MARIADB_DATADIR (/var/lib/mysql), MARIADB_BUFFER_POOL_SIZE (64M). Further arguments go to mariadbd.
# No configuration file is read (--no-defaults): everything is on the command line.
set -eu
: "${MARIADB_PASSWORD:?must be set (the password of MARIADB_USER)}"
db=${MARIADB_DATABASE:-manager} user=${MARIADB_USER:-dragonfly}
data=${MARIADB_DATADIR:-/var/lib/mysql} port=${MARIADB_PORT:-3306}
run=/run/mysqld
mkdir -p "$data" "$run"
if [ "$(id -u)" = 0 ]; then
  # Root only to hand the data directory to mysql; the server itself runs as mysql.
  as=mysql client=root
  chown mysql:mysql "$data" "$run"
else
  as=$(id -un) client=$as
fi
common="--no-defaults --datadir=$data --user=$as --tmpdir=/tmp --character-set-server=utf8mb4"
if [ ! -d "$data/mysql" ]; then
  echo "mariadb: initialising $data (database $db, user $user)"
  # shellcheck disable=SC2086 # $common is a list of options
  mariadb-install-db $common --auth-root-authentication-method=socket --skip-test-db >/dev/null
  # shellcheck disable=SC2086
  mariadbd $common --skip-networking --socket="$run/init.sock" --pid-file="$run/init.pid" &
  pid=$!
  i=0
  until mariadb --no-defaults --socket="$run/init.sock" -u "$client" -e 'SELECT 1' >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 300 ] || { echo 'mariadb: the initialising server did not answer' >&2; exit 1; }
    sleep 0.2
  done
  # SQL string literals: backslashes and quotes doubled.
  quote() { printf '%s' "$1" | sed "s/\\\\/\\\\\\\\/g; s/'/''/g"; }
  mariadb --no-defaults --socket="$run/init.sock" -u "$client" -e "
    CREATE DATABASE IF NOT EXISTS \`$db\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
    CREATE USER IF NOT EXISTS '$(quote "$user")'@'%' IDENTIFIED BY '$(quote "$MARIADB_PASSWORD")';
    GRANT ALL PRIVILEGES ON \`$db\`.* TO '$(quote "$user")'@'%';"
  kill "$pid"
  wait "$pid" || true
fi
# shellcheck disable=SC2086
exec mariadbd $common --port="$port" --bind-address=0.0.0.0 --skip-name-resolve --socket="$run/mysqld.sock" \
  --pid-file="$run/mysqld.pid" --innodb-buffer-pool-size="${MARIADB_BUFFER_POOL_SIZE:-64M}" "$@"
