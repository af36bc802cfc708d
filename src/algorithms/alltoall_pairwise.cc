// Cost: n-1 steps; each rank sends and receives (n-1)/n * N bytes.
//
// In step s every rank sends to rank+s and receives from rank-s, so each step
// pairs every rank with one sender and one receiver. Handles equal blocks and
// per-peer splits. In place, the input is first copied to scratch because a
// block may be received before it has been sent.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/blocks.h"
#include "algorithms/patterns/pairwise.h"

namespace choir::algorithms {

Status AlltoallPairwise(Context& c, const OpArgs& a) {
  const int n = c.size();
  const size_t es = c.elem_size();
  const auto sblocks = patterns::BlocksFromCounts(a.SendCounts(n));
  const auto rblocks = patterns::BlocksFromCounts(a.RecvCounts(n));
  const auto* in = static_cast<const uint8_t*>(a.send);
  auto* out = static_cast<uint8_t*>(a.recv);
  if (in == out && n > 1) {
    const size_t total = (sblocks.back().offset + sblocks.back().count) * es;
    CHOIR_ASSIGN_OR_RETURN(uint8_t* copy, c.ScratchBytes(total));
    kernels::CopyBytes(copy, in, total, false);
    in = copy;
  }
  const size_t me = static_cast<size_t>(c.rank());
  CopyIfDistinct(out + rblocks[me].offset * es, in + sblocks[me].offset * es, sblocks[me].count * es);
  const patterns::Pairwise pw{c.rank(), n};
  for (int s = 1; s <= pw.Steps(); ++s) {
    const auto to = static_cast<size_t>(pw.SendTo(s));
    const auto from = static_cast<size_t>(pw.RecvFrom(s));
    CHOIR_RETURN_IF_ERROR(
        c.Run({c.Send(static_cast<int>(to), in + sblocks[to].offset * es, sblocks[to].count * es),
               c.Recv(static_cast<int>(from), out + rblocks[from].offset * es, rblocks[from].count * es)}));
  }
  return Status::Ok();
}

}  // namespace choir::algorithms
