#!/usr/bin/env bash
# Installs what building and testing palyra needs on a fresh Debian machine.
# Idempotent: installs only what is missing. Go itself must be on PATH.
set -euo pipefail

need=()
command -v wat2wasm >/dev/null 2>&1 || need+=(wabt)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
[ -x /usr/lib/chromium/chromium-headless-shell ] || need+=(chromium-headless-shell)
command -v ansible-playbook >/dev/null 2>&1 || need+=(ansible-core)
command -v ansible-lint >/dev/null 2>&1 || need+=(ansible-lint)

if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing ${need[*]}; install them (apt-get install -y ${need[*]}) or run as root" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v go >/dev/null 2>&1 || { echo "deps: go is not on PATH (need Go 1.26+)" >&2; exit 1; }
go mod download
