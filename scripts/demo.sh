#!/usr/bin/env bash
# demo.sh: a three-node palyra cluster on this machine (127.0.0.1, three
# UDP ports), a job, and the leader killed with SIGKILL while the job runs.
# Narrates each step. Run it with `make demo` (which builds bin/palyra and
# bin/examples first). It stops its nodes and deletes its temp dir on exit,
# also when it fails or is interrupted.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=$PWD/bin/palyra
SLEEP_WASM=$PWD/bin/examples/sleep.wasm
[ -x "$BIN" ] && [ -f "$SLEEP_WASM" ] || { echo "demo: run 'make build examples' first (or just 'make demo')" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/palyra-demo.XXXXXX")
declare -a PIDS=() ADDRS=() DIRS=() IDS=()

cleanup() {
  local code=$? pid alive
  # SIGTERM lets each node stop cleanly; after 15 s, SIGKILL what is left.
  for pid in "${PIDS[@]}"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  done
  for _ in $(seq 1 150); do
    alive=0
    for pid in "${PIDS[@]}"; do
      [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for i in "${!PIDS[@]}"; do
    pid=${PIDS[$i]}
    [ -n "$pid" ] || continue
    if kill -KILL "$pid" 2>/dev/null; then
      echo "demo: node $((i+1)) (pid $pid) did not stop within 15 s of SIGTERM; killed it" >&2
    fi
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
  if [ "$code" != 0 ]; then
    echo "demo: failed (exit $code); node logs were in $WORK and are removed" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
note() { printf '    %s\n' "$*"; }
fail() { echo "demo: $*" >&2; for i in "${!DIRS[@]}"; do echo "--- node $((i+1)) log:" >&2; tail -n 15 "$WORK/n$((i+1)).log" >&2 || true; done; exit 1; }

# palyra_at I ARGS...: run the CLI against node I as the cluster's operator
# (the credential lives in node 1's data dir; node 1 need not be running).
palyra_at() { local i=$1; shift; "$BIN" --data-dir "${DIRS[0]}" --addr "${ADDRS[$i]}" "$@"; }

# json_field KEY: the first "KEY": "value" in JSON on stdin.
json_field() { sed -n "s/^ *\"$1\": \"\\([^\"]*\\)\".*/\\1/p" | head -n 1; }

# free_port: an unused UDP port on 127.0.0.1.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if ! ss -Hnul "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return; fi
  done
  fail "no free UDP port found"
}

# wait_ready I: until node I has logged that it is ready (at most 60 s).
wait_ready() {
  local i=$1
  for _ in $(seq 1 600); do
    kill -0 "${PIDS[$i]}" 2>/dev/null || fail "node $((i+1)) exited"
    grep -q 'msg="node ready"' "$WORK/n$((i+1)).log" && return 0
    sleep 0.1
  done
  fail "node $((i+1)) was not ready within 60 s"
}

for i in 0 1 2; do
  ADDRS[$i]=127.0.0.1:$(free_port)
  DIRS[$i]=$WORK/node$((i+1))
done

say "Step 1: start node 1. Its first start creates a new cluster: a CA, its own certificate, a one-voter Raft."
"$BIN" --data-dir "${DIRS[0]}" node start --listen "${ADDRS[0]}" >"$WORK/n1.log" 2>&1 &
PIDS[0]=$!
wait_ready 0
IDS[0]=$(palyra_at 0 status --json | json_field node_id)
note "node 1 is ${IDS[0]} on ${ADDRS[0]} (UDP, QUIC + mutual TLS), pid ${PIDS[0]}"

for i in 1 2; do
  say "Step $((i+1)): node $((i+1)) joins with a one-time pairing code made on node 1."
  code=$(palyra_at 0 pair create --kind node --json | json_field code)
  [ -n "$code" ] || fail "pair create printed no code"
  note "palyra pair create --kind node  →  $code"
  note "palyra node join --code $code --peer ${ADDRS[0]} --listen ${ADDRS[$i]}"
  "$BIN" --data-dir "${DIRS[$i]}" node join --code "$code" --peer "${ADDRS[0]}" --listen "${ADDRS[$i]}" >"$WORK/n$((i+1)).log" 2>&1 &
  PIDS[$i]=$!
  wait_ready "$i"
  IDS[$i]=$(palyra_at "$i" status --json | json_field node_id)
  note "node $((i+1)) is ${IDS[$i]} on ${ADDRS[$i]}, pid ${PIDS[$i]}"
done

say "Step 4: wait until every node sees three alive voters (the leader promotes the joiners)."
for _ in $(seq 1 240); do
  ok=1
  for i in 0 1 2; do
    out=$(palyra_at "$i" nodes --json 2>/dev/null) || { ok=0; break; }
    [ "$(grep -c '"state": "alive"' <<<"$out")" = 3 ] && [ "$(grep -c '"voter": true' <<<"$out")" = 3 ] || { ok=0; break; }
  done
  [ "$ok" = 1 ] && break
  sleep 0.25
done
[ "$ok" = 1 ] || fail "the cluster did not reach three alive voters within 60 s"
palyra_at 1 nodes

say "Step 5: submit a job (sleep.wasm, runs 8 s) and see where the scheduler placed it."
job=$(palyra_at 1 job submit --wasm "$SLEEP_WASM" --input 8s --timeout 1m)
note "palyra job submit --wasm sleep.wasm --input 8s  →  $job (committed through Raft)"
for _ in $(seq 1 100); do
  j=$(palyra_at 1 job get "$job" --json)
  [ "$(json_field phase <<<"$j")" = running ] && break
  sleep 0.1
done
[ "$(json_field phase <<<"$j")" = running ] || fail "job $job did not start"
worker=$(json_field node_id <<<"$j")
note "job $job is running on $worker"

leader=$(palyra_at 1 status --json | json_field leader_id)
L=-1
for i in 0 1 2; do [ "${IDS[$i]}" = "$leader" ] && L=$i; done
[ "$L" -ge 0 ] || fail "leader $leader is not one of the demo's nodes"
S=$(( (L + 1) % 3 ))   # a survivor to talk to

say "Step 6: kill the leader, node $((L+1)) ($leader, pid ${PIDS[$L]}), with SIGKILL: no goodbye to anyone."
if [ "$worker" = "$leader" ]; then
  note "the job runs on the leader, so it dies with it; the new leader must re-queue it on a survivor"
else
  note "the job runs on $worker, which survives"
fi
kill -KILL "${PIDS[$L]}"
wait "${PIDS[$L]}" 2>/dev/null || true
PIDS[$L]=""
killed_at=$(date +%s.%N)

for _ in $(seq 1 300); do
  new=$(palyra_at "$S" status --json 2>/dev/null | json_field leader_id || true)
  [[ "$new" == n-* && "$new" != "$leader" ]] && break
  sleep 0.1
done
[[ "$new" == n-* && "$new" != "$leader" ]] || fail "no new leader within 30 s"
note "node $((S+1)) reports a new leader: $new, $(awk -v a="$killed_at" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s after the kill"

say "Step 7: the job finishes on a survivor."
for _ in $(seq 1 600); do
  j=$(palyra_at "$S" job get "$job" --json 2>/dev/null || true)
  phase=$(json_field phase <<<"$j")
  [ "$phase" = completed ] || [ "$phase" = failed ] && break
  sleep 0.2
done
[ "$phase" = completed ] || fail "job $job ended '$phase', want completed"
attempt=$(sed -n 's/^ *"attempt": \([0-9]*\).*/\1/p' <<<"$j")
note "job $job completed on $(json_field node_id <<<"$j") (attempt $attempt): $(json_field output <<<"$j")"
[ "$(json_field node_id <<<"$j")" != "$leader" ] || fail "the job claims to have finished on the killed node"
palyra_at "$S" nodes

say "Done: the cluster lost its leader mid-job and finished the work anyway. Stopping the nodes and removing $WORK."
