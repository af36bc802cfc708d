#!/usr/bin/env bash
# benchmarks/multihost/run.sh [BUILD_DIR] - choir across network-namespace hosts.
#
# One bed of 2 namespace hosts (tests/netns/bed.sh: veth into a switch
# namespace, nothing in the root namespace, torn down on every exit path), and
# in each repetition, interleaved, separate process launches of:
#   (a) iperf3, one TCP stream host1 -> host0 (the link's single-stream figure),
#       the same with --bidir (one stream each way at once, as in a 2-rank allreduce),
#       then choir allreduce 2 hosts x 1 rank, 64-256 MiB     target busbw >= 80 % of iperf3
#   (b) 2 hosts x 2 ranks, 16-256 MiB: default vs --algo ring  target >= 1.5x (hierarchical)
#   (c) 2 hosts x 4 ranks interleaved (rank = local*2 + node) with tc tbf RATE on
#       both eth0: default vs --algo ring (and ring with blocked placement)
#                                                               target >= 3x (hierarchical)
#   (d) gloo (Debian python3-torch) on the same hosts and shapes as (a), (b), (c)
# then benchmarks/multihost/summarize.py prints medians (min-max) and the ratios.
#
# Env: REPS (3), RATE (1gbit), OUT (default BUILD_DIR/multihost-results),
#      ONLY (space-separated config names to run, default all), PYTHON (/usr/bin/python3).
# Needs root (network namespaces), iperf3, python3-torch for (d).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build/release}" && pwd) || exit 2
CHOIR=$BUILD/bin/choir
REPS=${REPS:-3}
RATE=${RATE:-1gbit}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-$BUILD/multihost-results}
source "$ROOT/tests/netns/bed.sh"
source "$ROOT/tests/netns/common.sh"
NT_CHOIR=$CHOIR

bed_require_root_netns || exit 77
[ -x "$CHOIR" ] || { echo "no $CHOIR: build first (cmake --build --preset release)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 2; }
have_torch=1
"$PYTHON" -c 'import torch.distributed' 2>/dev/null || { have_torch=0; echo "note: no torch for $PYTHON: gloo runs skipped"; }

mkdir -p "$OUT/raw" "$OUT/logs"
rm -f "$OUT"/raw/*.json "$OUT/raw/load.txt" "$OUT/raw/failures.txt"
bed_init
bed_create 2 || exit 1

port=30000
next_port() { port=$((port + 10)); }

# choir perf over H hosts x P ranks; $1 = result name, rest: H P placement perf-args...
run_choir() {
  local name=$1 h=$2 p=$3 place=$4; shift 4
  local logs="$OUT/logs/$name" mode=()
  [ "$place" = interleaved ] && mode=(--interleave)
  rm -rf "$logs" "$logs.retry"
  next_port
  if ! nt_run_job 600 "$h" "$p" "$port" "$logs" "${mode[@]}" -- \
    "$CHOIR" perf --op allreduce --check --json "$OUT/raw/$name.json" "$@"; then
    nt_dump_logs "$NT_LOGS"
    return 1
  fi
  grep -E '^\[0\] +[0-9]+ ' "$NT_LOGS/host0.log" | sed "s/^\[0\]/  $name/"
}

# gloo over H hosts x P ranks; $1 = result name, rest: H P placement gloo-args...
run_gloo() {
  local name=$1 h=$2 p=$3 place=$4; shift 4
  [ "$have_torch" = 1 ] || return 0
  local logs="$OUT/logs/$name" k l r pids=()
  rm -rf "$logs"; mkdir -p "$logs"
  next_port
  for ((k = 0; k < h; k++)); do
    for ((l = 0; l < p; l++)); do
      if [ "$place" = interleaved ]; then r=$((l * h + k)); else r=$((k * p + l)); fi
      bed_spawn "$k" "$logs/rank$r.log" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
        "$PYTHON" "$HERE/gloo_allreduce.py" --rank "$r" --world-size $((h * p)) \
        --init "tcp://$(bed_ip 0):$port" --json "$OUT/raw/$name.json" "$@" || return 1
      pids+=("$BED_PID")
    done
  done
  if ! bed_wait_all 600 "${pids[@]}"; then
    echo "gloo run $name failed (exit codes ${BED_RCS[*]})" >&2
    nt_dump_logs "$logs"
    return 1
  fi
  sed "s/^/  $name: /" "$logs/rank0.log"
}

# iperf3 host1 -> host0, one TCP stream, 5 s; extra args e.g. --bidir (both
# directions at once, what a 2-rank allreduce does)
run_iperf() {
  local name=$1 spid cpid; shift
  next_port
  bed_spawn 0 "$OUT/logs/$name.server.log" iperf3 -s -1 -B "$(bed_ip 0)" -p "$port" || return 1
  spid=$BED_PID
  sleep 0.5
  bed_spawn 1 "$OUT/raw/$name.iperf.json" iperf3 -c "$(bed_ip 0)" -p "$port" -t 5 -P 1 -J "$@" || return 1
  cpid=$BED_PID
  bed_wait "$cpid" 30 || return 1
  bed_wait "$spid" 5
  "$PYTHON" -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]; print("  %s: %.2f Gbit/s%s" % (sys.argv[2], e["sum_received"]["bits_per_second"]/1e9, " (reverse direction %.2f)" % (e["sum_received_bidir_reverse"]["bits_per_second"]/1e9) if "sum_received_bidir_reverse" in e else ""))' \
    "$OUT/raw/$name.iperf.json" "$name"
}

# runs "$@" and records a failure (the run's name is the first argument after the function)
try() {
  "$@" && return 0
  echo "$2" >>"$OUT/raw/failures.txt"
  echo "  ($2 FAILED; see $OUT/logs/$2*)"
  failed=1
}

want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

failed=0
start=$(date +%s)
for ((rep = 1; rep <= REPS; rep++)); do
  echo "=== repetition $rep of $REPS ($(($(date +%s) - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "$rep $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/raw/load.txt"
  bed_rate 0 off; bed_rate 1 off
  want a && try run_iperf "a_iperf3__rep$rep"
  want a && try run_iperf "a_iperf3bidir__rep$rep" --bidir
  want a && try run_choir "a_choir_2x1__rep$rep" 2 1 blocked --min-bytes 64M --max-bytes 256M --time-per-size 1 --warmup 2
  want d && try run_gloo "a_gloo_2x1__rep$rep" 2 1 blocked --sizes 64M,128M,256M --iters 5 --warmup 1
  want b && try run_choir "b_choir_2x2_default__rep$rep" 2 2 blocked --min-bytes 16M --max-bytes 256M --step-factor 4 --time-per-size 1 --warmup 2
  want b && try run_choir "b_choir_2x2_ring__rep$rep" 2 2 blocked --min-bytes 16M --max-bytes 256M --step-factor 4 --time-per-size 1 --warmup 2 --algo ring
  want d && try run_gloo "b_gloo_2x2__rep$rep" 2 2 blocked --sizes 16M,64M,256M --iters 5 --warmup 1
  if want c || want d; then
    bed_rate 0 "$RATE"; bed_rate 1 "$RATE"
    want c && try run_choir "c_choir_2x4i_default__rep$rep" 2 4 interleaved --min-bytes 16M --max-bytes 64M --step-factor 4 --iters 3 --warmup 1
    want c && try run_choir "c_choir_2x4i_ring__rep$rep" 2 4 interleaved --min-bytes 16M --max-bytes 64M --step-factor 4 --iters 3 --warmup 1 --algo ring
    want c && try run_choir "c_choir_2x4b_ring__rep$rep" 2 4 blocked --min-bytes 16M --max-bytes 64M --step-factor 4 --iters 3 --warmup 1 --algo ring
    want d && try run_gloo "c_gloo_2x4i__rep$rep" 2 4 interleaved --sizes 16M,64M --iters 3 --warmup 1
    bed_rate 0 off; bed_rate 1 off
  fi
done
echo "$((REPS + 1)) $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/raw/load.txt"
echo "=== done in $(($(date +%s) - start)) s; raw results in $OUT/raw"
"$PYTHON" "$HERE/summarize.py" "$OUT/raw" --rate "$RATE" | tee "$OUT/summary.md"
exit "$failed"
