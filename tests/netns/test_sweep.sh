#!/usr/bin/env bash
# test_sweep.sh CHOIR HOSTS RANKS_PER_HOST [--interleave] [SWEEP ARGS...]
#
# Correctness of every collective across namespace hosts: one `choir run`
# launcher per host (node rank k, CHOIR_HOST_ID=nshost<k>, private /dev/shm),
# all running `choir sweep`. Passes when every launcher exits 0, rank 0
# prints ALL OK, every rank counts P ranks on its host, and (when choir has a
# hierarchical allreduce and P > 1) the sweep's allreduce used it. Exit 77 (skipped, with a loud banner) when not root or
# `ip netns` is unavailable.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/bed.sh"
source "$HERE/common.sh"

NT_CHOIR=${1:?usage: test_sweep.sh CHOIR HOSTS RANKS_PER_HOST [--interleave] [SWEEP ARGS...]}
H=${2:?}
P=${3:?}
shift 3
MODE=()
if [ "${1:-}" = --interleave ]; then MODE=(--interleave); shift; fi
TIMEOUT=${NT_TIMEOUT:-150}

bed_require_root_netns || exit 77
nt_check_choir "$NT_CHOIR" || exit 1
bed_init
bed_create "$H" || exit 1

nt_allreduce_algos || exit 1
logs="$BED_STATE/logs"
echo "netns sweep: $H hosts x $P ranks${MODE:+ (interleaved)}, choir sweep $*"
start=$(date +%s)
ok=1
nt_run_job "$TIMEOUT" "$H" "$P" 29500 "$logs" "${MODE[@]}" -- \
  env CHOIR_LOG_LEVEL=info CHOIR_LOG_SUBSYS=INIT "$NT_CHOIR" sweep "$@" || ok=0
logs=$NT_LOGS
if ! grep -q '^\[0\] ALL OK' "$logs/host0.log"; then
  echo "FAIL: rank 0 did not print ALL OK" >&2
  ok=0
fi
# Every rank of a multi-host job must see the other hosts as other hosts:
# a sweep table is printed only by rank 0; check it names $((H * P)) ranks.
if ! grep -q "^\[0\] choir sweep: $((H * P)) ranks" "$logs/host0.log"; then
  echo "FAIL: rank 0 did not report $((H * P)) ranks" >&2
  ok=0
fi
# Each rank must count exactly P ranks on its own host: CHOIR_HOST_ID and the
# namespaces really make separate hosts (INIT log: "joined ... (P local ranks").
joined=$(cat "$logs"/host*.log | grep -c ' joined .* local rank' || true)
if [ "$joined" = 0 ]; then
  echo "NOTE: no 'joined ... local ranks' INIT lines (log format changed?): host check skipped"
else
  good=$(cat "$logs"/host*.log | grep -c " joined .*($P local rank" || true)
  if [ "$joined" != $((H * P)) ] || [ "$good" != $((H * P)) ]; then
    echo "FAIL: expected $((H * P)) ranks each seeing $P local ranks; got $joined joined lines, $good with $P:" >&2
    cat "$logs"/host*.log | grep ' joined ' >&2
    ok=0
  fi
fi
# With a hierarchical algorithm in choir and several ranks per host, the
# default selection must have used it for allreduce somewhere in the sweep,
# so these tests really exercise it across namespace hosts.
if [ -n "$NT_HIER" ] && [ "$H" -gt 1 ] && [ "$P" -gt 1 ]; then
  row=$(grep -E '^\[0\] allreduce +[0-9]' "$logs/host0.log" | head -1)
  if ! echo "$row" | grep -qw "$NT_HIER"; then
    echo "FAIL: the sweep's allreduce never selected '$NT_HIER' on $H hosts x $P ranks: ${row#\[0\] }" >&2
    ok=0
  fi
fi
if [ "$ok" = 1 ]; then
  sed -n 's/^\[0\] //p' "$logs/host0.log" | grep -v ' INFO '  
  echo "PASS: $H hosts x $P ranks${MODE:+ (interleaved)}: every launcher exited 0, ALL OK ($(($(date +%s) - start)) s)"
  exit 0
fi
nt_dump_logs "$logs"
exit 1
