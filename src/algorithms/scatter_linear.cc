// Cost: 1 step; the root sends (n-1)/n * N bytes, to all peers at once.
#include "algorithms/algorithms.h"

namespace choir::algorithms {

Status ScatterLinear(Context& c, const OpArgs& a) {
  const size_t block = a.count * c.elem_size();
  if (c.rank() != a.root) return c.Run({c.Recv(a.root, a.recv, block)});
  const auto* in = static_cast<const uint8_t*>(a.send);
  CopyIfDistinct(a.recv, in + static_cast<size_t>(a.root) * block, block);
  std::vector<transport::Xfer> sends;
  for (int r = 0; r < c.size(); ++r) {
    if (r != a.root) sends.push_back(c.Send(r, in + static_cast<size_t>(r) * block, block));
  }
  return sends.empty() ? Status::Ok() : c.Run(sends);
}

}  // namespace choir::algorithms
