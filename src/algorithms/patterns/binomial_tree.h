// Binomial tree rooted at any rank, in relative numbering v = (rank - root) mod n.
//
// Rank v's parent is v with its lowest set bit cleared; its children are
// v + 2^k for every 2^k below v's lowest set bit (all powers for the root)
// while v + 2^k < n. Broadcast sends to children from the largest subtree
// down; reduce receives from the smallest subtree up, so the deepest
// subtrees start earliest. Depth is ceil(log2 n).
//
// Thread-safety: pure functions.
#ifndef CHOIR_ALGORITHMS_PATTERNS_BINOMIAL_TREE_H_
#define CHOIR_ALGORITHMS_PATTERNS_BINOMIAL_TREE_H_

#include <vector>

namespace choir::patterns {

struct BinomialTree {
  int rank;
  int size;
  int root;

  int Relative(int r) const { return ((r - root) % size + size) % size; }
  int Absolute(int v) const { return (v + root) % size; }

  // -1 for the root.
  int Parent() const {
    const int v = Relative(rank);
    if (v == 0) return -1;
    return Absolute(v & (v - 1));
  }
  // Children in broadcast order (largest subtree first).
  std::vector<int> Children() const {
    const int v = Relative(rank);
    int limit = 1;
    if (v == 0) {
      while (limit < size) limit <<= 1;
    } else {
      limit = v & -v;
    }
    std::vector<int> out;
    for (int m = limit >> 1; m >= 1; m >>= 1) {
      if (v + m < size) out.push_back(Absolute(v + m));
    }
    return out;
  }
};

}  // namespace choir::patterns

#endif  // CHOIR_ALGORITHMS_PATTERNS_BINOMIAL_TREE_H_
