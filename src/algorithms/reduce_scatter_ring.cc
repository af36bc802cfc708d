// Cost: n-1 steps; each rank sends and receives (n-1)/n * N bytes (N = whole input).
//
// The ring reduce-scatter over equal blocks (block_steps.cc): partial sums
// travel to the right and grow by one contribution per hop.
#include "algorithms/algorithms.h"
#include "algorithms/block_steps.h"

namespace choir::algorithms {

Status ReduceScatterRing(Context& c, const OpArgs& a) {
  const Blocks blocks = EvenBlocks(a.count * static_cast<size_t>(c.size()), c.size());
  CHOIR_RETURN_IF_ERROR(RingReduceScatterBlocks(c, static_cast<const uint8_t*>(a.send),
                                                static_cast<uint8_t*>(a.recv), blocks));
  FinishAverage(c, a.recv, a.count);
  return Status::Ok();
}

}  // namespace choir::algorithms
