#!/usr/bin/env bash
# bench.sh: every figure the README reports, printed in one run. Called by
# `make bench` after building bin/palyra and bin/examples. Figures come from
# benchmarks, never from test assertions.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

section() { printf '\n=== %s\n' "$1"; }
gobench() { # package, pattern, benchtime
  $GO test -run '^$' -bench "$2" -benchtime "$3" "$1" | grep -E '^Benchmark' || true
}

# The etcd figures go to the main bench through PALYRA_ETCD_RESULTS (a JSON
# file, format in internal/bench/DESIGN.md) so it can print jobs/s as a
# ratio of etcd's puts/s measured on the same machine in the same run.
section "etcd baseline: 3 members on loopback, closed-loop puts"
etcd_results=$(mktemp -t palyra-etcd-results.XXXXXX)
trap 'rm -f "$etcd_results"' EXIT
GO=$GO bash scripts/etcd.sh -out "$etcd_results"
export PALYRA_ETCD_RESULTS=$etcd_results

section "node and cluster (internal/bench: real QUIC + mTLS API, real processes)"
$GO run ./internal/bench

section "scheduler only: placing 5,000 jobs on 10,000 simulated nodes (node/scheduler)"
gobench ./node/scheduler 'Plan10kNodes' 5x

section "wasm sandbox: deterministic fuel, metered vs unmetered (same run, alternating)"
gobench ./runtime/wasm/fuel 'MeteredRatio' 20x
gobench ./runtime/wasm 'MeteredRatio|TrivialJob$|TrivialJobUnmetered|GrantedJob' 200x

section "wasm: deterministic mode's cost beside the default (Go guest reading clocks and randomness)"
gobench ./runtime/wasm 'DeterministicOverhead' 100x

section "wasm: a CPU-bound C guest (clang -O2) metered under Palyra against the same source built natively"
if ! command -v clang >/dev/null || [ ! -d /usr/include/wasm32-wasi ]; then
  if [ "$(id -u)" = 0 ]; then apt-get install -y -qq clang lld wasi-libc libclang-rt-14-dev-wasm32 >/dev/null || true; fi
fi
gobench ./runtime/wasm 'CGuestNativeRatio' 10x

section "browser jobs: warm pool vs cold chromium-headless-shell --screenshot (same run)"
gobench ./runtime/browser 'WarmVsCold' 20x

section "browser sessions: one step per call through another node (API, relay, step)"
gobench ./node 'BrowserSessionStep' 300x
