#!/bin/sh
# interleave.sh PROGRAM ARGS... - rank wrapper for `choir run` that places ranks
# round-robin over the nodes: RANK = LOCAL_RANK * GROUP_WORLD_SIZE + GROUP_RANK
# instead of the launcher's blocked GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK.
# With 2 nodes x 4 ranks, node 0 gets ranks 0,2,4,6 and node 1 gets 1,3,5,7, so
# a flat ring crosses between the nodes on every hop (the field report's case).
# `choir run` has no option for this yet (see docs/performance.md).
: "${LOCAL_RANK:?interleave.sh runs under choir run}" "${GROUP_RANK:?}" "${GROUP_WORLD_SIZE:?}"
RANK=$((LOCAL_RANK * GROUP_WORLD_SIZE + GROUP_RANK))
export RANK
exec "$@"
