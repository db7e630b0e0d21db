#!/usr/bin/env bash
# etcd.sh: the etcd baseline for `make bench`. Installs Debian's etcd-server
# (etcd 3.4) when `etcd` is not on PATH, builds the load generator in
# internal/bench/etcd (its own Go module, so etcd's client stays out of the
# main go.mod) and runs it; arguments go to it, e.g. `-out FILE`, `-json`,
# `-c 16,64`. It starts a 3-member cluster on loopback, measures closed-loop
# puts and removes the cluster again (see internal/bench/DESIGN.md).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "etcd.sh: etcd is not on PATH; install it (apt-get install -y etcd-server) or run as root" >&2
    exit 1
  fi
  echo "etcd.sh: installing etcd-server" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
  # The package enables and starts a system etcd where systemd runs; the
  # bench starts its own members, so keep that one from taking CPU.
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now etcd.service >/dev/null 2>&1 || true
  fi
fi

# A built binary rather than `go run`: `go run` does not pass SIGTERM on,
# and the load generator must see it to stop its etcd members.
mkdir -p bin
(cd internal/bench/etcd && $GO build -o ../../../bin/etcd-bench .)
exec bin/etcd-bench "$@"
