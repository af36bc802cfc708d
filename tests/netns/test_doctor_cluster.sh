#!/usr/bin/env bash
# test_doctor_cluster.sh CHOIR
#
# `choir doctor --cluster` across namespace hosts, one rank per host:
#   1. three identical hosts: exit 0, "all ... keys equal", three reachable links
#   2. host 2 runs with another CHOIR_SPIN_US and the link between hosts 1 and
#      2 is rate-limited (htb, both directions): a nonzero exit with E604, one
#      DIFF line naming nshost2 against nshost0,nshost1, and that link (only
#      that one) marked SLOW.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/bed.sh"
source "$HERE/common.sh"
NT_CHOIR=${1:?usage: test_doctor_cluster.sh CHOIR}

bed_require_root_netns || exit 77
nt_check_choir "$NT_CHOIR" || exit 1
bed_init
bed_create 3 || exit 1

fail=0
# Host 2's rank gets CHOIR_SPIN_US=7 when DRIFT=1 (a node someone "tuned" by hand).
doctor() {
  nt_run_job 90 3 1 "$1" "$BED_STATE/$2" -- /bin/sh -c \
    '[ "$DRIFT" = 1 ] && [ "$CHOIR_HOST_ID" = nshost2 ] && export CHOIR_SPIN_US=7; exec "$0" doctor --cluster' \
    "$NT_CHOIR"
}

DRIFT=0 doctor 29600 same
rc=$?
log=$NT_LOGS/host0.log
if [ "$rc" != 0 ] || ! grep -q 'fingerprints: all [0-9]* keys equal on every host' "$log" ||
  [ "$(grep -c 'reachable, latency' "$log")" != 3 ] || grep -q SLOW "$log"; then
  echo "FAIL [same]: expected exit 0, equal fingerprints and three healthy links" >&2
  nt_dump_logs "$NT_LOGS"; fail=1
else
  grep -h 'reachable' "$log"
fi

bed_rate 1 100mbit 2 || exit 1
bed_rate 2 100mbit 1 || exit 1
export DRIFT=1
NT_EXPECT_FAILURE=1 doctor 29610 drift
rc=$?
log=$NT_LOGS/host0.log
if [ "$rc" = 0 ] || ! grep -q 'E604' "$log" ||
  ! grep -q "DIFF setting.CHOIR_SPIN_US: '[0-9]*' on nshost0,nshost1 | '7' on nshost2" "$log" ||
  ! grep -q 'nshost1 <-> nshost2: reachable.*SLOW' "$log" || [ "$(grep -c "reachable.*SLOW" "$log")" != 1 ]; then
  echo "FAIL [drift]: expected E604, the CHOIR_SPIN_US difference on nshost2 and only nshost1<->nshost2 SLOW" >&2
  nt_dump_logs "$NT_LOGS"; fail=1
else
  grep -h 'DIFF\|reachable\|E604' "$log" | cut -c1-200
fi

[ "$fail" = 0 ] && echo PASS
exit "$fail"
