#!/usr/bin/env bash
# The catalog of a cluster: PostgreSQL on the head node (deploy/cluster*.yaml run this in
# head_setup_commands; running it again changes nothing). Installs Debian's postgresql where
# it is missing, makes the role and database `vifusion` with a generated password (kept in
# ~/.vifusion-pg, mode 0600) and exports VIFUSION_CATALOG_URL from ~/.vifusion-env, which
# every login shell sources: `ray start` passes it to the API replicas and the ingest pool.
# The server listens on localhost only: everything that talks to the catalog runs on the head.
# A managed PostgreSQL instead: set VIFUSION_CATALOG_URL in ~/.vifusion-env and skip this.
#
# PSQL: how to reach the server as its superuser (default: Debian's local `postgres` account).
set -euo pipefail
PSQL=${PSQL:-"sudo -u postgres psql"}
PGHOST_URL=${PGHOST_URL:-127.0.0.1:5432}

if ! command -v psql >/dev/null; then
    sudo apt-get update -qq && sudo apt-get install -y -qq postgresql
fi
if [ ! -s ~/.vifusion-pg ]; then
    (umask 077 && head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > ~/.vifusion-pg)
fi
password=$(cat ~/.vifusion-pg)
$PSQL -v ON_ERROR_STOP=1 -q -v pw="$password" <<'SQL'
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'vifusion') AS make_role \gset
\if :make_role
CREATE ROLE vifusion LOGIN;
\endif
ALTER ROLE vifusion PASSWORD :'pw';
SELECT NOT EXISTS (SELECT FROM pg_database WHERE datname = 'vifusion') AS make_db \gset
\if :make_db
CREATE DATABASE vifusion OWNER vifusion;
\endif
SQL
line="export VIFUSION_CATALOG_URL=postgresql://vifusion:${password}@${PGHOST_URL}/vifusion"
touch ~/.vifusion-env
grep -v '^export VIFUSION_CATALOG_URL=' ~/.vifusion-env > ~/.vifusion-env.new || true
echo "$line" >> ~/.vifusion-env.new
chmod 600 ~/.vifusion-env.new
mv ~/.vifusion-env.new ~/.vifusion-env
