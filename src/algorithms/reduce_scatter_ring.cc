// Cost: n-1 steps; each rank sends and receives (n-1)/n * N bytes (N = whole input).
//
// The ring reduce-scatter: partial sums travel to the right and grow by one
// contribution per hop. Intermediate blocks live in two scratch blocks; the
// last hop lands in the output, combined with the rank's own input block.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/ring.h"

namespace choir::algorithms {

Status ReduceScatterRing(Context& c, const OpArgs& a) {
  const int n = c.size();
  const size_t block = a.count * c.elem_size();  // a.count = elements per rank
  const auto* in = static_cast<const uint8_t*>(a.send);
  auto* out = static_cast<uint8_t*>(a.recv);
  const int r = c.rank();
  if (n == 1) {
    CopyIfDistinct(out, in, block);
    FinishAverage(c, out, a.count);
    return Status::Ok();
  }
  CHOIR_ASSIGN_OR_RETURN(uint8_t* scratch, c.ScratchBytes(2 * block));
  uint8_t* bufs[2] = {scratch, scratch + block};
  const patterns::Ring ring{r, n};
  for (int s = 0; s < ring.Steps(); ++s) {
    const int send_block = ring.ReduceScatterSendBlock(s);
    const int recv_block = ring.ReduceScatterRecvBlock(s);
    const uint8_t* src = s == 0 ? in + static_cast<size_t>(send_block) * block : bufs[(s - 1) % 2];
    uint8_t* dst = s == ring.Steps() - 1 ? out : bufs[s % 2];
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(ring.Right(), src, block),
                                 c.RecvReduce(ring.Left(), dst, block,
                                              in + static_cast<size_t>(recv_block) * block)}));
  }
  FinishAverage(c, out, a.count);
  return Status::Ok();
}

}  // namespace choir::algorithms
