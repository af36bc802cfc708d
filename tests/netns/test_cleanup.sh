#!/usr/bin/env bash
# test_cleanup.sh CHOIR
#
# The bed leaves nothing behind, whatever way a test ends. Each scenario runs a
# child script (cleanup_child.sh) that builds a 2-host bed, starts processes in
# it (a 2-node `choir run` job whose ranks sleep, a sleeper that ignores
# SIGTERM, plain sleepers), records the bed's prefix and every PID living in
# its namespaces, and then ends in one of these ways:
#   success   exits 0                          -> EXIT trap tears down
#   failure   exits 1 (like a failed assert)   -> EXIT trap
#   timeout   bed_wait on a process that never ends, then exits 124
#   sigint    Ctrl-C (SIGINT) from outside     -> INT trap
#   sigterm   SIGTERM from outside             -> TERM trap
#   sigkill   SIGKILL (no trap can run)        -> the next bed_init/bed_reap removes it
# The bed also has qdiscs (tbf, htb). After each: no namespace with the bed's
# prefix, none of the recorded processes (PID + start time) alive, and the
# bed's state dir removed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/bed.sh"
CHOIR=${1:?usage: test_cleanup.sh CHOIR}

bed_require_root_netns || exit 77
[ -x "$CHOIR" ] || { echo "FAIL: $CHOIR is not executable" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/netns-cleanup.XXXX")
child_pid=""
on_exit() {
  # should a check fail half-way, never leave the child or its bed behind
  [ -n "$child_pid" ] && kill -KILL "$child_pid" 2>/dev/null
  [ -f "$work/prefix" ] && BED_FAMILY=${BED_FAMILY} bed_reap
  rm -rf "$work"
}
trap on_exit EXIT

# start time of a process (field 22 of /proc/PID/stat, counted after the comm)
starttime() { sed -n 's/.*) //p' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'; }

failures=0
check_clean() {
  local name=$1 prefix pid st left=""
  prefix=$(cat "$work/prefix" 2>/dev/null)
  if [ -z "$prefix" ]; then
    echo "FAIL [$name]: the child never reported its bed (see output above)"
    failures=$((failures + 1))
    return
  fi
  local ns_left
  ns_left=$(ip netns list | awk '{print $1}' | grep -E "^${prefix}-" || true)
  # a recorded process counts as left when one with the same PID and start time
  # still runs; zombies are dead (init reaps orphans a moment later)
  local t
  for ((t = 0; t < 30; t++)); do
    left=""
    while read -r pid st; do
      [ -n "$pid" ] || continue
      [ "$(starttime "$pid")" = "$st" ] || continue
      [ "$(sed -n 's/.*) \(.\).*/\1/p' "/proc/$pid/stat" 2>/dev/null)" = Z ] && continue
      left+=" $pid($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-60))"
    done <"$work/pids"
    [ -z "$left" ] && break
    sleep 0.1
  done
  local n state
  n=$(wc -l <"$work/pids")
  state=$(cat "$work/state" 2>/dev/null)
  [ -n "$state" ] && [ -d "$state" ] && left+=" (state dir $state)"
  if [ -n "$ns_left" ] || [ -n "$left" ]; then
    echo "FAIL [$name]: left behind: namespaces: ${ns_left:-none}; processes:${left:- none}"
    failures=$((failures + 1))
  else
    echo "ok   [$name]: bed $prefix gone, all $n recorded processes gone"
  fi
}

run_scenario() {
  local name=$1 expect_rc=$2 signal=${3:-}
  rm -f "$work/prefix" "$work/state" "$work/pids" "$work/ready"
  # env --default-signal: a background job of a non-interactive shell starts with
  # SIGINT ignored, and a shell cannot trap what it inherited as ignored
  env --default-signal=INT "$HERE/cleanup_child.sh" "$CHOIR" "$work" "$name" &
  child_pid=$!
  if [ -n "$signal" ]; then
    local t
    for ((t = 0; t < 600; t++)); do [ -f "$work/ready" ] && break; sleep 0.1; done
    [ -f "$work/ready" ] || echo "warning [$name]: child not ready after 60 s"
    kill "-$signal" "$child_pid"
  fi
  local t rc
  for ((t = 0; t < 900; t++)); do kill -0 "$child_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$child_pid" 2>/dev/null; then
    echo "FAIL [$name]: child still running after 90 s: SIGKILL"
    kill -KILL "$child_pid"
  fi
  wait "$child_pid"
  rc=$?
  child_pid=""
  if [ "$signal" = KILL ]; then
    # nothing could run in the child: its namespaces and processes are still
    # there. The next bed (or bed_reap) removes beds whose creator is dead.
    local prefix
    prefix=$(cat "$work/prefix" 2>/dev/null)
    if [ -z "$(ip netns list | awk '{print $1}' | grep -E "^${prefix}-" || true)" ]; then
      echo "FAIL [$name]: expected the SIGKILLed child's bed to still exist before reaping"
      failures=$((failures + 1))
    fi
    bed_reap
  fi
  if [ "$rc" != "$expect_rc" ]; then
    echo "FAIL [$name]: child exited with $rc, expected $expect_rc"
    failures=$((failures + 1))
  fi
  check_clean "$name"
}

start=$(date +%s)
run_scenario success 0
run_scenario failure 1
run_scenario timeout 124
run_scenario sigint 130 INT
run_scenario sigterm 143 TERM
run_scenario sigkill 137 KILL
echo "cleanup test: $failures failure(s) in $(($(date +%s) - start)) s"
[ "$failures" = 0 ] && echo PASS
exit $((failures > 0))
