// Cost: 2(n-1) steps; each rank sends and receives 2(n-1)/n * N bytes.
//
// Reduce-scatter around the ring, then allgather around the ring. Out of place
// the first step reads the send buffer directly and every reduction combines
// the incoming block with the rank's own input, so the input is never copied.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/blocks.h"
#include "algorithms/patterns/ring.h"

namespace choir::algorithms {

Status AllreduceRing(Context& c, const OpArgs& a) {
  const int n = c.size();
  const size_t es = c.elem_size();
  const auto* in = static_cast<const uint8_t*>(a.send);
  auto* out = static_cast<uint8_t*>(a.recv);
  if (n == 1) {
    CopyIfDistinct(out, in, a.count * es);
    FinishAverage(c, out, a.count);
    return Status::Ok();
  }
  const patterns::Ring ring{c.rank(), n};
  for (int s = 0; s < ring.Steps(); ++s) {
    const patterns::Block sb = patterns::EvenBlock(a.count, n, ring.ReduceScatterSendBlock(s));
    const patterns::Block rb = patterns::EvenBlock(a.count, n, ring.ReduceScatterRecvBlock(s));
    const uint8_t* src = (s == 0 ? in : out) + sb.offset * es;
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(ring.Right(), src, sb.count * es),
                                 c.RecvReduce(ring.Left(), out + rb.offset * es, rb.count * es,
                                              in + rb.offset * es)}));
  }
  const patterns::Block mine = patterns::EvenBlock(a.count, n, c.rank());
  FinishAverage(c, out + mine.offset * es, mine.count);
  for (int s = 0; s < ring.Steps(); ++s) {
    const patterns::Block sb = patterns::EvenBlock(a.count, n, ring.AllgatherSendBlock(s));
    const patterns::Block rb = patterns::EvenBlock(a.count, n, ring.AllgatherRecvBlock(s));
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(ring.Right(), out + sb.offset * es, sb.count * es),
                                 c.Recv(ring.Left(), out + rb.offset * es, rb.count * es)}));
  }
  return Status::Ok();
}

}  // namespace choir::algorithms
