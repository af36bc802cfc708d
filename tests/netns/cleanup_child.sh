#!/usr/bin/env bash
# cleanup_child.sh CHOIR WORKDIR SCENARIO - helper of test_cleanup.sh: builds a
# bed, fills it with processes, writes WORKDIR/prefix, WORKDIR/pids ("PID
# STARTTIME" of every process in the bed's namespaces) and WORKDIR/ready, then
# ends as SCENARIO says (success, failure, timeout, or waits for a signal).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/bed.sh"
CHOIR=$1 WORK=$2 SCENARIO=$3

bed_init
bed_create 2 || exit 2
echo "$BED_PREFIX" >"$WORK/prefix"
echo "$BED_STATE" >"$WORK/state"
# qdiscs to remove as well: a tbf on host 0, an htb towards host 0 on host 1
bed_rate 0 1gbit || exit 2
bed_rate 1 500mbit 0 || exit 2

# a two-node choir job whose ranks just sleep
for k in 0 1; do
  bed_spawn "$k" "$BED_STATE/launcher$k.log" env CHOIR_HOST_ID="nshost$k" \
    "$CHOIR" run --nnodes 2 --node-rank "$k" --nproc-per-node 2 --master-addr "$(bed_ip 0)" \
    --master-port 29500 --timeout 30 -- sleep 300 || exit 2
done
# a process that ignores SIGTERM (needs SIGKILL), and one with a grandchild the
# bed never heard of (found through `ip netns pids`)
bed_spawn 0 "$BED_STATE/stubborn.log" sh -c 'trap "" TERM; exec sleep 300' || exit 2
stubborn=$BED_PID
bed_spawn 1 "$BED_STATE/parent.log" sh -c 'sleep 300 & exec sleep 301' || exit 2

# wait until both launchers have started their 2 ranks: per host the launcher,
# 2 ranks, plus the extra sleepers (host 0: 1, host 1: 2)
want=(4 5)
for ((t = 0; t < 300; t++)); do
  n0=$(ip netns pids "$(bed_ns 0)" | wc -l)
  n1=$(ip netns pids "$(bed_ns 1)" | wc -l)
  [ "$n0" -ge "${want[0]}" ] && [ "$n1" -ge "${want[1]}" ] && break
  sleep 0.1
done
if [ "$n0" -lt "${want[0]}" ] || [ "$n1" -lt "${want[1]}" ]; then
  echo "cleanup_child: only $n0 + $n1 processes in the bed after 30 s" >&2
  cat "$BED_STATE"/launcher*.log >&2
  exit 3
fi
: >"$WORK/pids"
for k in 0 1; do
  for pid in $(ip netns pids "$(bed_ns "$k")"); do
    echo "$pid $(sed -n 's/.*) //p' "/proc/$pid/stat" | awk '{print $20}')" >>"$WORK/pids"
  done
done
echo "cleanup_child[$SCENARIO]: bed $BED_PREFIX with $(wc -l <"$WORK/pids") processes"
touch "$WORK/ready"

case "$SCENARIO" in
success) exit 0 ;;
failure) echo "cleanup_child: simulated assertion failure"; exit 1 ;;
timeout)
  BED_GRACE=1 bed_wait "$stubborn" 2
  exit $? ;;
*)
  for ((t = 0; t < 600; t++)); do sleep 0.1; done
  echo "cleanup_child: no signal came within 60 s" >&2
  exit 99 ;;
esac
