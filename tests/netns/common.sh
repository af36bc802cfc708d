# common.sh - shared by the netns tests: start one `choir run` launcher per
# namespace host and check the outcome. Source after bed.sh.
#
#   nt_start_job H P PORT LOGDIR [--interleave] -- PROGRAM ARGS...
#       one launcher per host k (node rank k), each with CHOIR_HOST_ID=nshost<k>;
#       PIDs in NT_PIDS, logs in LOGDIR/host<k>.log
#   nt_wait_job TIMEOUT_S      waits for all launchers (kills them on timeout);
#                              returns 0 when every launcher exited 0
#   nt_run_job TIMEOUT H P PORT LOGDIR [--interleave] -- PROGRAM ARGS...
#                              both of the above; logs in NT_LOGS
#   nt_dump_logs LOGDIR        prints every log (on failure)
#
# --interleave places ranks round-robin over hosts (rank = local * H + node)
# instead of `choir run`'s blocked order (rank = node * P + local), through the
# rank wrapper interleave.sh.

NT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Settings every rank gets: fail fast instead of waiting the 300 s default.
NT_CHOIR_TIMEOUT=${NT_CHOIR_TIMEOUT:-60}

nt_check_choir() {
  local choir=$1
  if [ ! -x "$choir" ]; then
    echo "FAIL: choir binary '$choir' is not executable (pass the build's bin/choir)" >&2
    return 1
  fi
}

nt_start_job() {
  local h=$1 p=$2 port=$3 logdir=$4; shift 4
  local interleave=0 k
  if [ "${1:-}" = --interleave ]; then interleave=1; shift; fi
  [ "${1:-}" = -- ] && shift
  NT_PIDS=()
  mkdir -p "$logdir"
  for ((k = 0; k < h; k++)); do
    local wrap=()
    [ "$interleave" = 1 ] && wrap=("$NT_DIR/interleave.sh")
    bed_spawn "$k" "$logdir/host$k.log" env CHOIR_HOST_ID="nshost$k" CHOIR_TIMEOUT="$NT_CHOIR_TIMEOUT" \
      "$NT_CHOIR" run --nnodes "$h" --node-rank "$k" --nproc-per-node "$p" \
      --master-addr "$(bed_ip 0)" --master-port "$port" --timeout "$NT_CHOIR_TIMEOUT" -- \
      "${wrap[@]}" "$@" || return 1
    NT_PIDS+=("$BED_PID")
  done
}

nt_wait_job() {
  local timeout=$1 k rc=0 tag="FAIL:"
  [ "${NT_EXPECT_FAILURE:-0}" = 1 ] && tag="(expected)"
  bed_wait_all "$timeout" "${NT_PIDS[@]}"
  for k in "${!NT_PIDS[@]}"; do
    if [ "${BED_RCS[k]}" != 0 ]; then
      if [ "${BED_RCS[k]}" = 124 ]; then
        echo "$tag launcher of host $k did not finish within ${timeout} s (stopped by PID)" >&2
      else
        echo "$tag launcher of host $k exited with ${BED_RCS[k]}" >&2
      fi
      rc=1
    fi
  done
  return "$rc"
}

# nt_run_job TIMEOUT H P PORT LOGDIR [--interleave] -- PROGRAM ARGS...: start and
# wait. NT_LOGS names the log dir.
nt_run_job() {
  local timeout=$1 h=$2 p=$3 port=$4 logdir=$5; shift 5
  NT_LOGS=$logdir
  nt_start_job "$h" "$p" "$port" "$logdir" "$@" || return 1
  nt_wait_job "$timeout"
}

# nt_allreduce_algos: sets NT_ALGOS (choir's allreduce algorithms, comma list)
# and NT_HIER (the name of the hierarchical one, empty if none). Asking for an
# algorithm that does not exist makes choir list them ("no algorithm '__list__'
# for allreduce; available: shm_flat, cma, hier, recursive_doubling, ring").
# Runs 2 local ranks inside host 0 of the bed.
nt_allreduce_algos() {
  bed_spawn 0 "$BED_STATE/algos.log" "$NT_CHOIR" perf -n 2 --algo __list__ --min-bytes 1M --max-bytes 1M \
    --warmup 0 --iters 1 || return 1
  bed_wait "$BED_PID" 30
  NT_ALGOS=$(grep -o 'available: .*' "$BED_STATE/algos.log" | head -1)
  NT_ALGOS=${NT_ALGOS#available: }
  if [ -z "$NT_ALGOS" ]; then
    echo "FAIL: could not list choir's allreduce algorithms:" >&2
    cat "$BED_STATE/algos.log" >&2
    return 1
  fi
  NT_HIER=$(echo "$NT_ALGOS" | tr ', ' '\n\n' | grep -i hier | head -1 || true)
}

nt_dump_logs() {
  local f
  for f in "$1"/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f (last 60 lines)"
    tail -n 60 "$f"
  done
}
