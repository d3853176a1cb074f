#!/usr/bin/env bash
# Install Debian packages for a CI service (docker-up.sh, slurm-up.sh, the browser tests), quietly.
#
#   .ci/apt-install.sh LOG_FILE PACKAGE...
#
# Needs root and apt-get; on failure prints the log's last lines and exits 1.
set -euo pipefail

log=${1:?usage: apt-install.sh LOG_FILE PACKAGE...}
shift
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "apt-install: missing $* and cannot install them (needs root and apt-get)" >&2
    exit 1
fi
echo "apt-install: installing $*" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >"$log" 2>&1
apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1 \
    || { echo "apt-install: apt-get install failed:" >&2; tail -20 "$log" >&2; exit 1; }
