// Cost: 1 step; the root receives (n-1)/n * N bytes, all peers at once.
#include "algorithms/algorithms.h"

namespace choir::algorithms {

Status GatherLinear(Context& c, const OpArgs& a) {
  const size_t block = a.count * c.elem_size();
  if (c.rank() != a.root) return c.Run({c.Send(a.root, a.send, block)});
  auto* out = static_cast<uint8_t*>(a.recv);
  CopyIfDistinct(out + static_cast<size_t>(a.root) * block, a.send, block);
  std::vector<transport::Xfer> recvs;
  for (int r = 0; r < c.size(); ++r) {
    if (r != a.root) recvs.push_back(c.Recv(r, out + static_cast<size_t>(r) * block, block));
  }
  return recvs.empty() ? Status::Ok() : c.Run(recvs);
}

}  // namespace choir::algorithms
