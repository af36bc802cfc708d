// Cost: n-1 steps; each rank sends and receives (n-1)/n * N bytes (N = whole output).
//
// Blocks circulate around the ring, one hop per step. Serves equal blocks
// (Allgather) and per-rank counts (AllgatherV) alike.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/blocks.h"
#include "algorithms/patterns/ring.h"

namespace choir::algorithms {

Status AllgatherRing(Context& c, const OpArgs& a) {
  const int n = c.size();
  const size_t es = c.elem_size();
  std::vector<size_t> counts = a.recv_counts;
  if (a.kind == CollKind::kAllgather) counts.assign(static_cast<size_t>(n), a.count);
  const std::vector<patterns::Block> blocks = patterns::BlocksFromCounts(counts);
  auto* out = static_cast<uint8_t*>(a.recv);
  const patterns::Block& mine = blocks[static_cast<size_t>(c.rank())];
  CopyIfDistinct(out + mine.offset * es, a.send, mine.count * es);
  const patterns::Ring ring{c.rank(), n};
  for (int s = 0; s < ring.Steps(); ++s) {
    const patterns::Block& sb = blocks[static_cast<size_t>(ring.AllgatherSendBlock(s))];
    const patterns::Block& rb = blocks[static_cast<size_t>(ring.AllgatherRecvBlock(s))];
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(ring.Right(), out + sb.offset * es, sb.count * es),
                                 c.Recv(ring.Left(), out + rb.offset * es, rb.count * es)}));
  }
  return Status::Ok();
}

}  // namespace choir::algorithms
