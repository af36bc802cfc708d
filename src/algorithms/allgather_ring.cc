// Cost: n-1 steps; each rank sends and receives (n-1)/n * N bytes (N = whole output).
//
// Blocks circulate around the ring, one hop per step (block_steps.cc). Serves
// equal blocks (Allgather) and per-rank counts (AllgatherV) alike.
#include "algorithms/algorithms.h"
#include "algorithms/block_steps.h"

namespace choir::algorithms {

Status AllgatherRing(Context& c, const OpArgs& a) {
  const Blocks blocks = patterns::BlocksFromCounts(a.RecvCounts(c.size()));
  auto* out = static_cast<uint8_t*>(a.recv);
  const auto& mine = blocks[static_cast<size_t>(c.rank())];
  CopyIfDistinct(out + mine.offset * c.elem_size(), a.send, mine.count * c.elem_size());
  return RingAllgatherBlocks(c, out, blocks);
}

}  // namespace choir::algorithms
