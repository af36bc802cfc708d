// Cost: ceil(log2 n) steps; the root sends N bytes to each of its log2(n) children.
//
// Each rank receives the whole buffer from its parent, then forwards it to
// its children, largest subtree first.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial_tree.h"

namespace choir::algorithms {

Status BroadcastBinomial(Context& c, const OpArgs& a) {
  const size_t bytes = a.count * c.elem_size();
  auto* buf = static_cast<uint8_t*>(a.recv);
  const patterns::BinomialTree tree{c.rank(), c.size(), a.root};
  if (c.rank() == a.root) {
    CopyIfDistinct(buf, a.send, bytes);
  } else {
    CHOIR_RETURN_IF_ERROR(c.Run({c.Recv(tree.Parent(), buf, bytes)}));
  }
  std::vector<transport::Xfer> sends;
  for (int child : tree.Children()) sends.push_back(c.Send(child, buf, bytes));
  return sends.empty() ? Status::Ok() : c.Run(sends);
}

}  // namespace choir::algorithms
