#!/usr/bin/env bash
# bed.sh - a multi-host test bed on one Linux box, made of network namespaces.
#
# Topology of one bed (one run): a "switch" namespace <P>-sw holding bridge br0,
# and hosts 0..N-1, host i being namespace <P>-h<i> with interface eth0 =
# 10.<NET>.0.<i+1>/24. Each eth0 is one end of a veth pair created directly
# between the host namespace and the switch namespace (its peer is port p<i> on
# br0). Nothing is added to the root namespace: no links, no addresses, no
# routes. <P> is unique per run (creator pid + random), so parallel runs never
# share a name; addresses live only inside the bed's namespaces, so two beds
# may use the same subnet.
#
# Two ways to use it:
#
#  1. As a library (what the tests do):
#       source tests/netns/bed.sh
#       bed_require_root_netns || exit 77       # LOUD skip when not root / no `ip netns`
#       bed_init                                # unique prefix, state dir, traps
#       bed_create 2
#       bed_spawn 0 "$log" cmd args...; pid=$BED_PID
#       bed_wait "$pid" 60 || echo "rc=$BED_RC"  # kills the PID on timeout (rc 124)
#       bed_destroy                             # also run by the EXIT/INT/TERM/HUP traps
#
#  2. As a command (by hand; the state lives in $BED_STATE between calls):
#       eval "$(tests/netns/bed.sh create 3)"   # prints: export BED_STATE=...
#       tests/netns/bed.sh exec 1 ip -br addr
#       tests/netns/bed.sh spawn 0 /tmp/log iperf3 -s     # prints the PID
#       tests/netns/bed.sh rate 0 1gbit [PEER...]         # tbf, or htb per peer host
#       tests/netns/bed.sh link 0 1 mgmt0 89              # extra direct link 10.89.0.0/24
#       tests/netns/bed.sh status
#       tests/netns/bed.sh destroy
#       tests/netns/bed.sh reap                 # remove beds whose creator is dead
#
# Host isolation: with BED_ISOLATE=1 (default), exec/spawn also give the
# command its own UTS namespace (hostname <P>-h<i>), its own SysV IPC and a
# private tmpfs on /dev/shm (size BED_SHM_SIZE, default 512m), so two hosts of
# the bed never see each other's shared memory. The tests set CHOIR_HOST_ID
# explicitly as well.
#
# Rate limits (netem is not in this kernel; tbf and htb are):
#   bed_rate I RATE          tbf on host i's eth0: everything leaving host i
#   bed_rate I RATE J K ...  htb on host i's eth0: only traffic to hosts J, K..
#                            (a slow link class); other traffic is not shaped
#   bed_rate I off           remove
#
# Cleanup: bed_destroy stops every process spawned through the bed (by PID:
# SIGTERM, then SIGKILL after BED_GRACE seconds), then every process still
# inside one of the bed's namespaces (by PID, from `ip netns pids`), removes
# the qdiscs and deletes the namespaces (their veths go with them). bed_init
# installs traps so this happens on success, failure, timeout and Ctrl-C.
# Processes are never matched by name.
#
# Env: BED_NET (second octet, default 88), BED_ISOLATE (1), BED_SHM_SIZE (512m),
#      BED_GRACE (3 s), BED_KEEP (1 = keep the state dir with the logs),
#      BED_FAMILY (name prefix of all beds, default "cbed"), BED_QUIET (1 = less output).

BED_FAMILY=${BED_FAMILY:-cbed}
BED_NET=${BED_NET:-88}
BED_ISOLATE=${BED_ISOLATE:-1}
BED_SHM_SIZE=${BED_SHM_SIZE:-512m}
BED_GRACE=${BED_GRACE:-3}

bed_log() { [ "${BED_QUIET:-0}" = 1 ] || echo "bed[${BED_PREFIX:-?}]: $*" >&2; }
bed_die() { echo "bed[${BED_PREFIX:-?}]: ERROR: $*" >&2; return 1; }

# Returns 0 when the bed can run here; otherwise prints a loud SKIP banner and
# returns 1 (callers exit 77, which ctest maps to "skipped").
bed_require_root_netns() {
  local why=""
  if [ "$(id -u)" -ne 0 ]; then
    why="not running as root (uid $(id -u)); network namespaces need root (CAP_NET_ADMIN + CAP_SYS_ADMIN)"
  elif ! command -v ip >/dev/null 2>&1; then
    why="the 'ip' command (iproute2) is not installed"
  elif ! ip netns list >/dev/null 2>&1; then
    why="'ip netns list' fails here: $(ip netns list 2>&1 | head -1)"
  elif ! command -v tc >/dev/null 2>&1; then
    why="the 'tc' command (iproute2) is not installed"
  fi
  if [ -n "$why" ]; then
    {
      echo "################################################################"
      echo "### SKIPPED: multi-host netns test '${0##*/}' did NOT run:"
      echo "###   $why"
      echo "### In CI these tests run as root with iproute2 installed."
      echo "################################################################"
    } >&2
    return 1
  fi
  return 0
}

# --- names -------------------------------------------------------------------
bed_ns() { echo "${BED_PREFIX}-h$1"; }
bed_sw() { echo "${BED_PREFIX}-sw"; }
bed_ip() { echo "10.${BED_NET}.0.$(($1 + 1))"; }
bed_hosts() { cat "$BED_STATE/hosts" 2>/dev/null || echo 0; }

bed__ns_exists() { [ -e "/run/netns/$1" ]; }
bed__our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${BED_PREFIX}-(sw|h[0-9]+)$" || true
}

# --- life cycle --------------------------------------------------------------

# bed_init: pick a unique prefix, make the state dir, install the traps.
bed_init() {
  local rnd
  rnd=$(od -An -N2 -tx2 /dev/urandom | tr -d ' \n')
  # <family><creator pid>x<random>; beds made by hand (command mode) use
  # <family>m<random> instead, since their creating shell exits at once.
  if [ "${BED_MANUAL:-0}" = 1 ]; then
    BED_PREFIX="${BED_FAMILY}m$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
  else
    BED_PREFIX="${BED_FAMILY}$$x${rnd}"
  fi
  BED_STATE=$(mktemp -d "${TMPDIR:-/tmp}/${BED_PREFIX}.XXXX")
  echo "$BED_PREFIX" >"$BED_STATE/prefix"
  echo "$BED_NET" >"$BED_STATE/net"
  echo "$$" >"$BED_STATE/owner"
  : >"$BED_STATE/pids"
  BED_DESTROYED=0
  export BED_PREFIX BED_STATE
  bed_reap
  if [ "${BED_NO_TRAP:-0}" != 1 ]; then
    trap 'bed__on_exit' EXIT
    trap 'bed__on_signal INT 130' INT
    trap 'bed__on_signal TERM 143' TERM
    trap 'bed__on_signal HUP 129' HUP
  fi
}

bed__on_exit() {
  local rc=$?
  bed_destroy || rc=1
  exit "$rc"
}

bed__on_signal() {
  echo "bed[${BED_PREFIX:-?}]: caught SIG$1, tearing the bed down" >&2
  trap - EXIT
  bed_destroy
  exit "$2"
}

# Loads the state of a bed made by an earlier `bed.sh create` (command mode).
bed_load() {
  [ -n "${BED_STATE:-}" ] && [ -d "$BED_STATE" ] || bed_die "BED_STATE is not set to a bed's state dir" || return 1
  BED_PREFIX=$(cat "$BED_STATE/prefix")
  BED_NET=$(cat "$BED_STATE/net")
  BED_DESTROYED=0
}

# bed_create N: the switch namespace and hosts 0..N-1.
bed_create() {
  local n=$1 i ns sw
  [ -n "${BED_PREFIX:-}" ] || bed_die "bed_init first" || return 1
  sw=$(bed_sw)
  bed__ns_exists "$sw" && { bed_die "namespace $sw already exists"; return 1; }
  echo "$n" >"$BED_STATE/hosts"
  ip netns add "$sw" || return 1
  ip -n "$sw" link set lo up || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  # no STP, no forwarding delay: ports forward as soon as they are up
  ip -n "$sw" link set br0 type bridge stp_state 0 forward_delay 0 2>/dev/null || true
  ip -n "$sw" link set br0 up || return 1
  for ((i = 0; i < n; i++)); do
    ns=$(bed_ns "$i")
    ip netns add "$ns" || return 1
    ip -n "$ns" link set lo up || return 1
    # the veth is born with one end in each namespace; the root namespace never sees it
    ip link add eth0 netns "$ns" type veth peer name "p$i" netns "$sw" || return 1
    ip -n "$sw" link set "p$i" master br0 || return 1
    ip -n "$sw" link set "p$i" up || return 1
    ip -n "$ns" addr add "$(bed_ip "$i")/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
  done
  for ((i = 0; i < n; i++)); do
    local ok=0
    for _ in $(seq 50); do
      if ip -n "$(bed_ns "$i")" -br link show eth0 | grep -qw UP; then ok=1; break; fi
      sleep 0.1
    done
    [ "$ok" = 1 ] || { bed_die "eth0 of host $i did not come up"; return 1; }
  done
  bed_log "created $n hosts: $(for ((i = 0; i < n; i++)); do printf '%s=%s ' "$(bed_ns "$i")" "$(bed_ip "$i")"; done)"
}

# bed_link I J DEV NET: an extra direct link between hosts I and J (a veth
# pair, one end named DEV in each), addresses 10.NET.0.<I+1> and 10.NET.0.<J+1>,
# e.g. a second network (management, or a fast/slow rail) next to eth0.
bed_link() {
  local i=$1 j=$2 dev=$3 net=$4 a b
  a=$(bed_ns "$i"); b=$(bed_ns "$j")
  bed__ns_exists "$a" && bed__ns_exists "$b" || { bed_die "no host $i or $j"; return 1; }
  ip link add "$dev" netns "$a" type veth peer name "$dev" netns "$b" || return 1
  ip -n "$a" addr add "10.$net.0.$((i + 1))/24" dev "$dev" || return 1
  ip -n "$b" addr add "10.$net.0.$((j + 1))/24" dev "$dev" || return 1
  ip -n "$a" link set "$dev" up || return 1
  ip -n "$b" link set "$dev" up || return 1
  bed_log "link $dev between host $i (10.$net.0.$((i + 1))) and host $j (10.$net.0.$((j + 1)))"
}

# bed_bytes I DEV: bytes received + sent on DEV inside host I
bed_bytes() {
  local ns
  ns=$(bed_ns "$1")
  echo $(($(ip netns exec "$ns" cat "/sys/class/net/$2/statistics/rx_bytes") + \
    $(ip netns exec "$ns" cat "/sys/class/net/$2/statistics/tx_bytes")))
}

# Command prefix that enters host i (and isolates it when BED_ISOLATE=1).
bed__enter() {
  local i=$1
  BED__ENTER=(ip netns exec "$(bed_ns "$i")")
  if [ "$BED_ISOLATE" = 1 ]; then
    BED__ENTER+=(unshare --uts --ipc --mount --propagation private
      sh -c 'hostname "$0" && mount -t tmpfs -o "size=$BED_SHM_SIZE,mode=1777" tmpfs /dev/shm && exec "$@"'
      "$(bed_ns "$i")")
  fi
}

# bed_exec I CMD...: run CMD inside host I in the foreground. For anything that
# may block, prefer bed_spawn + bed_wait (a timeout, and traps run promptly).
bed_exec() {
  local i=$1; shift
  bed__ns_exists "$(bed_ns "$i")" || { bed_die "no host $i"; return 1; }
  bed__enter "$i"
  BED_SHM_SIZE=$BED_SHM_SIZE "${BED__ENTER[@]}" "$@"
}

# bed_spawn I LOG CMD...: start CMD inside host I in the background, output to
# LOG. Sets BED_PID and records it for bed_destroy. (ip netns exec, unshare and
# sh all exec, so the PID is CMD's own.)
bed_spawn() {
  local i=$1 log=$2; shift 2
  bed__ns_exists "$(bed_ns "$i")" || { bed_die "no host $i"; return 1; }
  bed__enter "$i"
  BED_SHM_SIZE=$BED_SHM_SIZE "${BED__ENTER[@]}" "$@" </dev/null >"$log" 2>&1 &
  BED_PID=$!
  echo "$BED_PID $i" >>"$BED_STATE/pids"
  return 0
}

# alive = exists and is not a zombie (state is the field after the last ')' of /proc/PID/stat)
bed__alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local st
  st=$(sed -n 's/.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ]
}

bed__forget() {
  local pid=$1
  [ -f "$BED_STATE/pids" ] || return 0
  awk -v p="$pid" '$1 != p' "$BED_STATE/pids" >"$BED_STATE/pids.new" && mv "$BED_STATE/pids.new" "$BED_STATE/pids"
}

# bed_kill PID: SIGTERM, then SIGKILL after BED_GRACE seconds.
bed_kill() {
  local pid=$1 t
  bed__alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((t = 0; t < BED_GRACE * 10; t++)); do bed__alive "$pid" || return 0; sleep 0.1; done
  bed_log "pid $pid ignored SIGTERM for ${BED_GRACE} s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# bed_wait PID TIMEOUT_S: wait for a spawned process. Returns its exit code
# (also in BED_RC); on timeout it stops the process (bed_kill) and returns 124.
bed_wait() {
  local pid=$1 timeout=$2 end rc
  end=$(($(date +%s%N) + timeout * 1000000000))
  while bed__alive "$pid"; do
    if [ "$(date +%s%N)" -ge "$end" ]; then
      bed_log "pid $pid still running after ${timeout} s: stopping it"
      bed_kill "$pid"
      wait "$pid" 2>/dev/null
      bed__forget "$pid"
      BED_RC=124
      return 124
    fi
    sleep 0.1
  done
  wait "$pid" 2>/dev/null
  rc=$?
  bed__forget "$pid"
  BED_RC=$rc
  return "$rc"
}

# bed_wait_all TIMEOUT_S PID...: waits for all with one shared deadline; stops
# the rest when it passes. Sets BED_RCS (array, same order) and returns the
# first nonzero code.
bed_wait_all() {
  local timeout=$1; shift
  local end first=0 pid i=0 rem
  end=$(($(date +%s) + timeout))
  BED_RCS=()
  for pid in "$@"; do
    rem=$((end - $(date +%s)))
    ((rem < 1)) && rem=1
    bed_wait "$pid" "$rem"
    BED_RCS[i]=$BED_RC
    i=$((i + 1))
    [ "$first" = 0 ] && [ "$BED_RC" != 0 ] && first=$BED_RC
  done
  return "$first"
}

# bed_rate I RATE [PEER...] | bed_rate I off
bed_rate() {
  local i=$1 rate=$2; shift 2
  local ns burst j
  ns=$(bed_ns "$i")
  bed__ns_exists "$ns" || { bed_die "no host $i"; return 1; }
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  [ "$rate" = off ] && return 0
  # burst: ~2 ms at the rate and never below 256 KiB, so veth GSO packets (up to 64 KiB) fit
  burst=$(bed__burst "$rate") || return 1
  if [ $# -eq 0 ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms || return 1
  else
    # htb: unclassified traffic (default class 0 = none) leaves unshaped; traffic to
    # the listed peers goes through class 1:10 at RATE.
    ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 0 || return 1
    ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:10 htb rate "$rate" ceil "$rate" \
      burst "$burst" cburst "$burst" quantum 200000 || return 1
    for j in "$@"; do
      ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
        match ip dst "$(bed_ip "$j")/32" flowid 1:10 || return 1
    done
  fi
  bed_log "host $i eth0 egress limited to $rate${*:+ towards hosts $*} (burst $burst)"
}

bed__burst() {
  local r=$1 num unit bps
  num=${r%%[a-zA-Z]*}; unit=${r#"$num"}
  case "${unit,,}" in
    gbit) bps=$((num * 1000000000)) ;;
    mbit) bps=$((num * 1000000)) ;;
    kbit) bps=$((num * 1000)) ;;
    bit | "") bps=$num ;;
    *) bed_die "rate '$r': use NNNkbit, NNNmbit or NNNgbit"; return 1 ;;
  esac
  local b=$((bps / 8 / 500))  # 2 ms worth of bytes
  ((b < 262144)) && b=262144
  echo "$b"
}

bed_status() {
  local n i ns
  n=$(bed_hosts)
  echo "bed $BED_PREFIX (state $BED_STATE)"
  for ((i = 0; i < n; i++)); do
    ns=$(bed_ns "$i")
    bed__ns_exists "$ns" || { echo "  host $i: (gone)"; continue; }
    printf '  %-20s %-14s eth0:%-6s qdisc: %s\n' "$ns" "$(bed_ip "$i")" \
      "$(ip -n "$ns" -br link show eth0 | awk '{print $2}')" \
      "$(ip netns exec "$ns" tc qdisc show dev eth0 | head -1)"
  done
  echo "  spawned pids still recorded: $(awk '{print $1}' "$BED_STATE/pids" 2>/dev/null | tr '\n' ' ')"
}

# bed_destroy: stop every process, remove qdiscs and namespaces. Idempotent.
bed_destroy() {
  [ -n "${BED_PREFIX:-}" ] || return 0
  [ "${BED_DESTROYED:-0}" = 1 ] && return 0
  local pid host ns t left rc=0
  # a second Ctrl-C must not interrupt the teardown (it is bounded: a few seconds)
  trap '' INT TERM HUP
  # 1. processes we spawned, by PID: TERM all, give them BED_GRACE s together, then KILL
  if [ -f "$BED_STATE/pids" ]; then
    while read -r pid host; do
      [ -n "$pid" ] && bed__alive "$pid" && kill -TERM "$pid" 2>/dev/null
    done <"$BED_STATE/pids"
    for ((t = 0; t < BED_GRACE * 10; t++)); do
      left=0
      while read -r pid host; do [ -n "$pid" ] && bed__alive "$pid" && left=1; done <"$BED_STATE/pids"
      [ "$left" = 0 ] && break
      sleep 0.1
    done
    while read -r pid host; do
      if [ -n "$pid" ] && bed__alive "$pid"; then
        bed_log "pid $pid (host $host) survived SIGTERM: SIGKILL"
        kill -KILL "$pid" 2>/dev/null
      fi
    done <"$BED_STATE/pids"
    while read -r pid host; do [ -n "$pid" ] && wait "$pid" 2>/dev/null; done <"$BED_STATE/pids"
  fi
  # 2. anything else still living in one of our namespaces (ranks, servers), by PID
  for ns in $(bed__our_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null; done
  done
  for ((t = 0; t < 20; t++)); do
    left=0
    for ns in $(bed__our_namespaces); do [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for ns in $(bed__our_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      bed_log "pid $pid in $ns survived SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
    done
  done
  # 3. qdiscs, then the namespaces (their veths and bridge go with them)
  for ns in $(bed__our_namespaces); do
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    for ((t = 0; t < 30; t++)); do
      ip netns del "$ns" 2>/dev/null && break
      sleep 0.1
    done
    bed__ns_exists "$ns" && { echo "bed[$BED_PREFIX]: ERROR: could not delete namespace $ns" >&2; rc=1; }
  done
  BED_DESTROYED=1
  if [ -n "${BED_STATE:-}" ] && [ -d "$BED_STATE" ]; then
    if [ "${BED_KEEP:-0}" = 1 ]; then bed_log "logs kept in $BED_STATE"; else rm -rf "$BED_STATE"; fi
  fi
  [ -n "$(bed__our_namespaces)" ] && rc=1
  bed_log "destroyed"
  # the bed is gone: signals act normally again (a script may go on after an explicit destroy)
  trap - INT TERM HUP
  return "$rc"
}

# bed_leftovers PREFIX: prints namespaces and processes of that bed that still
# exist (used by the cleanup test); empty output means clean.
bed_leftovers() {
  local p=$1 ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${p}-" || true); do
    echo "namespace $ns pids: $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
  done
}

# bed_reap: delete beds of this family whose creating shell is dead (left by a
# run that was SIGKILLed, e.g. by a ctest timeout). Live beds are not touched.
bed_reap() {
  local ns owner pid p d
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${BED_FAMILY}[0-9]+x[0-9a-f]{4}-(sw|h[0-9]+)$" || true); do
    p=${ns%-*}
    owner=${p#"$BED_FAMILY"}; owner=${owner%x*}
    kill -0 "$owner" 2>/dev/null && continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null && echo "bed: reaped stale namespace $ns (creator pid $owner is gone)" >&2
    # and that bed's state dir (logs), named <prefix>.XXXX by bed_init
    for d in "${TMPDIR:-/tmp}/$p".????; do [ -d "$d" ] && [ -f "$d/prefix" ] && rm -rf "$d"; done
  done
}

# --- command mode ------------------------------------------------------------
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -u
  cmd=${1:-}; shift || true
  case "$cmd" in
  create)
    # the state must outlive this shell: a "manual" prefix, never reaped by pid
    BED_NO_TRAP=1 BED_MANUAL=1 bed_init
    if ! bed_create "${1:?N}"; then BED_KEEP=0 bed_destroy; exit 1; fi
    echo "export BED_STATE=$BED_STATE"
    ;;
  exec) bed_load && bed_exec "$@" ;;
  spawn)
    bed_load || exit 1
    bed_spawn "$@" || exit 1
    disown "$BED_PID" 2>/dev/null || true
    echo "$BED_PID"
    ;;
  wait) bed_load && bed_wait "$@" ;;
  rate) bed_load && bed_rate "$@" ;;
  link) bed_load && bed_link "$@" ;;
  ip) bed_load && bed_ip "${1:?I}" ;;
  ns) bed_load && bed_ns "${1:?I}" ;;
  status) bed_load && bed_status ;;
  destroy) bed_load && bed_destroy ;;
  reap) bed_reap ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2 ;;
  esac
fi
