// Recursive doubling for any world size.
//
// With p = the largest power of two <= n, the first n - p ranks of the upper
// range ("extra" ranks p..n-1) fold into partners 0..n-p-1 before the
// exchange and get the result back afterwards. The p remaining "core" ranks
// exchange with partner core ^ mask for mask = 1, 2, 4, ... < p.
//
// Thread-safety: pure functions.
#ifndef CHOIR_ALGORITHMS_PATTERNS_RECURSIVE_DOUBLING_H_
#define CHOIR_ALGORITHMS_PATTERNS_RECURSIVE_DOUBLING_H_

namespace choir::patterns {

struct RecursiveDoubling {
  int rank;
  int size;

  static int LargestPowerOfTwoAtMost(int n) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
  }
  int Core() const { return LargestPowerOfTwoAtMost(size); }
  int NumExtra() const { return size - Core(); }
  // Ranks >= Core() are extra: they fold into rank - Core() and wait for the result.
  bool IsExtra() const { return rank >= Core(); }
  // The extra rank folding into this core rank, or -1.
  int ExtraPartner() const {
    if (IsExtra()) return rank - Core();
    return rank < NumExtra() ? rank + Core() : -1;
  }
  int Rounds() const {
    int r = 0;
    for (int m = 1; m < Core(); m *= 2) ++r;
    return r;
  }
  // Partner in round `round` (0-based) for a core rank.
  int Partner(int round) const { return rank ^ (1 << round); }
};

}  // namespace choir::patterns

#endif  // CHOIR_ALGORITHMS_PATTERNS_RECURSIVE_DOUBLING_H_
