// Cost: log2(p) steps (+2 when n is not a power of two p); N bytes per step.
//
// Latency-bound small messages: every rank exchanges its whole partial result
// with a partner at distance 1, 2, 4, ... Extra ranks beyond the largest power
// of two hand their input to a partner first and get the result back last.
// Both partners combine the same two values, so every rank ends with
// bit-identical results.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/recursive_doubling.h"

namespace choir::algorithms {

Status AllreduceRecursiveDoubling(Context& c, const OpArgs& a) {
  const size_t bytes = a.count * c.elem_size();
  auto* out = static_cast<uint8_t*>(a.recv);
  CopyIfDistinct(out, a.send, bytes);
  const int n = c.size();
  if (n == 1) {
    FinishAverage(c, out, a.count);
    return Status::Ok();
  }
  const patterns::RecursiveDoubling rd{c.rank(), n};
  if (rd.IsExtra()) {
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(rd.ExtraPartner(), out, bytes)}));
    return c.Run({c.Recv(rd.ExtraPartner(), out, bytes)});
  }
  const int extra = rd.ExtraPartner();
  if (extra >= 0) CHOIR_RETURN_IF_ERROR(c.Run({c.RecvReduce(extra, out, bytes)}));
  CHOIR_ASSIGN_OR_RETURN(uint8_t* tmp, c.ScratchBytes(bytes));
  for (int round = 0; round < rd.Rounds(); ++round) {
    const int partner = rd.Partner(round);
    CHOIR_RETURN_IF_ERROR(c.Run({c.Send(partner, out, bytes), c.Recv(partner, tmp, bytes)}));
    // Lower rank's value on the left on both sides: identical bits everywhere.
    if (c.rank() < partner) {
      c.reduce()(out, out, tmp, a.count);
    } else {
      c.reduce()(out, tmp, out, a.count);
    }
  }
  FinishAverage(c, out, a.count);
  if (extra >= 0) CHOIR_RETURN_IF_ERROR(c.Run({c.Send(extra, out, bytes)}));
  return Status::Ok();
}

}  // namespace choir::algorithms
