#!/usr/bin/env bash
# test_ifname.sh CHOIR
#
# Interface selection across namespace hosts. Two hosts, each with eth0 (the
# switch network, where the master address lives) and a second direct link
# "rail0" (another subnet). 2 hosts x 1 rank:
#   1. no CHOIR_SOCKET_IFNAME: data goes over eth0 (the interface that routes
#      to the store host), not rail0
#   2. CHOIR_SOCKET_IFNAME=rail0: data goes over rail0; eth0 carries only the
#      rendezvous
#   3. CHOIR_SOCKET_IFNAME=lo: fails fast (< 30 s, not at the 60 s deadline)
#      with E308 naming the loopback address
#   4. CHOIR_SOCKET_IFNAME=nosuch: fails fast with E308 listing the interfaces
# Traffic is measured with the byte counters of each interface in host 1.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/bed.sh"
source "$HERE/common.sh"
NT_CHOIR=${1:?usage: test_ifname.sh CHOIR}

bed_require_root_netns || exit 77
nt_check_choir "$NT_CHOIR" || exit 1
bed_init
bed_create 2 || exit 1
bed_link 0 1 rail0 $((BED_NET + 1)) || exit 1

fail=0
port=29500
PAYLOAD=$((64 << 20))  # 4 x 16 MiB allreduce: each rank sends >= 64 MiB

# run_case NAME IFNAME: a 2 x 1 job moving PAYLOAD bytes; sets RC, ETH, RAIL, SECS
run_case() {
  local name=$1 ifname=$2 e0 r0 t0
  port=$((port + 10))
  e0=$(bed_bytes 1 eth0); r0=$(bed_bytes 1 rail0); t0=$(date +%s)
  nt_run_job 60 2 1 "$port" "$BED_STATE/$name" -- env ${ifname:+CHOIR_SOCKET_IFNAME=$ifname} \
    "$NT_CHOIR" perf --op allreduce --min-bytes 16M --max-bytes 16M --iters 4 --warmup 0
  RC=$?
  SECS=$(($(date +%s) - t0))
  ETH=$(($(bed_bytes 1 eth0) - e0)); RAIL=$(($(bed_bytes 1 rail0) - r0))
  echo "$name: exit $RC after $SECS s; host 1 moved $((ETH >> 20)) MiB on eth0, $((RAIL >> 20)) MiB on rail0"
}

run_case default ""
if [ "$RC" != 0 ] || [ "$ETH" -lt "$PAYLOAD" ] || [ "$RAIL" -gt $((1 << 20)) ]; then
  echo "FAIL [default]: expected success with the data on eth0 (the route to the store host)" >&2
  nt_dump_logs "$NT_LOGS"; fail=1
fi

run_case rail0 rail0
if [ "$RC" != 0 ] || [ "$RAIL" -lt "$PAYLOAD" ] || [ "$ETH" -gt $((4 << 20)) ]; then
  echo "FAIL [rail0]: expected success with the data on rail0 and only the rendezvous on eth0" >&2
  nt_dump_logs "$NT_LOGS"; fail=1
fi

NT_EXPECT_FAILURE=1 run_case loopback lo
if [ "$RC" = 0 ] || [ "$SECS" -ge 30 ] || ! grep -q 'E308 .*loopback address 127\.' "$NT_LOGS"/host*.log; then
  echo "FAIL [loopback]: expected a fast E308 naming the loopback address (exit $RC after $SECS s)" >&2
  nt_dump_logs "$NT_LOGS"; fail=1
else
  grep -ho 'E308 .*' "$NT_LOGS/host0.log" | head -1 | cut -c1-300
fi

NT_EXPECT_FAILURE=1 run_case missing nosuch
if [ "$RC" = 0 ] || [ "$SECS" -ge 30 ] || ! grep -q "E308 .*'nosuch' matches no interface.*eth0=10\.$BED_NET\.0\." "$NT_LOGS"/host*.log; then
  echo "FAIL [missing]: expected a fast E308 listing this host's interfaces (exit $RC after $SECS s)" >&2
  nt_dump_logs "$NT_LOGS"; fail=1
else
  grep -ho 'E308 .*' "$NT_LOGS/host0.log" | head -1 | cut -c1-300
fi

[ "$fail" = 0 ] && echo PASS
exit "$fail"
