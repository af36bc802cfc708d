// Cost: ceil(log2 n) steps; each non-root rank sends N bytes once.
//
// Each rank combines what its children send (smallest subtree first, in a
// fixed order so results do not depend on timing) into its own input and
// forwards the partial result to its parent. The root ends with the result.
#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial_tree.h"

namespace choir::algorithms {

Status ReduceBinomial(Context& c, const OpArgs& a) {
  const size_t bytes = a.count * c.elem_size();
  const patterns::BinomialTree tree{c.rank(), c.size(), a.root};
  const std::vector<int> children = tree.Children();
  const bool root = c.rank() == a.root;
  uint8_t* acc = nullptr;
  if (root) {
    acc = static_cast<uint8_t*>(a.recv);
  } else if (!children.empty()) {
    CHOIR_ASSIGN_OR_RETURN(acc, c.ScratchBytes(bytes));
  }
  const uint8_t* partial = static_cast<const uint8_t*>(a.send);
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    CHOIR_RETURN_IF_ERROR(c.Run({c.RecvReduce(*it, acc, bytes, partial)}));
    partial = acc;
  }
  if (root) {
    CopyIfDistinct(acc, partial, bytes);
    FinishAverage(c, acc, a.count);
    return Status::Ok();
  }
  return c.Run({c.Send(tree.Parent(), partial, bytes)});
}

}  // namespace choir::algorithms
