// Reduce-scatter and allgather over arbitrary blocks of a buffer, on any
// group: the building blocks of the flat algorithms (equal blocks) and of
// the hierarchical ones (per-host and per-rail steps with their own blocks).
//
// Each step picks its implementation from the group it runs on: the host's
// shared area when the group is exactly this host's ranks (single copy, or
// the shared pipe when single copy is not allowed), rings over the channels
// otherwise.
// Every rank computes the same choice from the same arguments.
//
// Thread-safety: used by the thread running the operation.
#ifndef CHOIR_ALGORITHMS_BLOCK_STEPS_H_
#define CHOIR_ALGORITHMS_BLOCK_STEPS_H_

#include <cstdint>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/local_ops.h"
#include "algorithms/patterns/blocks.h"

namespace choir::algorithms {

using Blocks = std::vector<patterns::Block>;

// Group rank i receives, at `my_out`, the combination over the group of
// in[blocks[i]] (offsets in elements). No averaging.
Status ReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks);
Status RingReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks);
Status CmaReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks);
Status PipeReduceScatterBlocks(Context& c, const uint8_t* in, uint8_t* my_out, const Blocks& blocks);  // shm_pipe.cc
// After `op` exchanged (in, out) (ExchangeAddresses; cma.cc): this rank's
// slice of the combination of every rank's `in` over `slices`, at `out`;
// with `gather`, `out` is the whole buffer and every slice lands at its
// offset. `average` finishes ReduceOp::kAvg.
Status CmaReduceWith(AreaOp& op, const uint8_t* in, uint8_t* out, const Blocks& slices, bool gather, bool average);
// A broadcast after `op` exchanged (the root's send, every rank's recv).
Status BroadcastCmaWith(AreaOp& op, const OpArgs& a);
// A reduce of `count` elements to `root` after `op` exchanged (send, recv).
Status ReduceCmaWith(AreaOp& op, const uint8_t* send, uint8_t* recv, size_t count, int root);

// In place: group rank i's block is already at buf[blocks[i]]; afterwards
// every rank has every block.
Status AllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks);
Status RingAllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks);
Status CmaAllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks);
// The same after `op` exchanged (own, buf) (ExchangeAddresses): this rank's
// block comes from `own`; it copies it into `buf` and pushes it into the
// peers' `buf`, or (heap blocks from CmaPushMaxBytes, switch_points.h) the
// peers read it from `own`.
Status CmaAllgatherWith(AreaOp& op, const uint8_t* own, uint8_t* buf, const Blocks& blocks);
Status PipeAllgatherBlocks(Context& c, uint8_t* buf, const Blocks& blocks);  // shm_pipe.cc
// Whether a pipe of `pipe_bytes` carries blocks of up to `largest_block`
// elements of `es` bytes between n ranks (shm_pipe.cc).
bool PipeFits(size_t pipe_bytes, size_t cache_bytes, int n, size_t es, size_t largest_block);
// Elements per chunk of the pipe's walks that hold n chunks a step (reduce,
// alltoall) between n ranks (shm_pipe.cc). peers_only: a step stages only
// the n-1 chunks for the peers, and only those share the L2 cache (a
// reduce_scatter combining into its output, an alltoall).
size_t PipeChunkElems(size_t pipe_bytes, size_t cache_bytes, int n, size_t es, bool peers_only = false);

// Equal blocks of `count` elements split n ways.
Blocks EvenBlocks(size_t count, int parts);

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_BLOCK_STEPS_H_
